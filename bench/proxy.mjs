// npm run bench:proxy: what the disagg proxy adds in front of the workers, what it costs
// against the proxies SGLang and vLLM ship, and why it is built on Node's http server rather
// than fastify. Everything runs on loopback against the fake workers of disagg/testing; every
// figure is compared with a baseline of the same run.
//
// 1. Time to first token, time per token and the gaps between tokens, for streamed requests
//    sent to the proxy (prefill over HTTP, then decode) against the same requests sent to the
//    decode worker directly (no prefill: the floor any router starts from). Decode paces its
//    tokens (--interval, 2 ms), so the time per token is the pace plus what the path adds.
// 2. With --mini-lb <mini_lb.py> and/or --toy-proxy <toy_proxy_server.py> (the peers' own
//    scripts, run by --python with the stand-ins of bench/peers where a package is missing):
//    disagg serve beside SGLang's mini_lb in front of the same fake SGLang workers, and beside
//    vLLM's toy proxy in front of the same fake vLLM workers, in four modes: a closed loop
//    with one request in flight, a closed loop with --concurrency in flight, an open loop
//    at --rate requests a second (every proxy under the same load), and --concurrency in
//    flight held to the requests a second the peer reached in the closed loop (the same load
//    as the peer's own closed loop, for every proxy). Per proxy: CPU time per
//    request (from /proc), the inter-token gaps and TTFT its clients see, its peak resident
//    set, and (disagg) its event loop's delay; its resident set idle; then every figure as a
//    ratio to each peer. Beside each peer runs Node's floor for its job (bench/node-floor.mjs),
//    and its own table says how far the peer's figures are from what any Node proxy needs.
// 3. The relay itself: the decode worker's SSE stream passed to the client by a bare
//    node:http handler and by a fastify route doing the same, in requests per second.
// The workers, the proxies and the two relays each run in their own process
// (bench/proxy-fixtures.mjs); this process only sends requests.

import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { child, cpuPlan, imageNode, load, median, onProxyCpu, pinSelf, rssMb } from './proxy-load.mjs';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '50' },
    tokens: { type: 'string', default: '64' },
    passes: { type: 'string', default: '3' },
    interval: { type: 'string', default: '2' },
    'mini-lb': { type: 'string' },
    'toy-proxy': { type: 'string' },
    python: { type: 'string', default: 'python3' },
    only: { type: 'string' },
    // Another build of the bin, to compare two versions of the proxy on the same machine.
    cli: { type: 'string', default: 'dist/cli.js' },
    // Requests per second, sent whatever the answers (an open loop), instead of --concurrency;
    // for the peers, the rate of their open-loop mode (60 by default).
    rate: { type: 'string' },
    // The peers' closed loop with one request in flight: this many requests.
    'requests-at-one': { type: 'string', default: '150' },
    // Requests (at --concurrency) every proxy serves before its first measured pass: past the
    // JIT's warm-up, so that every figure is what a long-running proxy spends.
    warmup: { type: 'string', default: '4000' },
    // Every proxy on the first CPU, alone; this process, the workers and the peers'
    // interpreters on the others (taskset). --no-pin leaves them all where the kernel puts them.
    'no-pin': { type: 'boolean', default: false },
    // Processes of fake workers, each with its own prefill and decode worker: enough that the
    // workers are never what is measured (one process saturates at 200 in flight on a fast core).
    'worker-procs': { type: 'string' },
    // The Node that runs the proxies (the image's Node 24, say); this one by default.
    node: { type: 'string', default: process.execPath },
    // The section `flags`: disagg with the image's node flags beside disagg with each of these
    // sets (';' between sets, ' ' between flags, `none` for Node's defaults), and the peer when
    // --mini-lb is given, in one closed loop at --concurrency.
    'flag-sets': { type: 'string', default: 'none' },
    // The section `flags`: another build of the bin beside this one, both with the image's
    // flags (a change measured against the build before it).
    'compare-cli': { type: 'string' },
    // The prompt's size in KB (0: a short one): large bodies, as agents send them.
    'prompt-kb': { type: 'string', default: '0' },
    // The section `direct`: the engine of the workers (vllm: prefill, then decode; sglang: both
    // at once, so that the proxy's TTFT is decode's plus what the proxy adds).
    'direct-connector': { type: 'string', default: 'vllm' },
    // The section `knee`: these numbers in flight, one closed loop each, for disagg, Node's
    // floor and mini_lb when given.
    knee: { type: 'string', default: '25,50,100,200,400' },
  },
});
const plan = cpuPlan(!args['no-pin']);
pinSelf(plan);
const WORKER_PROCS = Number(args['worker-procs'] ?? Math.min(4, Math.max(1, (plan?.cpus ?? 2) - 2)));
const shape = {
  requests: Number(args.requests),
  concurrency: Number(args.concurrency),
  tokens: Number(args.tokens),
  rate: args.rate === undefined ? undefined : Number(args.rate),
};
const PASSES = Number(args.passes);
const root = fileURLToPath(new URL('..', import.meta.url));
const node = (script, extra, ready) => child(process.execPath, [script, ...extra], { cwd: root, ready });
/** A prompt of --prompt-kb KB of words (a long agent context, say), or a short one. */
function promptOf(kb) {
  if (kb === 0) return 'Benchmark prompt';
  const words = ['the', 'router', 'reads', 'a', 'long', 'prompt', 'once,', 'then', 'passes', 'it', 'on.\n'];
  let text = '';
  for (let i = 0; text.length < kb * 1024; i++) text += `${words[(i * 7) % words.length]} `;
  return text.slice(0, kb * 1024);
}
const body = { model: 'm', prompt: promptOf(Number(args['prompt-kb'])), max_tokens: shape.tokens, stream: true };
const closers = [];

