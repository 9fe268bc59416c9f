// Runs one benchmark case in this process and prints one JSON line. Started by run.mjs with
// --expose-gc, one process per case and pass, so that no case warms the JIT for another.
import { GCProfiler } from 'node:v8';
import { CASES, concurrent } from './cases.mjs';

const [kind, name, ...rest] = process.argv.slice(2);
const options = Object.fromEntries(rest.map((arg) => arg.replace(/^--/, '').split('=')));
const items = Number(options.items ?? 1_000_000);
const rounds = Number(options.rounds ?? 5);

function collect() {
  globalThis.gc();
  globalThis.gc();
}

/** Reads exactly `count` items, then closes the stream (the end may be held by a pending prefill). */
async function read(stream, count) {
  const iterator = stream[Symbol.asyncIterator]();
  for (let i = 0; i < count; i++) {
    const result = await iterator.next();
    if (result.done) throw new Error(`stream ended after ${i} of ${count} items`);
  }
  await iterator.return?.();
}

async function timeRound(spec) {
  const { stream, keep } = await spec.open(items + 1);
  const started = process.hrtime.bigint();
  await read(stream, items);
  const elapsed = Number(process.hrtime.bigint() - started);
  release(keep);
  return elapsed / items;
}

/** Bytes allocated while reading: the heap growth between GCs, summed over every GC in the round. */
async function allocationRound(spec) {
  const { stream, keep } = await spec.open(items + 1);
  collect();
  const before = process.memoryUsage().heapUsed;
  const profiler = new GCProfiler();
  profiler.start();
  await read(stream, items);
  const after = process.memoryUsage().heapUsed;
  const { statistics } = profiler.stop();
  let allocated = 0;
  let last = before;
  for (const gc of statistics) {
    allocated += gc.beforeGC.heapStatistics.usedHeapSize - last;
    last = gc.afterGC.heapStatistics.usedHeapSize;
  }
  allocated += after - last;
  release(keep);
  return allocated / items;
}

/** Bytes still held per item once the stream is closed, while the prefill is still pending. */
async function retainedRound(spec) {
  collect();
  const before = process.memoryUsage().heapUsed;
  let { stream, keep } = await spec.open(items + 1);
  await read(stream, items);
  stream = undefined;
  collect();
  const retained = process.memoryUsage().heapUsed - before;
  release(keep); // only now may the prefill settle
  return retained / items;
}

/** Lets a pending prefill settle, so that what piled up on it does not leak into the next round. */
function release(keep) {
  keep?.prefill?.resolve?.();
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

if (kind === 'stream') {
  const spec = CASES[name];
  if (spec === undefined) throw new Error(`unknown case ${name}`);
  await timeRound(spec); // warm-up
  await new Promise((resolve) => setImmediate(resolve));
  const retained = await retainedRound(spec);
  const times = [];
  for (let r = 0; r < rounds; r++) times.push(await timeRound(spec));
  const allocated = await allocationRound(spec);
  console.log(
    JSON.stringify({
      name,
      nsPerItem: median(times),
      rounds: times,
      allocatedPerItem: allocated,
      retainedPerItem: retained,
    }),
  );
} else if (kind === 'concurrent') {
  const streams = Number(options.streams ?? 10_000);
  const tokens = Number(options.tokens ?? 100);
  await concurrent({ streams: Math.min(streams, 1000), tokens, mode: name, seed: 7 }); // warm-up
  const results = [];
  for (let r = 0; r < rounds; r++) results.push(await concurrent({ streams, tokens, mode: name, seed: 11 + r }));
  collect();
  const base = process.memoryUsage().heapUsed;
  const live = await concurrent({ streams, tokens, mode: name, seed: 11, measureLive: true });
  console.log(
    JSON.stringify({
      name,
      itemsPerSecond: median(results.map((r) => r.itemsPerSecond)),
      peakHeapPerStream: Math.max(0, live.peakHeap - base) / streams,
      items: results[0].items,
    }),
  );
} else {
  throw new Error('usage: worker.mjs stream <case> | concurrent <mode> [--items=N] [--rounds=N]');
}
