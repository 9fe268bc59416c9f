#!/usr/bin/env node
// `npm run bench:live`: does the offline replay say what a live fleet does? At each load point,
// fresh `disagg fake-workers --profile` workers (a warm prefix cache from an earlier point would
// flatter the next) behind a fresh `disagg serve`, a client replaying the workload in real time
// and timing each stream as a user would; then `disagg simulate` on the same requests, the same
// fleet and routing. It prints goodput, SLO attainment and TTFT side by side.
//
//   node bench/live-vs-offline.mjs [--workload bursty-chat] [--requests 300] [--scales 2,4]
//                                  [--slo-ttft-ms 150] [--slo-itl-ms 8]
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { TRACE_BLOCK_TOKENS, workload } from '../dist/testing.js';

const { values } = parseArgs({
  options: {
    workload: { type: 'string', default: 'bursty-chat' },
    requests: { type: 'string', default: '300' },
    scales: { type: 'string', default: '2,4' },
    'slo-ttft-ms': { type: 'string', default: '150' },
    'slo-itl-ms': { type: 'string', default: '8' },
  },
});
const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const PROFILE = 'llama-3.1-8b-fp8-h200-tp1-vllm';
const slo = { ttft: Number(values['slo-ttft-ms']), itl: Number(values['slo-itl-ms']) };

/** Starts a `disagg` command; resolves with it and its output once `ready` is in that output. */
async function start(args, ready) {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const seen = { out: '' };
  const add = (chunk) => {
    seen.out += chunk;
  };
  child.stdout.on('data', add);
  child.stderr.on('data', add);
  while (!seen.out.includes(ready)) {
    if (child.exitCode !== null) throw new Error(`disagg ${args[0]} exited: ${seen.out}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { child, seen };
}

async function stop(child) {
  if (child.exitCode !== null) return;
  child.kill('SIGTERM');
  await once(child, 'exit');
}

/** A prompt as token ids: each block's tokens its hash, so prompts share what the trace says. */
function tokenIds(r) {
  const ids = new Array(r.inputTokens);
  for (let k = 0; k < r.blocks.length; k++) {
    ids.fill(r.blocks[k] % 1_000_000, k * TRACE_BLOCK_TOKENS, Math.min((k + 1) * TRACE_BLOCK_TOKENS, r.inputTokens));
  }
  return ids;
}

/** One streamed completion, timed as its user feels it: TTFT and mean inter-token gap, in ms. */
async function timed(url, r) {
  const sent = performance.now();
  const answer = await request(`${url}/v1/completions`, {
    method: 'POST',
    // Its service levels, as the offline replay gives each request the run's.
    headers: {
      'content-type': 'application/json',
      'x-disagg-slo-ttft-ms': String(slo.ttft),
      'x-disagg-slo-itl-ms': String(slo.itl),
    },
    body: JSON.stringify({ model: 'fake-model', prompt: tokenIds(r), max_tokens: r.outputTokens, stream: true }),
  });
  let first;
  let last;
  let tokens = 0;
  let buffer = '';
  for await (const chunk of answer.body) {
    buffer += chunk.toString();
    for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
      if (buffer.slice(0, end).includes('"text":"tok')) {
        const at = performance.now();
        first ??= at;
        last = at;
        tokens++;
      }
      buffer = buffer.slice(end + 2);
    }
  }
  return { ttft: first - sent, itl: tokens > 1 ? (last - first) / (tokens - 1) : 0, end: performance.now() };
}

/** The workload through a fresh live fleet at `scale` times its rate: what its users felt. */
async function live(requests, scale) {
  const workers = await start(
    [
      'fake-workers',
      '--profile',
      PROFILE,
      '--prefills',
      '2',
      '--decodes',
      '2',
      '--prefill-port',
      '0',
      '--decode-port',
      '0',
    ],
    'Ctrl-C',
  );
  const urls = (role) =>
    [...workers.seen.out.matchAll(new RegExp(`${role} worker at (http://\\S+?),`, 'g'))].map((m) => m[1]);
  const workerArgs = [
    ...urls('prefill').flatMap((url) => ['--prefill', url]),
    ...urls('decode').flatMap((url) => ['--decode', url]),
  ];
  const port = String(20_000 + Math.floor(Math.random() * 20_000));
  const serve = await start(['serve', '--port', port, '--connector', 'vllm', ...workerArgs], 'listening');
  const url = `http://127.0.0.1:${port}`;
  try {
    const began = performance.now();
    const answers = await Promise.all(
      requests.map(
        (r) =>
          new Promise((resolve) =>
            setTimeout(() => timed(url, r).then(resolve, () => resolve(undefined)), r.arrivalMs / scale),
          ),
      ),
    );
    const done = answers.filter((a) => a !== undefined);
    const good = done.filter((a) => a.ttft <= slo.ttft && a.itl <= slo.itl).length;
    const seconds = (Math.max(...done.map((a) => a.end)) - began) / 1000;
    const ttfts = done.map((a) => a.ttft).sort((a, b) => a - b);
    return {
      goodput: good / seconds,
      attainment: good / requests.length,
      p50: ttfts[Math.floor(ttfts.length / 2)],
      p99: ttfts[Math.min(ttfts.length - 1, Math.floor(ttfts.length * 0.99))],
    };
  } finally {
    await stop(serve.child);
    await stop(workers.child);
  }
}

/** The same requests replayed offline by `disagg simulate`. */
function offline(scale) {
  const run = spawnSync(
    process.execPath,
    [
      bin,
      'simulate',
      '--workload',
      values.workload,
      '--requests',
      values.requests,
      '--prefill',
      '2',
      '--decode',
      '2',
      '--rate-scale',
      String(scale),
      '--slo-ttft-ms',
      values['slo-ttft-ms'],
      '--slo-itl-ms',
      values['slo-itl-ms'],
      '--json',
    ],
    { encoding: 'utf8' },
  );
  if (run.status !== 0) throw new Error(run.stderr);
  const s = JSON.parse(run.stdout);
  return { goodput: s.goodput_rps, attainment: s.slo_attainment, p50: s.ttft_ms.p50, p99: s.ttft_ms.p99 };
}

const requests = workload(values.workload, { requests: Number(values.requests), seed: 1 });
const rows = [];
for (const scale of values.scales.split(',').map(Number)) {
  const [on, off] = [await live(requests, scale), offline(scale)];
  rows.push({
    load: `x${scale}`,
    'goodput live / offline': `${on.goodput.toFixed(2)} / ${off.goodput.toFixed(2)}`,
    apart: `${((Math.abs(on.goodput - off.goodput) / off.goodput) * 100).toFixed(1)}%`,
    'attained live / offline': `${(on.attainment * 100).toFixed(1)}% / ${(off.attainment * 100).toFixed(1)}%`,
    'TTFT p50 ms': `${on.p50.toFixed(0)} / ${off.p50.toFixed(0)}`,
    'TTFT p99 ms': `${on.p99.toFixed(0)} / ${off.p99.toFixed(0)}`,
  });
}
console.log(
  `${values.workload}, ${values.requests} requests, 2P + 2D of ${PROFILE}, TTFT <= ${slo.ttft} ms, mean ITL <= ${slo.itl} ms:`,
);
console.table(rows);
