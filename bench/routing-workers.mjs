// Child process of bench/routing.mjs: prefix-caching fake vLLM workers, in a process of their
// own so that they do not share an event loop with the client or the proxy. Prints one JSON line
// with their URLs, runs until stdin ends.
//   node bench/routing-workers.mjs <prefill count> <decode count> <capacity blocks> <ms per token>
import { startFakeWorker } from 'disagg/testing';

const [prefillCount, decodeCount, capacityBlocks, msPerToken] = process.argv.slice(2).map(Number);
const prefixCache = { blockChars: 64, capacityBlocks, msPerToken };
const prefill = await Promise.all(
  Array.from({ length: prefillCount }, () =>
    startFakeWorker({ role: 'prefill', protocol: 'vllm', prefixCache, maxModelLen: 1 << 20 }),
  ),
);
const decode = await Promise.all(
  Array.from({ length: decodeCount }, () =>
    startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 8, tokenIntervalMs: 2, maxModelLen: 1 << 20 }),
  ),
);
console.log(JSON.stringify({ prefill: prefill.map((w) => w.url), decode: decode.map((w) => w.url) }));
process.stdin.resume();
process.stdin.on('end', async () => {
  await Promise.all([...prefill, ...decode].map((worker) => worker.close()));
  process.exit(0);
});
