// What the agents' APIs cost the proxy against chat: one disagg proxy (vLLM connector, the
// image's node flags, pinned to the first CPU) in front of the same fake vLLM workers, the same
// prompt and token count on /v1/chat/completions, /v1/responses and /v1/messages, streamed, in
// alternating passes of a closed loop. Each API's figures are ratios to chat's in the same pass
// (the median over passes, lowest and highest beside it). The typed APIs send more events per
// stream (Responses opens and closes every item and part, Messages every block): their
// inter-event gaps and CPU include that framing, as their clients read it.
//   npm run bench:agents -- [--passes 3] [--requests 2000] [--concurrency 50] [--tokens 32]
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { child, cpuPlan, imageNode, load, median, onProxyCpu, pinSelf } from './proxy-load.mjs';

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
  },
});
const root = fileURLToPath(new URL('..', import.meta.url));
const tokens = Number(args.tokens);
const shape = { requests: Number(args.requests), concurrency: Number(args.concurrency), tokens };
const plan = cpuPlan(!args['no-pin']);
pinSelf(plan);
const closers = [];

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
    body: { model: 'm', instructions: system, input: question, max_output_tokens: tokens, stream: true },
  },
  messages: {
    path: '/v1/messages',
    body: { model: 'm', system, messages: [{ role: 'user', content: question }], max_tokens: tokens, stream: true },
  },
};

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
  const { flags, options } = imageNode();
  const [command, argv] = onProxyCpu(plan, args.node, [
    ...flags,
    'dist/cli.js',
    'serve',
    '--config',
    config,
    '--port',
    '0',
  ]);
  const proxy = await child(command, argv, {
    cwd: root,
    env: { NODE_OPTIONS: options },
    ready: (line) => line.includes('disagg serve listening'),
  });
  closers.push(() => proxy.proc.kill('SIGTERM'));
  const base = proxy.info.url;
  const run = (name, requests) =>
    load(`${base}${BODIES[name].path}`, BODIES[name].body, {
      ...shape,
      requests,
      pid: proxy.proc.pid,
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
} finally {
  for (const close of closers) close();
}
