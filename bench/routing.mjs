// npm run bench:routing: what each prefill policy of `disagg serve` buys on workloads with and
// without shared prefixes, in front of prefix-caching fake vLLM workers (4 prefill, 2 decode;
// a prefill takes longer the less of its prompt its worker has cached).
//
// For each workload and policy, a fresh set of workers (cold caches) and a fresh `disagg serve`:
//   hit      cached prompt tokens / prompt tokens, as the workers report them to the client;
//   oracle   the same for one cache of unlimited size that saw every request in order: no
//            assignment to workers with bounded caches can reuse more (an upper bound);
//   TTFT     time to the first token the client reads, p50 and p99;
//   imbal.   requests on the busiest prefill worker / the mean;
//   CPU/req  the proxy process's CPU time per request (from /proc).
// Then the routing decision's own cost per request (in this process: the policy's choice for
// a chat request of 1 KB, 16 KB and 128 KB, text rendering included).
//
// Options: --quick (fewer requests, for a smoke run), --concurrency N (16), --ms-per-token M
// (0.2: the workers' prefill time per uncached prompt token).
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CACHE_AWARE_DEFAULTS, createPolicy, POLICY_NAMES, RoutingInput, WorkerPool } from 'disagg';
import { FakePrefixCache } from 'disagg/testing';
import { request } from 'undici';
import { child, cpuMs } from './proxy-load.mjs';
import { driveSessions, percentile, random } from './routing-drive.mjs';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '16' },
    'ms-per-token': { type: 'string', default: '0.2' },
    cli: { type: 'string', default: 'dist/cli.js' },
  },
});
const root = fileURLToPath(new URL('..', import.meta.url));
const CONCURRENCY = Number(args.concurrency);
const SCALE = args.quick ? 0.25 : 1;
// Every policy of the registry, so that a new one is measured beside the others; but
// precise-prefix, which routes on KV events these text-cache workers do not publish: the fleet
// part (bench/routing-fleet.mjs) measures it on workers that do.
const POLICIES = POLICY_NAMES.filter((name) => name !== 'precise-prefix');
/**
 * The flags of each row: a registry policy for prefill, decode by least in flight and no
 * P/D decider (what the policy alone does); `serve defaults`, disagg serve's default policies
 * (the SLO-aware scored policy on both pools) without its decider: these fake decode workers
 * compute a prompt for nothing, so prefill-busy's requests on decode alone would read as free.
 */
const DEFAULTS = 'serve defaults';
const ROWS = [...POLICIES, DEFAULTS];
const flagsOf = (row) =>
  row === DEFAULTS
    ? ['--deciders', '']
    : ['--prefill-policy', row, '--decode-policy', 'least-in-flight', '--deciders', ''];
const PREFILL = 4;
const DECODE = 2;
const CAPACITY_BLOCKS = 800; // 50 KB of prompt per worker: a quarter of the multi-turn working set
// 200 ms for a 4 KB prompt (1,000 tokens) computed whole, one prefill at a time per worker: a
// large model's prefill on a GPU. Far lower, and the two CPUs shared by the client, the proxy
// and six workers decide the TTFT instead of the prefills routing can save.
const MS_PER_TOKEN = Number(args['ms-per-token']);

function words(rand, chars) {
  const vocabulary = ['alpha', 'beta', 'gamma', 'delta', 'kernel', 'cache', 'token', 'prompt', 'router', 'worker'];
  let out = '';
  while (out.length < chars)
    out += `${vocabulary[Math.floor(rand() * vocabulary.length)]}${Math.floor(rand() * 1000)} `;
  // One flat string, as JSON.parse gives a server (a string built by += is a tree of pieces
  // that every later copy walks again).
  return JSON.parse(JSON.stringify(out.slice(0, chars)));
}

/**
 * The workloads: lists of sessions, each a list of chat requests sent one after another (a
 * session of one request is a single request).
 */
function workloads() {
  const rand = random(2026);
  const sessions = Math.round(32 * SCALE);
  const multiTurn = Array.from({ length: sessions }, (_, s) => {
    const messages = [{ role: 'system', content: `Session ${s}. ${words(rand, 1500)}` }];
    const turns = [];
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: 'user', content: words(rand, 400) });
      turns.push({ session: `session-${s}`, messages: [...messages] });
      messages.push({ role: 'assistant', content: 'tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 ' });
    }
    return turns;
  });
  const systems = Array.from({ length: 4 }, () => words(rand, 4000));
  const sharedPrefix = Array.from({ length: Math.round(192 * SCALE) }, (_, i) => [
    {
      messages: [
        { role: 'system', content: systems[i % systems.length] },
        { role: 'user', content: words(rand, 300) },
      ],
    },
  ]);
  const cold = Array.from({ length: Math.round(192 * SCALE) }, () => [
    { messages: [{ role: 'user', content: words(rand, 4000) }] },
  ]);
  return [
    ['multi-turn', `${sessions} chat sessions x 6 turns, history growing each turn`, multiTurn],
    ['shared-prefix', `${sharedPrefix.length} requests, 4 long system prompts, unique tails`, sharedPrefix],
    ['cold', `${cold.length} unique 4 KB prompts`, cold],
  ];
}

/** Cached / prompt tokens for one unbounded cache seeing every request in the order of the sessions. */
function oracle(sessions) {
  const cache = new FakePrefixCache({ blockChars: 64, capacityBlocks: Number.POSITIVE_INFINITY });
  let cached = 0;
  let prompt = 0;
  for (const turns of sessions) {
    for (const turn of turns) {
      const tokens = Math.max(1, Math.ceil(JSON.stringify(turn.messages).length / 4));
      cached += cache.compute({ messages: turn.messages }, tokens).cachedTokens;
      prompt += tokens;
    }
  }
  return cached / prompt;
}

