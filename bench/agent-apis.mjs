// What the agents' APIs cost the proxy against chat: one disagg proxy (vLLM connector, the
// image's node flags, pinned to the first CPU) in front of the same fake vLLM workers, the same
// prompt and token count on /v1/chat/completions, /v1/responses and /v1/messages, streamed, in
// alternating passes of a closed loop. Each API's figures are ratios to chat's in the same pass
// (the median over passes, lowest and highest beside it). The typed APIs send more events per
// stream (Responses opens and closes every item and part, Messages every block): their
// inter-event gaps and CPU include that framing, as their clients read it.
// Then what a Responses turn chained by previous_response_id adds (bench/agent-chains.mjs):
// one proxy per store (memory, a redis-server and a PostgreSQL cluster of the run's own, each
// skipped, saying so, where its server is not installed), sessions of --turns turns, chained,
// stateless and with the client sending its history, in the same passes.
//   npm run bench:agents -- [--passes 3] [--requests 2000] [--concurrency 50] [--tokens 32]
//     [--only apis,chains] [--sessions 24] [--turns 8] [--chain-concurrency 8] [--chain-tokens 16]
//     [--stores memory,redis,postgres]
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chainTable, KINDS, runSessions } from './agent-chains.mjs';
import { child, cpuPlan, imageNode, load, median, onProxyCpu, pinSelf } from './proxy-load.mjs';
import { startPostgres, startRedis } from './store-servers.mjs';

const { values: args } = parseArgs({
  options: {
    passes: { type: 'string', default: '3' },
    requests: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '50' },
    tokens: { type: 'string', default: '32' },
    interval: { type: 'string', default: '2' },
    node: { type: 'string', default: process.execPath },
    'no-pin': { type: 'boolean', default: false },
    only: { type: 'string', default: 'apis,chains' },
    sessions: { type: 'string', default: '24' },
    'chain-tokens': { type: 'string', default: '16' },
    'chain-warmup': { type: 'string', default: '8' },
    turns: { type: 'string', default: '8' },
    'chain-concurrency': { type: 'string', default: '8' },
    stores: { type: 'string', default: 'memory,redis,postgres' },
  },
});
const only = new Set(args.only.split(','));
const root = fileURLToPath(new URL('..', import.meta.url));
const tokens = Number(args.tokens);
const shape = { requests: Number(args.requests), concurrency: Number(args.concurrency), tokens };
const plan = cpuPlan(!args['no-pin']);
pinSelf(plan);
const closers = [];
// Synchronous, so that a run that throws, or is told to stop, leaves no server behind.
const stopAll = () => {
  for (let close = closers.pop(); close !== undefined; close = closers.pop()) close();
};
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    stopAll();
    process.exit(1);
  });
}

const system = 'You are a coding agent. Read the repository before you change it; run the tests after.';
const question = 'Why does the build fail on Node 20?';
const BODIES = {
  chat: {
    path: '/v1/chat/completions',
    body: {
      model: 'm',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: question },
      ],
      max_tokens: tokens,
      stream: true,
    },
  },
  responses: {
    path: '/v1/responses',
    // Not stored: this part weighs the API's framing against chat's; what storing and chaining
    // add is the chained part's to measure.
    body: { model: 'm', instructions: system, input: question, max_output_tokens: tokens, stream: true, store: false },
  },
  messages: {
    path: '/v1/messages',
    body: { model: 'm', system, messages: [{ role: 'user', content: question }], max_tokens: tokens, stream: true },
  },
};

/** A disagg serve on the plan's proxy CPU in front of the run's workers, with `extra` flags. */
async function startProxy(config, extra = []) {
  const { flags, options } = imageNode();
  const [command, argv] = onProxyCpu(plan, args.node, [
    ...flags,
    'dist/cli.js',
    'serve',
    '--config',
    config,
    '--port',
    '0',
    ...extra,
  ]);
  const proxy = await child(command, argv, {
    cwd: root,
    env: { NODE_OPTIONS: options },
    ready: (line) => line.includes('disagg serve listening'),
  });
  closers.push(() => proxy.proc.kill('SIGTERM'));
  return { base: proxy.info.url, pid: proxy.proc.pid };
}

