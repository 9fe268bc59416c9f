// npm run soak: minutes of concurrent streams through the proxy, for both connectors, while
// the fake workers fail at random (a status, a reset, a hang, a late prefill failure), go
// unhealthy and come back, and restart on the same port. Every client must get a complete
// stream or exactly one clean error, within its deadlines; afterwards no leg may be open, no
// gauge above zero, no KV held, and the heap must be flat. The proxy is the real bin in a
// process of its own (its heap, read from its /metrics, is its own); the workers and the
// clients run here. Prints the figures; exits 1 if a rule was broken.
//   node scripts/soak.mjs [--seconds=120] [--concurrency=64]
import { parseArgs } from 'node:util';
import { startFakeWorker } from 'disagg/testing';
import { Agent, request } from 'undici';
import { metric, seeded, serveBin } from './proxy-bin.mjs';

const { values: args } = parseArgs({
  options: { seconds: { type: 'string', default: '120' }, concurrency: { type: 'string', default: '64' } },
});
const SECONDS = Number(args.seconds);
const CONCURRENCY = Number(args.concurrency);
const DEADLINES = { prefillFirstOutputMs: 1000, handoffMs: 1500, decodeFirstTokenMs: 1000, idleMs: 1000 };
// A client waits at most every budget plus the clean-up and a margin: past it, it hung.
const CLIENT_LIMIT_MS = 1000 + 1500 + 1000 + 16 * 1000 + 3000;
const KV_TIMEOUT_MS = 2000;

// A deterministic stream of numbers, so a run can be repeated.
const random = seeded(20261130);
const pick = (list) => list[Math.floor(random() * list.length)];

const DECODE_FAULTS = [
  { type: 'status', status: 503 },
  { type: 'reset', afterTokens: 3 },
  { type: 'error-event', afterTokens: 2 },
  { type: 'hang' },
];
const PREFILL_FAULTS = [{ type: 'status', status: 500 }, { type: 'hang' }, { type: 'late-failure' }];
/** Each worker call meets a fault one time in twenty: about one request in ten meets one. */
const faultFor = (role) => () => {
  if (random() >= 0.05) return undefined;
  return pick(role === 'prefill' ? PREFILL_FAULTS : DECODE_FAULTS);
};