const closers = [];
async function stack(policy) {
  const workers = await child(
    process.execPath,
    ['bench/routing-workers.mjs', PREFILL, DECODE, CAPACITY_BLOCKS, MS_PER_TOKEN].map(String),
    { cwd: root },
  );
  const serve = await child(
    process.execPath,
    [
      args.cli,
      'serve',
      '--connector',
      'vllm',
      ...workers.info.prefill.flatMap((url) => ['--prefill', url]),
      ...workers.info.decode.flatMap((url) => ['--decode', url]),
      ...flagsOf(policy),
      '--port',
      '0',
      '--host',
      '127.0.0.1',
    ],
    { cwd: root, ready: (line) => line.includes('disagg serve listening') },
  );
  const close = () => {
    serve.proc.kill('SIGTERM');
    workers.proc.stdin.end();
  };
  closers.push(close);
  return { url: serve.info.url, pid: serve.proc.pid, close };
}

/** Runs the sessions with CONCURRENCY clients, each taking the next session and playing its turns in order. */
function drive(url, sessions) {
  return driveSessions({
    sessions,
    concurrency: CONCURRENCY,
    prefill: PREFILL,
    send: (turn, dispatcher) =>
      request(`${url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json', ...(turn.session ? { 'x-session-id': turn.session } : {}) },
        body: JSON.stringify({
          model: 'fake-model',
          messages: turn.messages,
          max_tokens: 8,
          stream: true,
          stream_options: { include_usage: true },
        }),
      }),
  });
}

/** The routing decision alone: µs per request for a chat request of `kb` KB, median of 5 batches. */
function decisionCost(policyName, kb) {
  const pool = new WorkerPool(['p0', 'p1', 'p2', 'p3'], { selection: createPolicy(policyName, CACHE_AWARE_DEFAULTS) });
  const rand = random(kb);
  const system = words(rand, kb * 512);
  const bodies = Array.from({ length: 64 }, () => ({
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: words(rand, kb * 512) },
    ],
  }));
  const batch = () => {
    const started = performance.now();
    for (let i = 0; i < 400; i++) {
      const body = bodies[i % bodies.length];
      pool.acquire(undefined, new RoutingInput(body, `s${i}`)).release();
    }
    return ((performance.now() - started) * 1000) / 400;
  };
  batch(); // warm: the JIT, and the tree
  return percentile(Array.from({ length: 5 }, batch), 50);
}

const ms = (value) => value.toFixed(1).padStart(7);
try {
  console.log(
    `disagg serve --prefill-policy <policy>, ${PREFILL} prefill + ${DECODE} decode prefix-caching fake vLLM workers (${CAPACITY_BLOCKS} blocks of 64 characters each, ${MS_PER_TOKEN} ms per uncached token), ${CONCURRENCY} clients\n`,
  );
  const summary = {};
  for (const [name, description, sessions] of workloads()) {
    const bound = oracle(sessions);
    console.log(`${name}: ${description}`);
    console.log('  policy          |   hit  | of oracle | TTFT p50 | TTFT p99 | imbal. | CPU/req ms | failed');
    console.log(
      `  oracle          | ${(bound * 100).toFixed(1).padStart(5)}% |           |          |          |        |            |`,
    );
    for (const policy of ROWS) {
      const proxy = await stack(policy);
      const cpuBefore = cpuMs(proxy.pid);
      const result = await drive(proxy.url, sessions);
      const cpu = cpuMs(proxy.pid) - cpuBefore;
      proxy.close();
      const p50 = percentile(result.ttft, 50);
      summary[`${name}/${policy}`] = { ...result, p50 };
      console.log(
        `  ${policy.padEnd(15)} | ${(result.hit * 100).toFixed(1).padStart(5)}% | ${(bound === 0 ? '-' : `${((result.hit / bound) * 100).toFixed(0)}%`).padStart(9)} | ${ms(p50)}  | ${ms(percentile(result.ttft, 99))}  | ${result.imbalance.toFixed(2).padStart(6)} | ${(cpu / result.requests).toFixed(3).padStart(10)} | ${result.failures}`,
      );
    }
    console.log('');
  }
  const ratio = (workload, policy) => summary[`${workload}/${policy}`].p50 / summary[`${workload}/least-in-flight`].p50;
  console.log(
    `cache-aware against least-in-flight, TTFT p50: multi-turn ${ratio('multi-turn', 'cache-aware').toFixed(2)} x, shared-prefix ${ratio('shared-prefix', 'cache-aware').toFixed(2)} x, cold ${ratio('cold', 'cache-aware').toFixed(2)} x`,
  );
  console.log(
    `serve defaults against least-in-flight, TTFT p50: multi-turn ${ratio('multi-turn', DEFAULTS).toFixed(2)} x, shared-prefix ${ratio('shared-prefix', DEFAULTS).toFixed(2)} x, cold ${ratio('cold', DEFAULTS).toFixed(2)} x\n`,
  );
  console.log('routing decision, µs per request (chat request of 1 KB / 16 KB / 128 KB, 4 workers):');
  for (const policy of POLICIES) {
    const costs = [1, 16, 128].map((kb) => decisionCost(policy, kb).toFixed(1).padStart(7));
    console.log(`  ${policy.padEnd(15)} | ${costs.join(' | ')}`);
  }
} finally {
  for (const close of closers) close();
}
