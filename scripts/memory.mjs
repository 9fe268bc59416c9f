// npm run memory: what the proxy's memory limit must hold, measured on the built bin with its
// default admission (--max-concurrent-requests 1024, --queue-size 1024). The proxy
// runs in a process of its own (its resident set is read from /proc); fake vLLM workers and
// the clients run here. Prints the resident set at rest, with every slot streaming and the
// queue full, and the cost of bodies near the 8 MiB limit. Linux only (/proc).
//   node scripts/memory.mjs [--prompt-bytes=4096] [--big-bodies=16]
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startFakeWorker } from 'disagg/testing';
import { Agent, request } from 'undici';

const { values: args } = parseArgs({
  options: {
    'prompt-bytes': { type: 'string', default: '4096' },
    'big-bodies': { type: 'string', default: '16' },
  },
});
const PROMPT_BYTES = Number(args['prompt-bytes']);
const BIG_BODIES = Number(args['big-bodies']);
const SLOTS = 1024;
const QUEUED = 1024;
const MiB = 1024 * 1024;

/** The proxy's resident set now and at its peak, in MiB. */
function rss(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]) / 1024;
  return { now: field('VmRSS'), peak: field('VmHWM') };
}

const waitFor = async (what, check) => {
  for (let i = 0; i < 600; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
};

// Decode streams long enough (40 tokens, 250 ms apart: 10 s) that every slot is busy at once.
const prefill = await startFakeWorker({ role: 'prefill', protocol: 'vllm' });
const decode = await startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 40, tokenIntervalMs: 250 });
const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const proxy = spawn(
  process.execPath,
  [bin, 'serve', '--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url, '--port', '0'],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
let out = '';
proxy.stdout.on('data', (chunk) => {
  out += chunk;
});
let url;
await waitFor('the proxy to listen', () => {
  const line = out.split('\n').find((entry) => entry.includes('disagg serve listening'));
  if (line !== undefined) url = JSON.parse(line).url;
  return url !== undefined;
});
const agent = new Agent({ connections: SLOTS + QUEUED + BIG_BODIES + 8 });
const gauge = async (name) => {
  const text = await (await request(`${url}/metrics`, { dispatcher: agent })).body.text();
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1]);
};
const post = (prompt, maxTokens) =>
  request(`${url}/v1/completions`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-model', prompt, max_tokens: maxTokens, stream: true }),
  }).then(async (answer) => {
    await answer.body.text();
    return answer.statusCode;
  });

await new Promise((resolve) => setTimeout(resolve, 1000));
const rest = rss(proxy.pid);

const prompt = 'x'.repeat(PROMPT_BYTES);
const loaded = Array.from({ length: SLOTS + QUEUED }, () => post(prompt, 40));
await waitFor('every slot busy and the queue full', async () => {
  return (await gauge('disagg_admitted_requests')) === SLOTS && (await gauge('disagg_queue_depth')) === QUEUED;
});
const full = rss(proxy.pid);
const statuses = await Promise.all(loaded);
const served = statuses.filter((status) => status === 200).length;

// Bodies near the limit, all at once: what one costs beyond the streams.
const before = rss(proxy.pid);
const big = 'y'.repeat(8 * MiB - 1024);
await Promise.all(Array.from({ length: BIG_BODIES }, () => post(big, 1)));
const after = rss(proxy.pid);

proxy.kill('SIGTERM');
await new Promise((resolve) => proxy.on('exit', resolve));
await agent.close();
await prefill.close();
await decode.close();

const mb = (value) => `${Math.round(value)} MiB`;
console.log(`proxy (Node ${process.version}), default admission: ${SLOTS} in flight + ${QUEUED} queued`);
console.log(`  at rest:                              ${mb(rest.now)}`);
console.log(
  `  ${SLOTS} streaming + ${QUEUED} queued, ${PROMPT_BYTES} B prompts: ${mb(full.now)} (peak ${mb(full.peak)}); ${served}/${SLOTS + QUEUED} answered 200`,
);
console.log(
  `  per request held:                     ${(((full.now - rest.now) * 1024) / (SLOTS + QUEUED)).toFixed(1)} KiB`,
);
console.log(
  `  ${BIG_BODIES} bodies of 8 MiB at once:            peak ${mb(after.peak)} (${mb((after.peak - before.now) / BIG_BODIES)} each above the streams' level)`,
);