/** A free port on loopback, for the peers, which take one on their command line. */
function freePort() {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * --worker-procs processes of fake workers, each with a paced prefill and decode worker and an
 * unpaced decode worker: their URLs as lists, one entry per process.
 */
async function workers(protocol) {
  const procs = await Promise.all(
    Array.from({ length: WORKER_PROCS }, () =>
      node('bench/proxy-fixtures.mjs', ['workers', protocol, String(shape.tokens), args.interval]),
    ),
  );
  for (const { proc } of procs) closers.push(() => proc.stdin.end());
  const list = (key) => procs.map(({ info }) => info[key]);
  return {
    prefill: list('prefill'),
    decode: list('decode'),
    fast: list('fast'),
    bootstrapPorts: list('bootstrapPort'),
  };
}

const { flags: imageNodeFlags, options: imageNodeOptions } = imageNode();

/**
 * The proxy as it is deployed: the disagg bin, logging every request at info, with the image's
 * node flags and NODE_OPTIONS (or `flags` and no NODE_OPTIONS), on the proxy's CPU. The workers
 * go in a settings file: SGLang prefill workers each name their own bootstrap port there.
 */
async function disagg(connector, urls, flags, cli = args.cli) {
  const config = join(tmpdir(), `disagg-bench-${process.pid}-${closers.length}.yaml`);
  const prefill = urls.prefill.map((url, i) =>
    connector === 'sglang' ? { url, bootstrapPort: urls.bootstrapPorts[i] } : url,
  );
  writeFileSync(config, JSON.stringify({ connector, prefill, decode: urls.decode }));
  const [command, argv] = onProxyCpu(plan, args.node, [
    ...(flags ?? imageNodeFlags),
    cli,
    'serve',
    '--config',
    config,
    '--port',
    '0',
    '--host',
    '127.0.0.1',
  ]);
  const { proc, info } = await child(command, argv, {
    cwd: root,
    env: { NODE_OPTIONS: flags === undefined ? imageNodeOptions : '' },
    ready: (line) => line.includes('disagg serve listening'),
  });
  closers.push(() => proc.kill('SIGTERM'));
  return { url: `${info.url}/v1/completions`, pid: proc.pid, metricsUrl: `${info.url}/metrics` };
}

/**
 * Node's floor for a peer's job (bench/node-floor.mjs): a bare node:http relay doing what the
 * peer does and nothing else, with the image's node flags and NODE_OPTIONS.
 */
async function floor(protocol, urls) {
  const [command, argv] = onProxyCpu(plan, args.node, [
    ...imageNodeFlags,
    'bench/node-floor.mjs',
    protocol,
    urls.prefill.join(','),
    urls.decode.join(','),
    urls.bootstrapPorts.join(','),
  ]);
  const { proc, info } = await child(command, argv, { cwd: root, env: { NODE_OPTIONS: imageNodeOptions } });
  closers.push(() => proc.stdin.end());
  return { url: `${info.url}/v1/completions`, pid: proc.pid };
}

/** A peer proxy script, run as its authors document it (uvicorn, its default logging). */
async function peer(script, argv) {
  const port = await freePort();
  const [command, pinnedArgv] = onProxyCpu(plan, args.python, [
    `${root}bench/peers/run.py`,
    script,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    ...argv(port),
  ]);
  const { proc } = await child(command, pinnedArgv, {
    cwd: root,
    ready: (line) => line.includes('Uvicorn running'),
  });
  closers.push(() => proc.kill('SIGTERM'));
  return { url: `http://127.0.0.1:${port}/v1/completions`, pid: proc.pid };
}

/** SGLang's mini_lb in front of the workers, as its README runs it. */
function miniLb(urls) {
  return peer(args['mini-lb'], () => [
    '--prefill',
    ...urls.prefill,
    '--decode',
    ...urls.decode,
    '--prefill-bootstrap-ports',
    ...urls.bootstrapPorts.map(String),
  ]);
}

/**
 * Brings each target to its steady state, once: --warmup requests at --concurrency. A fresh
 * Node process spends its first few thousand requests compiling (V8's optimizing compiler was
 * a tenth of the proxy's CPU during the first 2,000 requests at 50 in flight, and those cost
 * 1.4 x what later ones do); a Python proxy has nothing to warm, and gets the same requests.
 */
const warmed = new Set();
async function steady(targets) {
  for (const target of Object.values(targets)) {
    if (warmed.has(target) || Number(args.warmup) === 0) continue;
    warmed.add(target);
    await load(target.url, body, { ...shape, rate: undefined, requests: Number(args.warmup) });
  }
}

/**
 * Runs every target once per pass, in alternating order so that drift favours none, with the
 * load of `of` (the command line's by default), after the steady-state warm-up and a short one
 * at this load.
 */
async function passes(targets, of = shape) {
  const runs = Object.fromEntries(Object.keys(targets).map((name) => [name, []]));
  const run = (target, requests = of.requests) =>
    load(target.url, body, { ...of, requests, pid: target.pid, metricsUrl: target.metricsUrl });
  await steady(targets);
  for (const target of Object.values(targets)) await run(target, Math.min(of.requests, 200)); // warm-up
  for (let pass = 0; pass < PASSES; pass++) {
    const order = Object.keys(targets);
    if (pass % 2 === 1) order.reverse();
    for (const name of order) runs[name].push(await run(targets[name]));
    process.stderr.write(`pass ${pass + 1}/${PASSES} done\n`);
  }
  return {
    /** Requests that failed on `name` over every pass, and why (none in a sound run). */
    failed: (name) => ({
      count: runs[name].reduce((sum, run) => sum + run.failed, 0),
      why: [...new Set(runs[name].flatMap((run) => run.failures))],
    }),
    mid: (name, field) => median(runs[name].map((run) => run[field])),
    ratio: (a, b, field) => median(runs[a].map((run, i) => run[field] / runs[b][i][field])),
    /** The lowest and highest per-pass ratio: how far one pass may be from the median. */
    spread: (a, b, field) => {
      const each = runs[a].map((run, i) => run[field] / runs[b][i][field]).filter(Number.isFinite);
      return each.length === 0 ? [Number.NaN, Number.NaN] : [Math.min(...each), Math.max(...each)];
    },
  };
}

/** The median of the per-pass ratios `a` / `b` of `field` and their spread, as a table's cell. */
function ratioCell(result, a, b, field) {
  const ratio = result.ratio(a, b, field);
  if (!Number.isFinite(ratio)) return '-';
  const [low, high] = result.spread(a, b, field);
  return PASSES > 1 ? `${ratio.toFixed(2)} x (${low.toFixed(2)}-${high.toFixed(2)})` : `${ratio.toFixed(2)} x`;
}

/** `paced: false` for unpaced decode, whose tokens arrive in one burst: no time per token to show. */
function table(result, rows, { paced = true } = {}) {
  console.log(
    '| path | TTFT ms (median) | TTFT ms (p99) | ms per token | inter-token gap ms (p50 / p99) | proxy CPU ms per request | proxy peak RSS MB | event loop delay p99 ms | GC pause ms per request / mean scavenge ms | reads with 2+ events | requests/s |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const [name, label] of rows) {
    const cpu = result.mid(name, 'cpuPerRequest');
    const perToken = paced ? result.mid(name, 'perToken').toFixed(3) : '-';
    const gaps = paced ? `${result.mid(name, 'gapP50').toFixed(2)} / ${result.mid(name, 'gapP99').toFixed(2)}` : '-';
    const rss = result.mid(name, 'peakRss');
    const loop = result.mid(name, 'eventLoopDelayP99');
    const gc = result.mid(name, 'gcMsPerRequest');
    const scavenge = result.mid(name, 'scavengeMs');
    const gcCell = Number.isNaN(gc) ? '-' : `${gc.toFixed(3)} / ${Number.isNaN(scavenge) ? '-' : scavenge.toFixed(2)}`;
    const bursts = `${(result.mid(name, 'burstShare') * 100).toFixed(1)} %`;
    console.log(
      `| ${label} | ${result.mid(name, 'ttft').toFixed(2)} | ${result.mid(name, 'ttftP99').toFixed(2)} | ${perToken} | ${gaps} | ${Number.isNaN(cpu) ? '-' : cpu.toFixed(3)} | ${Number.isNaN(rss) ? '-' : rss.toFixed(1)} | ${Number.isNaN(loop) ? '-' : loop.toFixed(2)} | ${gcCell} | ${bursts} | ${Math.round(result.mid(name, 'rps'))} |`,
    );
  }
  console.log('');
  // A failed request is part of the result: said under the table, and the run exits non-zero.
  for (const [name, label] of rows) {
    const { count, why } = result.failed(name);
    if (count === 0) continue;
    process.exitCode = 1;
    console.log(`**${count} requests failed** on ${label}: ${why.join(', ')}`);
    console.log('');
  }
}

const proxyNode = (await child(args.node, ['-p', 'process.version'], { ready: (line) => line.startsWith('v') })).info;
console.log(
  plan === undefined
    ? `Nothing pinned (${args['no-pin'] ? '--no-pin' : 'one CPU, or no taskset'}): every proxy shares the CPUs with ${WORKER_PROCS} process(es) of workers and the load generator`
    : `Every proxy pinned to CPU ${plan.proxy} alone (taskset); the load generator and ${WORKER_PROCS} process(es) of workers on CPUs ${plan.others} of ${plan.cpus}`,
);
console.log('');
console.log(
  `The proxies run on Node ${proxyNode}; disagg serve runs with the image's node flags (${imageNodeFlags.join(' ') || 'none'}) and NODE_OPTIONS (${imageNodeOptions || 'none'}), as deploy/Dockerfile sets them`,
);
console.log('');
console.log(
  `Load from Node ${process.version}: ${shape.requests} streamed requests of ${shape.tokens} tokens per run, ${shape.rate === undefined ? `${shape.concurrency} at a time` : `${shape.rate} per second`}, ${PASSES} passes, medians, after ${args.warmup} requests of warm-up per proxy; decode paced at ${args.interval} ms per token (the relays' decode unpaced)`,
);
console.log('');
const sections = new Set((args.only ?? 'direct,handler,peers,relays').split(','));

if (sections.has('direct')) {
  const connector = args['direct-connector'];
  const urls = await workers(connector);
  const proxy = await disagg(connector, urls);
  const result = await passes({ direct: { url: urls.decode.map((url) => `${url}/v1/completions`) }, proxy });
  table(result, [
    ['direct', 'client -> decode worker (no prefill)'],
    [
      'proxy',
      connector === 'sglang'
        ? 'client -> disagg proxy -> prefill and decode at once'
        : 'client -> disagg proxy -> prefill, then decode',
    ],
  ]);
  console.log(
    `proxy / direct: TTFT ${result.ratio('proxy', 'direct', 'ttft').toFixed(2)} x, per token ${result.ratio('proxy', 'direct', 'perToken').toFixed(2)} x, inter-token p99 ${result.ratio('proxy', 'direct', 'gapP99').toFixed(2)} x, requests/s ${result.ratio('proxy', 'direct', 'rps').toFixed(2)} x`,
  );
  console.log('');
}

if (sections.has('handler')) {
  // disagg serve writes to Node's socket; createHandler answers WHATWG Responses (the README's
  // node:http glue around it): what the standard handler costs against the bin's own writer.
  const urls = await workers('vllm');
  const serve = await disagg('vllm', urls);
  const { proc, info } = await node(
    'bench/proxy-fixtures.mjs',
    ['handler', urls.prefill.join(','), urls.decode.join(',')],
    (line) => line.startsWith('{"url"'),
  );
  closers.push(() => proc.stdin.end());
  const result = await passes({ serve, handler: { url: `${info.url}/v1/completions`, pid: proc.pid } });
  table(result, [
    ['serve', 'client -> disagg serve (its own writer on node:http)'],
    ['handler', 'client -> node:http -> createHandler (Request/Response) -> workers'],
  ]);
  console.log(
    `handler / serve: proxy CPU per request ${result.ratio('handler', 'serve', 'cpuPerRequest').toFixed(2)} x, inter-token p99 ${result.ratio('handler', 'serve', 'gapP99').toFixed(2)} x, TTFT ${result.ratio('handler', 'serve', 'ttft').toFixed(2)} x, requests/s ${result.ratio('handler', 'serve', 'rps').toFixed(2)} x`,
  );
  console.log('');
}

if (sections.has('peers')) {
  // Each peer beside disagg serve in front of the same workers, in the four modes; ratios are
  // disagg's figure over the peer's, taken within a pass.
  const modes = [
    {
      key: 'one',
      label: 'closed loop, 1 in flight',
      of: { ...shape, requests: Number(args['requests-at-one']), concurrency: 1, rate: undefined },
    },
    { key: 'many', label: `closed loop, ${shape.concurrency} in flight`, of: { ...shape, rate: undefined } },
    {
      key: 'open',
      label: `open loop, ${shape.rate ?? 60} requests/s`,
      // 20 s of requests at the rate (or --requests, if fewer).
      of: { ...shape, rate: shape.rate ?? 60, requests: Math.min(shape.requests, (shape.rate ?? 60) * 20) },
    },
    {
      // The closed loop at --concurrency compares paths at different loads: a faster proxy
      // answers more requests a second on the same two CPUs, so its workers and client are
      // busier and its tokens wait longer behind theirs. Here every path carries what the
      // peer carried in that loop: the same in flight at most, held to the peer's median
      // requests a second.
      key: 'paced',
      label: `${shape.concurrency} in flight at the peer's requests/s`,
      of: (perMode) => ({ ...shape, rate: perMode.many.mid('peer', 'rps'), maxInFlight: shape.concurrency }),
    },
  ];
  const peers = [];
  if (args['mini-lb'] !== undefined) {
    peers.push({
      name: 'mini_lb',
      label: "SGLang's mini_lb",
      protocol: 'sglang',
      start: miniLb,
    });
  }
  if (args['toy-proxy'] !== undefined) {
    const hostPort = (url) => new URL(url);
    peers.push({
      name: 'toy proxy',
      label: "vLLM's toy proxy",
      protocol: 'vllm',
      start: (urls) =>
        peer(args['toy-proxy'], () => [
          '--prefiller-hosts',
          ...urls.prefill.map((url) => hostPort(url).hostname),
          '--prefiller-ports',
          ...urls.prefill.map((url) => hostPort(url).port),
          '--decoder-hosts',
          ...urls.decode.map((url) => hostPort(url).hostname),
          '--decoder-ports',
          ...urls.decode.map((url) => hostPort(url).port),
        ]),
    });
  }
  const summary = [];
  for (const { name, label, protocol, start } of peers) {
    const urls = await workers(protocol);
    const ours = await disagg(protocol, urls);
    const theirs = await start(urls);
    // Beside them, Node's floor for the same job: what any Node proxy holds and spends.
    const bare = await floor(protocol, urls);
    const targets = { disagg: ours, peer: theirs, floor: bare };
    const rssOf = () => Object.fromEntries(Object.entries(targets).map(([key, target]) => [key, rssMb(target.pid)]));
    // Idle twice: 2 s after start (past start-up's own garbage), and settled, 15 s after start,
    // when V8's memory reducer has run its first collections of an idle heap (8 s after start):
    // what an idle replica holds.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const idle = rssOf();
    await new Promise((resolve) => setTimeout(resolve, 13_000));
    const settled = rssOf();
    const perMode = {};
    for (const mode of modes) {
      const of = typeof mode.of === 'function' ? mode.of(perMode) : mode.of;
      const result = await passes(targets, of);
      const pace = mode.key === 'paced' ? ` (${of.rate.toFixed(0)} requests/s, ${name}'s in the closed loop)` : '';
      console.log(`**${mode.label}**${pace}, disagg serve --connector ${protocol} beside ${label}:`);
      console.log('');
      table(result, [
        [
          'disagg',
          `client -> disagg serve --connector ${protocol} -> fake ${protocol === 'sglang' ? 'SGLang' : 'vLLM'} workers`,
        ],
        ['peer', `client -> ${label} -> the same workers`],
        ['floor', "client -> Node's floor (bare node:http relay) -> the same workers"],
      ]);
      perMode[mode.key] = result;
    }
    const many = perMode.many;
    const inFlight = shape.concurrency;
    console.log(
      `idle resident set 2 s after start: disagg ${idle.disagg.toFixed(1)} MB, ${name} ${idle.peer.toFixed(1)} MB; settled (15 s): disagg ${settled.disagg.toFixed(1)} MB, ${name} ${settled.peer.toFixed(1)} MB; per stream in flight (peak at ${inFlight} less idle, over ${inFlight}): disagg ${((many.mid('disagg', 'peakRss') - idle.disagg) / inFlight).toFixed(2)} MB, ${name} ${((many.mid('peer', 'peakRss') - idle.peer) / inFlight).toFixed(2)} MB`,
    );
    console.log(
      `Node's floor (a bare node:http relay doing ${name}'s job, nothing else): idle ${idle.floor.toFixed(1)} MB at 2 s, ${settled.floor.toFixed(1)} MB settled; per stream in flight ${((many.mid('floor', 'peakRss') - idle.floor) / inFlight).toFixed(2)} MB`,
    );
    console.log('');
    summary.push({ name, perMode, idle, settled });
  }
  if (summary.length > 0) {
    const figures = [
      ['proxy CPU per request', 'cpuPerRequest'],
      ['inter-token gap p50', 'gapP50'],
      ['inter-token gap p99', 'gapP99'],
      ['TTFT p50', 'ttft'],
      ['TTFT p99', 'ttftP99'],
      ['peak RSS', 'peakRss'],
    ];
    const columns = summary.flatMap(({ name, perMode }) =>
      modes.map((mode) => ({ name, mode, result: perMode[mode.key] })),
    );
    console.log('**disagg / peer** (medians of the per-pass ratios; below 1 is disagg cheaper or faster):');
    console.log('');
    console.log(`| disagg / peer | ${columns.map(({ name, mode }) => `${name}, ${mode.label}`).join(' | ')} |`);
    console.log(`|---|${columns.map(() => '---:').join('|')}|`);
    for (const [label, field] of figures) {
      const cells = columns.map(({ result }) => ratioCell(result, 'disagg', 'peer', field));
      console.log(`| ${label} | ${cells.join(' | ')} |`);
    }
    for (const [label, key] of [
      ['idle RSS, 2 s after start', 'idle'],
      ['idle RSS, settled (15 s)', 'settled'],
    ]) {
      const cells = columns.map(({ name, mode }) => {
        const at = summary.find((entry) => entry.name === name)[key];
        return mode.key === 'one' ? `${(at.disagg / at.peer).toFixed(2)} x` : '';
      });
      console.log(`| ${label} | ${cells.join(' | ')} |`);
    }
    console.log('');
    // Where a target is below what Node itself needs for the job, no Node proxy meets it: the
    // floor over the peer says so, disagg over the floor is what disagg adds to Node.
    for (const { name, perMode, idle, settled } of summary) {
      console.log(`**Node's floor beside ${name}** (medians of the per-pass ratios):`);
      console.log('');
      console.log(
        `| | ${modes.map((mode) => `floor / ${name}, ${mode.label}`).join(' | ')} | ${modes.map((mode) => `disagg / floor, ${mode.label}`).join(' | ')} |`,
      );
      console.log(`|---|${modes.map(() => '---:|---:').join('|')}|`);
      for (const [label, field] of [
        ['proxy CPU per request', 'cpuPerRequest'],
        ['inter-token gap p99', 'gapP99'],
        ['peak RSS', 'peakRss'],
      ]) {
        const over = modes.map((mode) => ratioCell(perMode[mode.key], 'floor', 'peer', field));
        const under = modes.map((mode) => ratioCell(perMode[mode.key], 'disagg', 'floor', field));
        console.log(`| ${label} | ${[...over, ...under].join(' | ')} |`);
      }
      // Idle has no mode: one cell under the first mode of each half.
      const idleCell = (a, b) => [
        `${(idle[a] / idle[b]).toFixed(2)} x / ${(settled[a] / settled[b]).toFixed(2)} x`,
        ...modes.slice(1).map(() => ''),
      ];
      console.log(
        `| idle RSS, 2 s / settled | ${[...idleCell('floor', 'peer'), ...idleCell('disagg', 'floor')].join(' | ')} |`,
      );
      console.log('');
    }
  }
}

if (sections.has('flags')) {
  // Which node flags the image should ship: disagg with the image's own beside disagg with each
  // of --flag-sets, and SGLang's mini_lb when given, in front of the same fake SGLang workers, in
  // one closed loop at --concurrency; every figure then as a ratio to the image's flags (and to
  // mini_lb's), per pass.
  const urls = await workers('sglang');
  const sets = args['flag-sets']
    .split(';')
    .map((set) => set.trim())
    .filter((set) => set !== '');
  const targets = { image: await disagg('sglang', urls) };
  const rows = [['image', `disagg, the image's flags (${[...imageNodeFlags, imageNodeOptions].join(' ') || 'none'})`]];
  for (const [i, set] of sets.entries()) {
    targets[`set ${i}`] = await disagg('sglang', urls, set === 'none' ? [] : set.split(/\s+/));
    rows.push([`set ${i}`, `disagg, ${set === 'none' ? "Node's defaults" : set}`]);
  }
  if (args['compare-cli'] !== undefined) {
    targets.other = await disagg('sglang', urls, undefined, args['compare-cli']);
    rows.push(['other', `disagg, ${args['compare-cli']}, the image's flags`]);
  }
  if (args['mini-lb'] !== undefined) {
    targets.peer = await miniLb(urls);
    rows.push(['peer', "SGLang's mini_lb"]);
  }
  const result = await passes(targets);
  table(result, rows);
  const figures = [
    ['proxy CPU per request', 'cpuPerRequest'],
    ['inter-token gap p50', 'gapP50'],
    ['inter-token gap p99', 'gapP99'],
    ['TTFT p50', 'ttft'],
    ['peak RSS', 'peakRss'],
  ];
  const against = targets.peer === undefined ? ['image'] : ['image', 'peer'];
  const columns = rows.flatMap(([name, label]) =>
    (name === 'peer' ? [] : against)
      .filter((base) => base !== name)
      .map((base) => ({ name, base, label: `${label} / ${base === 'peer' ? 'mini_lb' : "the image's"}` })),
  );
  console.log(
    `| ratio (median of ${PASSES} passes, lowest-highest) | ${columns.map(({ label }) => label).join(' | ')} |`,
  );
  console.log(`|---|${columns.map(() => '---:').join('|')}|`);
  for (const [label, field] of figures) {
    console.log(`| ${label} | ${columns.map(({ name, base }) => ratioCell(result, name, base, field)).join(' | ')} |`);
  }
  console.log('');
}

if (sections.has('knee')) {
  // How far one process goes: closed loops at rising numbers in flight, each proxy on its own
  // CPU; the knee is the first load whose inter-token p99 is twice the lightest load's.
  const urls = await workers('sglang');
  const targets = { disagg: await disagg('sglang', urls), floor: await floor('sglang', urls) };
  if (args['mini-lb'] !== undefined) targets.peer = await miniLb(urls);
  const levels = args.knee.split(',').map(Number);
  const perLevel = [];
  for (const concurrency of levels) {
    const of = { ...shape, concurrency, requests: Math.max(shape.requests, concurrency * 10), rate: undefined };
    perLevel.push(await passes(targets, of));
    process.stderr.write(`knee: ${concurrency} in flight done\n`);
  }
  const names = Object.keys(targets);
  const label = { disagg: 'disagg serve', floor: "Node's floor", peer: 'mini_lb' };
  console.log(
    `| in flight | ${names.map((name) => `${label[name]}: requests/s, tokens/s, inter-token p99 ms, CPU ms/request`).join(' | ')} |`,
  );
  console.log(`|---:|${names.map(() => '---:').join('|')}|`);
  for (const [i, concurrency] of levels.entries()) {
    const cells = names.map((name) => {
      const rps = perLevel[i].mid(name, 'rps');
      return `${Math.round(rps)}, ${Math.round(rps * shape.tokens)}, ${perLevel[i].mid(name, 'gapP99').toFixed(2)}, ${perLevel[i].mid(name, 'cpuPerRequest').toFixed(2)}`;
    });
    console.log(`| ${concurrency} | ${cells.join(' | ')} |`);
  }
  console.log('');
  for (const name of names) {
    const base = perLevel[0].mid(name, 'gapP99');
    const at = levels.findIndex((_, i) => perLevel[i].mid(name, 'gapP99') >= 2 * base);
    console.log(
      at === -1
        ? `${label[name]}: no knee up to ${levels.at(-1)} in flight (inter-token p99 below twice ${base.toFixed(2)} ms); ${Math.round(perLevel.at(-1).mid(name, 'rps'))} requests/s there`
        : `${label[name]}: the knee at ${levels[at]} in flight, ${Math.round(perLevel[at].mid(name, 'rps'))} requests/s, ${Math.round(perLevel[at].mid(name, 'rps') * shape.tokens)} tokens/s (inter-token p99 ${perLevel[at].mid(name, 'gapP99').toFixed(2)} ms, twice ${base.toFixed(2)} or more)`,
    );
  }
  console.log('');
}

if (sections.has('relays')) {
  const urls = await workers('vllm');
  const { proc, info } = await node('bench/proxy-fixtures.mjs', ['relays', urls.fast.join(','), String(shape.tokens)]);
  closers.push(() => proc.stdin.end());
  const result = await passes({
    bare: { url: `${info.bare}/v1/completions`, pid: proc.pid },
    fastify: { url: `${info.fastify}/v1/completions`, pid: proc.pid },
  });
  table(
    result,
    [
      ['bare', 'client -> bare node:http SSE relay -> unpaced decode'],
      ['fastify', 'client -> fastify SSE relay -> unpaced decode'],
    ],
    { paced: false },
  );
  console.log(
    `fastify / node:http relay: requests/s ${result.ratio('fastify', 'bare', 'rps').toFixed(2)} x, TTFT ${result.ratio('fastify', 'bare', 'ttft').toFixed(2)} x, CPU per request ${result.ratio('fastify', 'bare', 'cpuPerRequest').toFixed(2)} x`,
  );
}

for (const close of closers) close();
