// A process other than the fakes publishing KV cache events exactly as vLLM's
// ZmqEventPublisher frames them, with zeromq and msgpack directly: one PUB and one ROUTER
// (replay) per worker, on loopback ports it prints. Worker 0 answers replays in the older form
// ([seq, payload]), the others as vLLM >= 0.26 ([topic, seq, payload]).
// stdin: one JSON command per line, {worker, encoding: 'map' | 'array', events: [...]} with
// hashes as decimal strings; stdout: {"published": seq} per command.
import { createInterface } from 'node:readline';
import { Encoder } from '@msgpack/msgpack';
import { Publisher, Router } from 'zeromq';

const count = Number(process.argv[2] ?? 1);
const topic = process.argv[3] ?? 'kv';
const encoder = new Encoder({ useBigInt64: true });
const workers = [];
for (let i = 0; i < count; i++) {
  const pub = new Publisher({ linger: 0 });
  const router = new Router({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  await router.bind('tcp://127.0.0.1:*');
  const worker = { pub, router, seq: 0n, buffer: [], legacy: i === 0 };
  workers.push(worker);
  void (async () => {
    for await (const [identity, , start] of router) {
      const from = start.readBigUInt64BE(0);
      const head = worker.legacy ? [] : [Buffer.from(topic)];
      for (const { seq, payload } of worker.buffer) {
        if (seq >= from) await router.send([identity, Buffer.alloc(0), ...head, frame(seq), payload]);
      }
      await router.send([identity, Buffer.alloc(0), ...head, Buffer.alloc(8, 0xff), Buffer.alloc(0)]);
    }
  })();
}
process.stdout.write(
  `${JSON.stringify({ endpoints: workers.map((w) => ({ kvEvents: w.pub.lastEndpoint, kvEventsReplay: w.router.lastEndpoint })) })}\n`,
);

function frame(seq) {
  const out = Buffer.alloc(8);
  out.writeBigUInt64BE(seq);
  return out;
}

const hash = (value) => (value === null ? null : BigInt(value));

function encodeEvent(event, encoding) {
  const hashes = (event.block_hashes ?? []).map(hash);
  if (encoding === 'map') {
    return event.type === 'BlockStored'
      ? {
          ...event,
          block_hashes: hashes,
          parent_block_hash: hash(event.parent_block_hash ?? null),
          lora_id: null,
          medium: 'GPU',
          lora_name: null,
        }
      : event.type === 'BlockRemoved'
        ? { type: 'BlockRemoved', block_hashes: hashes, medium: 'GPU' }
        : { type: event.type };
  }
  if (event.type === 'BlockStored') {
    return [
      'BlockStored',
      hashes,
      hash(event.parent_block_hash ?? null),
      event.token_ids,
      event.block_size,
      null,
      'GPU',
      null,
    ];
  }
  if (event.type === 'BlockRemoved') return ['BlockRemoved', hashes, 'GPU'];
  return [event.type];
}

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === '') continue;
  const { worker: index, encoding, events } = JSON.parse(line);
  const worker = workers[index];
  const seq = worker.seq++;
  const payload = encoder.encode([Date.now() / 1000, events.map((event) => encodeEvent(event, encoding)), 0]);
  worker.buffer.push({ seq, payload });
  await worker.pub.send([topic, frame(seq), payload]);
  process.stdout.write(`${JSON.stringify({ published: Number(seq) })}\n`);
}
for (const { pub, router } of workers) {
  pub.close();
  router.close();
}
