// Child process of bench/routing-fleet.mjs: fake vLLM workers whose KV caches in token blocks
// publish their KV events over ZMQ (disagg/testing's kvCache). Prints one JSON line with their
// URLs and event endpoints; stdin: "restart <i>" restarts prefill worker i's engine (its cache
// empty, its event sequence back at 0); the end of stdin closes them.
//   node bench/fleet-workers.mjs <prefill count> <decode count> <capacity blocks> <ms per token>
import { createInterface } from 'node:readline';
import { startFakeWorker } from 'disagg/testing';

const [prefillCount, decodeCount, capacityBlocks, msPerToken] = process.argv.slice(2).map(Number);
const prefill = await Promise.all(
  Array.from({ length: prefillCount }, () =>
    startFakeWorker({
      role: 'prefill',
      protocol: 'vllm',
      kvCache: { blockSize: 16, capacityBlocks, msPerToken },
      maxModelLen: 1 << 20,
    }),
  ),
);
const decode = await Promise.all(
  Array.from({ length: decodeCount }, () =>
    startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 8, tokenIntervalMs: 2, maxModelLen: 1 << 20 }),
  ),
);
console.log(
  JSON.stringify({
    prefill: prefill.map((w) => ({
      url: w.url,
      kvEvents: w.kvCache.publisher.endpoint,
      kvEventsReplay: w.kvCache.publisher.replayEndpoint,
    })),
    decode: decode.map((w) => w.url),
  }),
);
for await (const line of createInterface({ input: process.stdin })) {
  const [command, index] = line.split(' ');
  if (command === 'restart') prefill[Number(index)]?.kvCache.restart();
}
await Promise.all([...prefill, ...decode].map((worker) => worker.close()));
process.exit(0);