/** The APIs side by side: one proxy, each API's streams in turn, ratios to chat's. */
async function compareApis(config) {
  const proxy = await startProxy(config);
  const { base } = proxy;
  const run = (name, requests) =>
    load(`${base}${BODIES[name].path}`, BODIES[name].body, {
      ...shape,
      requests,
      pid: proxy.pid,
      metricsUrl: `${base}/metrics`,
    });
  for (const name of Object.keys(BODIES)) await run(name, Number(args.warmup));
  const passes = [];
  for (let pass = 0; pass < Number(args.passes); pass++) {
    const figures = {};
    // Alternating order, so that no API always runs first in a pass.
    const names = pass % 2 === 0 ? Object.keys(BODIES) : Object.keys(BODIES).reverse();
    for (const name of names) figures[name] = await run(name, shape.requests);
    passes.push(figures);
  }
  const failed = passes.flatMap((figures) => Object.entries(figures).filter(([, f]) => f.failed > 0));
  if (failed.length > 0) {
    throw new Error(`requests failed: ${failed.map(([name, f]) => `${name}: ${f.failures.join('; ')}`).join(' | ')}`);
  }
  const fmt = (value, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : '-');
  const mid = (name, key) => median(passes.map((figures) => figures[name][key]));
  console.log(
    `The agents' APIs against chat: disagg (vLLM, the image's flags${plan === undefined ? ', unpinned' : ', pinned to CPU 0'}), ${shape.requests} streams of ${tokens} tokens at ${shape.concurrency} in flight, ${args.passes} passes.\n`,
  );
  console.log(
    '| API | proxy CPU ms per request | ms per token | inter-event gap ms (p50 / p99) | TTFT ms (median) | peak RSS MB |',
  );
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const name of Object.keys(BODIES)) {
    console.log(
      `| ${name} | ${fmt(mid(name, 'cpuPerRequest'), 3)} | ${fmt(mid(name, 'perToken'), 3)} | ${fmt(mid(name, 'gapP50'))} / ${fmt(mid(name, 'gapP99'))} | ${fmt(mid(name, 'ttft'))} | ${fmt(mid(name, 'peakRss'), 1)} |`,
    );
  }
  console.log('\n| ratio to chat (median of passes, lowest-highest) | responses | messages |');
  console.log('|---|---:|---:|');
  for (const [label, key] of [
    ['proxy CPU per request', 'cpuPerRequest'],
    ['inter-event gap p99', 'gapP99'],
    ['TTFT p50', 'ttft'],
  ]) {
    const cells = ['responses', 'messages'].map((name) => {
      const ratios = passes.map((figures) => figures[name][key] / figures.chat[key]);
      const sorted = [...ratios].sort((a, b) => a - b);
      return `${fmt(median(ratios))} x (${fmt(sorted[0])}-${fmt(sorted.at(-1))})`;
    });
    console.log(`| ${label} | ${cells.join(' | ')} |`);
  }
}

/**
 * The chained turns: a proxy per store, each store's three kinds of session in every pass
 * (stores and kinds in alternating order, so that none always runs first), warmed up first.
 */
