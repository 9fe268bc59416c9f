// npm run bench:proxy: what the disagg proxy adds in front of the workers, and why it is built
// on Node's http server rather than fastify. Everything runs on loopback against the fake
// workers of disagg/testing; every figure is a ratio to a baseline of the same run.
//
// 1. Time to first token and time per token, for streamed requests sent to the proxy
//    (prefill over HTTP, then decode) against the same requests sent to the decode worker
//    directly (no prefill: the floor any router starts from). Decode paces its tokens
//    (--interval, 2 ms), so the time per token is the pace plus what the path adds.
// 2. The relay itself: the decode worker's SSE stream passed to the client by a bare
//    node:http handler and by a fastify route doing the same, in requests per second.
// The workers, the proxy (the real `disagg serve` bin) and the two relays each run in their own
// process (bench/proxy-fixtures.mjs); this process only sends requests.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '50' },
    tokens: { type: 'string', default: '64' },
    passes: { type: 'string', default: '3' },
    interval: { type: 'string', default: '2' },
  },
});
const REQUESTS = Number(args.requests);
const CONCURRENCY = Number(args.concurrency);
const TOKENS = Number(args.tokens);
const PASSES = Number(args.passes);
const dispatcher = new Agent({ connections: CONCURRENCY * 2 });
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const p99 = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)];

/** One streamed request: time to the first data chunk, and to the end, in ms. */
async function streamOnce(url, body) {
  const start = performance.now();
  const answer = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    dispatcher,
  });
  let first;
  for await (const chunk of answer.body) {
    if (first === undefined && chunk.includes('data: {')) first = performance.now() - start;
  }
  if (answer.statusCode !== 200) throw new Error(`status ${answer.statusCode}`);
  return { ttft: first ?? Number.NaN, total: performance.now() - start };
}

/** `REQUESTS` streamed requests, `CONCURRENCY` at a time. */
async function load(url, body) {
  const ttft = [];
  const perToken = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < REQUESTS) {
        next++;
        const { ttft: first, total } = await streamOnce(url, body);
        ttft.push(first);
        perToken.push((total - first) / TOKENS);
      }
    }),
  );
  return {
    ttft: median(ttft),
    ttftP99: p99(ttft),
    perToken: median(perToken),
    rps: REQUESTS / ((performance.now() - start) / 1000),
  };
}

/** Starts a child process and resolves with the JSON of its first stdout line matching `pick`. */
function child(args, pick = (line) => line.startsWith('{')) {
  const proc = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'], cwd: root });
  return new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (chunk) => {
      out += chunk;
      const line = out.split('\n').find(pick);
      if (line !== undefined && !proc.resolved) {
        proc.resolved = true;
        resolve({ proc, info: JSON.parse(line) });
      }
    });
    proc.on('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}`)));
  });
}

const root = fileURLToPath(new URL('..', import.meta.url));
const { proc: workers, info: urls } = await child([
  'bench/proxy-fixtures.mjs',
  'workers',
  String(TOKENS),
  args.interval,
]);
const { proc: relays, info: relayUrls } = await child([
  'bench/proxy-fixtures.mjs',
  'relays',
  urls.fast,
  String(TOKENS),
]);
// The proxy as it is deployed: the disagg bin, logging every request at info.
const { proc: server, info: listening } = await child(
  [
    'dist/cli.js',
    'serve',
    '--connector',
    'vllm',
    '--prefill',
    urls.prefill,
    '--decode',
    urls.decode,
    '--port',
    '0',
    '--host',
    '127.0.0.1',
  ],
  (line) => line.includes('disagg serve listening'),
);
const proxyUrl = listening.url;
const bareUrl = `${relayUrls.bare}/v1/completions`;
const fastifyUrl = `${relayUrls.fastify}/v1/completions`;
const decode = { url: urls.decode };
const body = { model: 'm', prompt: 'Benchmark prompt', max_tokens: TOKENS, stream: true };

const runs = { direct: [], proxy: [], bare: [], fastify: [] };
const targets = {
  direct: `${decode.url}/v1/completions`,
  proxy: `${proxyUrl}/v1/completions`,
  bare: bareUrl,
  fastify: fastifyUrl,
};
for (const url of Object.values(targets)) await load(url, body); // warm-up, every path
for (let pass = 0; pass < PASSES; pass++) {
  // Each pass in another order, so that drift on the machine favours no path.
  const order = Object.keys(targets);
  if (pass % 2 === 1) order.reverse();
  for (const name of order) runs[name].push(await load(targets[name], body));
  process.stderr.write(`pass ${pass + 1}/${PASSES} done\n`);
}
const perPass = (a, b, field) => median(runs[a].map((run, i) => run[field] / runs[b][i][field]));
const mid = (name, field) => median(runs[name].map((run) => run[field]));

console.log(
  `Node ${process.version}, ${REQUESTS} streamed requests of ${TOKENS} tokens per run, ${CONCURRENCY} at a time, ${PASSES} passes, medians; decode paced at ${args.interval} ms per token (the relays' decode unpaced)`,
);
console.log('');
console.log('| path | TTFT ms (median) | TTFT ms (p99) | ms per token after the first | requests/s |');
console.log('|---|---:|---:|---:|---:|');
for (const [name, label] of [
  ['direct', 'client -> decode worker (no prefill)'],
  ['proxy', 'client -> disagg proxy -> prefill, then decode'],
  ['bare', 'client -> bare node:http SSE relay -> decode'],
  ['fastify', 'client -> fastify SSE relay -> decode'],
]) {
  console.log(
    `| ${label} | ${mid(name, 'ttft').toFixed(2)} | ${mid(name, 'ttftP99').toFixed(2)} | ${mid(name, 'perToken').toFixed(3)} | ${Math.round(mid(name, 'rps'))} |`,
  );
}
console.log('');
console.log(
  `proxy / direct: TTFT ${perPass('proxy', 'direct', 'ttft').toFixed(2)} x, per token ${perPass('proxy', 'direct', 'perToken').toFixed(2)} x, requests/s ${perPass('proxy', 'direct', 'rps').toFixed(2)} x`,
);
console.log(
  `fastify / node:http relay: requests/s ${perPass('fastify', 'bare', 'rps').toFixed(2)} x, TTFT ${perPass('fastify', 'bare', 'ttft').toFixed(2)} x`,
);

for (const proc of [workers, relays]) proc.stdin.end();
server.kill('SIGTERM');
await dispatcher.close();