async function soak(protocol) {
  const start = (role, extra = {}) =>
    startFakeWorker({
      role,
      protocol,
      tokens: 16,
      tokenIntervalMs: 2,
      fault: faultFor(role),
      kvTimeoutMs: KV_TIMEOUT_MS,
      bootstrapTimeoutMs: KV_TIMEOUT_MS,
      ...extra,
    });
  const prefill = [await start('prefill'), await start('prefill')];
  const decode = [await start('decode'), await start('decode')];
  const retired = [];
  const { url, stop } = await serveProxy(protocol, prefill, decode);
  const client = new Agent({ connections: CONCURRENCY * 2 });
  const counts = { complete: 0, cleanError: 0, broken: 0, hung: 0 };
  const broken = [];
  let slowestMs = 0;
  const heap = [];
  const until = Date.now() + SECONDS * 1000;
  // The proxy's heap, sampled every 250 ms; the lowest sample of each quarter of the run is
  // its live heap after a collection, which must not climb.
  const started = Date.now();
  const heapTimer = setInterval(async () => {
    heap.push([Date.now() - started, await gauges(url, 'nodejs_heap_size_used_bytes')]);
  }, 250);

  // Chaos: every 3 s a worker goes unhealthy for 1 s; every 6 s a decode worker restarts on its port.
  let chaos = 0;
  const chaosTimer = setInterval(async () => {
    chaos += 1;
    const worker = pick([...prefill, ...decode]);
    worker.setHealthy(false);
    setTimeout(() => worker.setHealthy(true), 1000).unref();
    if (chaos % 2 === 0) {
      const i = Math.floor(random() * decode.length);
      const old = decode[i];
      await old.close();
      retired.push(old);
      decode[i] = await start('decode', { port: old.port });
    }
  }, 3000);

  async function one() {
    const began = Date.now();
    const body = JSON.stringify({ model: 'fake-model', prompt: 'soak', max_tokens: 16, stream: true });
    try {
      const answer = await request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        dispatcher: client,
        signal: AbortSignal.timeout(CLIENT_LIMIT_MS),
      });
      const text = await answer.body.text();
      if (answer.statusCode !== 200) {
        const error = JSON.parse(text).error;
        if (typeof error?.message === 'string') counts.cleanError += 1;
        else broken.push(`status ${answer.statusCode} without an OpenAI error: ${text.slice(0, 200)}`);
      } else {
        const events = text.trim().split('\n\n');
        const last = events.at(-1) ?? '';
        const errors = events.filter((e) => e.startsWith('event: error'));
        if (last === 'data: [DONE]' && errors.length === 0) counts.complete += 1;
        else if (errors.length === 1 && last.startsWith('event: error') && !text.includes('[DONE]'))
          counts.cleanError += 1;
        else broken.push(`a 200 stream neither complete nor ended by one error: ...${text.slice(-200)}`);
      }
    } catch (error) {
      if (error?.name === 'TimeoutError') counts.hung += 1;
      else broken.push(`the client failed: ${error?.message}`);
    }
    slowestMs = Math.max(slowestMs, Date.now() - began);
  }
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < until) await one();
    }),
  );
  clearInterval(chaosTimer);
  clearInterval(heapTimer);
  for (const w of [...prefill, ...decode]) w.setHealthy(true);
  counts.broken = broken.length;

  // Afterwards: every leg ended, gauges at zero, no KV held once the engines' own timeouts passed.
  const settle = async (check) => {
    for (let i = 0; i < 400 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 25));
    return check();
  };
  const all = [...prefill, ...decode, ...retired];
  const openLegs = () => all.flatMap((w) => w.requests.filter((r) => !r.completed && !r.aborted)).length;
  await settle(() => openLegs() === 0);
  let inFlight = await gauges(url, 'disagg_in_flight_requests');
  for (let i = 0; i < 200 && inFlight > 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    inFlight = await gauges(url, 'disagg_in_flight_requests');
  }
  await settle(() => all.every((w) => w.ledger.outstanding().length === 0));
  const held = all.reduce((sum, w) => sum + w.ledger.outstanding().length, 0);
  const stranded = all.reduce((sum, w) => sum + w.ledger.stranded().length, 0);
  const claimed = all.reduce((sum, w) => sum + w.ledger.claimed().length, 0);
  const released = all.reduce((sum, w) => sum + w.ledger.released().length, 0);
  // A decode that read KV already freed answered on blocks that were not its own: never.
  const staleReads = all.reduce((sum, w) => sum + w.ledger.staleReads().length, 0);
  await stop();
  await Promise.all([...prefill, ...decode].map((w) => w.close()));
  await client.close();
  const total = counts.complete + counts.cleanError + counts.broken + counts.hung;
  const report = {
    protocol,
    seconds: SECONDS,
    concurrency: CONCURRENCY,
    requests: total,
    ...counts,
    slowestMs,
    openLegs: openLegs(),
    inFlight,
    kvClaimed: claimed,
    kvHeld: held,
    kvStranded: stranded,
    kvReleased: released,
    kvStaleReads: staleReads,
    restarts: retired.length,
    proxyHeapLowMBPerQuarter: [0, 1, 2, 3].map((q) => {
      const inQuarter = heap.filter(([t]) => t >= (q * SECONDS * 1000) / 4 && t < ((q + 1) * SECONDS * 1000) / 4);
      return +(Math.min(...inQuarter.map(([, bytes]) => bytes)) / 2 ** 20).toFixed(1);
    }),
  };
  console.log(JSON.stringify(report));
  for (const line of broken.slice(0, 5)) console.log(`  broken: ${line}`);
  return (
    report.broken === 0 &&
    report.hung === 0 &&
    report.openLegs === 0 &&
    report.inFlight === 0 &&
    held === 0 &&
    staleReads === 0
  );
}

let ok = true;
for (const protocol of ['vllm', 'sglang']) ok = (await soak(protocol)) && ok;
if (!ok) {
  console.log('soak: a rule was broken (see above)');
  process.exitCode = 1;
}

/** One sample of a gauge of the proxy's /metrics (the sum over its label sets). */
function gauges(url, name) {
  return metric(url, name);
}

/** The disagg bin in front of the workers (each SGLang prefill worker has its own bootstrap port). */
function serveProxy(protocol, prefill, decode) {
  return serveBin({
    connector: protocol,
    prefill: prefill.map((w) => ({
      url: w.url,
      ...(protocol === 'sglang' ? { bootstrapPort: w.bootstrapPort } : {}),
    })),
    decode: decode.map((w) => ({ url: w.url })),
    deadlines: DEADLINES,
    cleanupBudgetMs: 3000,
    healthIntervalMs: 500,
    breaker: { failureThreshold: 5, successThreshold: 2, openMs: 1000 },
  });
}