async function compareChains(config) {
  const wanted = args.stores.split(',');
  const unknown = wanted.filter((store) => !['memory', 'redis', 'postgres'].includes(store));
  if (unknown.length > 0) throw new Error(`--stores takes memory, redis and postgres, not ${unknown.join(', ')}`);
  const addresses = [];
  const skipped = [];
  let postgresVersion;
  // Every server first, then the proxies: a proxy that fails to start leaves servers to stop.
  for (const store of wanted) {
    if (store === 'memory') {
      addresses.push([store, store]);
      continue;
    }
    const server = await (store === 'redis' ? startRedis() : startPostgres());
    if (server.missing !== undefined) {
      skipped.push(`${store}: ${server.missing}`);
      continue;
    }
    closers.push(server.stop);
    console.error(
      `bench:agents: ${store} on 127.0.0.1:${server.port}${server.dir ? `, its data in ${server.dir}` : ''}`,
    );
    addresses.push([store, server.url]);
    postgresVersion ??= server.version;
  }
  const stores = [];
  for (const [name, address] of addresses) {
    stores.push({ name, proxy: await startProxy(config, ['--responses-store', address]) });
  }
  const shape = {
    turns: Number(args.turns),
    concurrency: Number(args['chain-concurrency']),
    // Answers shorter than the streams above: the same load in less time (the workers answer
    // --tokens at most).
    tokens: Math.min(tokens, Number(args['chain-tokens'])),
    instructions: system,
  };
  // A failed session ends the run at once: a chain that breaks is no figure to wait for.
  const run = async (store, kind, sessions, tag) => {
    const figures = await runSessions(store.proxy.base, kind, { ...shape, sessions, pid: store.proxy.pid, tag });
    if (figures.failed > 0) throw new Error(`${store.name} ${kind}: sessions failed: ${figures.failures.join('; ')}`);
    return figures;
  };
  for (const store of stores) for (const kind of KINDS) await run(store, kind, Number(args['chain-warmup']), 'warmup');
  const passes = [];
  for (let pass = 0; pass < Number(args.passes); pass++) {
    const figures = {};
    const order = pass % 2 === 0 ? stores : [...stores].reverse();
    for (const store of order) {
      figures[store.name] = {};
      for (const kind of pass % 2 === 0 ? KINDS : [...KINDS].reverse()) {
        figures[store.name][kind] = await run(store, kind, Number(args.sessions), `${pass}`);
      }
    }
    passes.push(figures);
  }
  const where = [
    plan === undefined ? 'unpinned' : 'each proxy pinned to CPU 0, the store servers with the workers on the others',
    "the image's flags",
  ];
  const inputKb =
    Math.max(...passes.flatMap((figures) => Object.values(figures).map((f) => f.history.lastInputBytes))) / 1024;
  console.log(
    [
      `\nA chained Responses turn against a stateless one: disagg (vLLM, ${where.join(', ')}).`,
      `Per store and pass, ${args.sessions} sessions of each kind, ${shape.turns} turns each (one short user message a turn, ${shape.tokens} tokens answered at ${args.interval} ms each; turn ${shape.turns}'s input ${inputKb.toFixed(1)} KB as a history session sends it), ${shape.concurrency} sessions in flight, an API key per session; ${args.passes} passes.`,
      'Time to the whole answer, non-streamed, in ms (a stored response is written before its end leaves):',
      `p50 / p99 of each turn number (${args.sessions} turns per pass; the "all" row pools every turn), the median over passes;`,
      'the added ms: the median over passes of chained minus the other kind at that percentile (lowest to highest).',
      'Turn n continues a chain of n - 1 responses (turn 1 is only stored).',
    ].join('\n'),
  );
  const names = stores.map((store) => store.name);
  if (names.includes('redis')) console.log("redis: a redis-server of the run's own, without persistence.");
  if (names.includes('postgres')) {
    console.log(
      `postgres: PostgreSQL ${postgresVersion} of the run's own, its durable defaults (fsync, synchronous_commit on).`,
    );
  }
  for (const line of skipped) console.log(`skipped ${line}`);
  console.log(`\n${chainTable(passes, names, shape.turns)}`);
}

try {
  const workers = await child(
    process.execPath,
    ['bench/proxy-fixtures.mjs', 'workers', 'vllm', args.tokens, args.interval],
    {
      cwd: root,
    },
  );
  closers.push(() => workers.proc.stdin.end());
  const config = join(tmpdir(), `disagg-bench-agents-${process.pid}.yaml`);
  writeFileSync(
    config,
    JSON.stringify({ connector: 'vllm', prefill: [workers.info.prefill], decode: [workers.info.decode] }),
  );
  closers.push(() => rmSync(config, { force: true }));
  if (only.has('apis')) await compareApis(config);
  if (only.has('chains')) await compareChains(config);
} finally {
  stopAll();
}
