// node bench/worker-client.mjs: the library's client for worker calls, undici (its Agent and
// dispatch handler API, as src/http/upstream-call.ts uses it), against Node's own http client
// doing the same, for the one job that is per token: reading a worker's SSE stream. Each
// client runs in its own process with the image's node flags and NODE_OPTIONS, --concurrency
// streams at a time against one SSE server (another process) that sends --tokens events, one
// every --interval ms, as a paced decode worker does. Per client: CPU time per request (its
// own process.cpuUsage(), after --warmup requests) and its peak resident set (sampled every
// 20 ms); rounds alternate, and the ratios node:http / undici are taken within a round.
// Whether moving the worker calls off undici (a public option of the library: `dispatcher`)
// would pay is what this answers.
import { spawn } from 'node:child_process';
import { createServer, Agent as HttpAgent, request as httpRequest } from 'node:http';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { child, imageNode, median } from './proxy-load.mjs';

// `serve` and `client` are this script's own children; anything else is the comparison's options.
const [first, ...others] = process.argv.slice(2);
const [role, rest] = first === 'serve' || first === 'client' ? [first, others] : ['compare', process.argv.slice(2)];

if (role === 'serve') {
  const [tokens, interval] = rest.map(Number);
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let sent = 0;
      const timer = setInterval(() => {
        if (sent === tokens) {
          clearInterval(timer);
          res.end('data: [DONE]\n\n');
          return;
        }
        res.write(
          `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"t${sent}","logprobs":null,"finish_reason":null}]}\n\n`,
        );
        sent++;
      }, interval);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
} else if (role === 'client') {
  const [kind, port, requests, concurrency, warmup] = [rest[0], ...rest.slice(1).map(Number)];
  const body = JSON.stringify({ model: 'm', prompt: 'p', max_tokens: 64, stream: true });
  let call;
  if (kind === 'undici') {
    const Agent = createRequire(import.meta.url)('undici/lib/dispatcher/agent.js');
    const agent = new Agent({ connections: concurrency * 2 });
    const origin = `http://127.0.0.1:${port}`;
    call = () =>
      new Promise((resolve, reject) => {
        let bytes = 0;
        agent.dispatch(
          { origin, path: '/v1/completions', method: 'POST', headers: { 'content-type': 'application/json' }, body },
          {
            onRequestStart() {},
            onResponseStart() {},
            onResponseData(_controller, chunk) {
              bytes += chunk.length;
            },
            onResponseEnd() {
              resolve(bytes);
            },
            onResponseError(_controller, error) {
              reject(error);
            },
          },
        );
      });
  } else {
    const agent = new HttpAgent({ keepAlive: true, maxSockets: concurrency * 2 });
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    call = () =>
      new Promise((resolve, reject) => {
        let bytes = 0;
        const req = httpRequest(
          { host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent, headers },
          (res) => {
            res.on('data', (chunk) => {
              bytes += chunk.length;
            });
            res.on('end', () => resolve(bytes));
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
  }
  const batch = async (count) => {
    let left = count;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (left-- > 0) await call();
      }),
    );
  };
  await batch(warmup);
  let peak = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 20);
  const before = process.cpuUsage();
  await batch(requests);
  const cpu = process.cpuUsage(before);
  clearInterval(sampler);
  console.log(JSON.stringify({ cpuPerRequest: (cpu.user + cpu.system) / 1000 / requests, peakRss: peak / 2 ** 20 }));
  process.exit(0);
} else {
  const { values: args } = parseArgs({
    args: rest,
    options: {
      requests: { type: 'string', default: '3000' },
      concurrency: { type: 'string', default: '50' },
      tokens: { type: 'string', default: '64' },
      interval: { type: 'string', default: '2' },
      warmup: { type: 'string', default: '2000' },
      rounds: { type: 'string', default: '6' },
    },
  });
  const script = fileURLToPath(import.meta.url);
  const { flags, options } = imageNode();
  const { proc: server, info } = await child(process.execPath, [script, 'serve', args.tokens, args.interval], {});
  const once = (kind) =>
    new Promise((resolve, reject) => {
      const client = spawn(
        process.execPath,
        [...flags, script, 'client', kind, info.port, args.requests, args.concurrency, args.warmup].map(String),
        { env: { ...process.env, NODE_OPTIONS: options }, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let out = '';
      client.stdout.on('data', (chunk) => {
        out += chunk;
      });
      client.on('exit', (code) =>
        code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${kind} client: exit ${code}`)),
      );
    });
  const runs = { undici: [], http: [] };
  for (let round = 0; round < Number(args.rounds); round++) {
    const order = round % 2 === 0 ? ['undici', 'http'] : ['http', 'undici'];
    for (const kind of order) runs[kind].push(await once(kind));
    process.stderr.write(`round ${round + 1}/${args.rounds} done\n`);
  }
  server.stdin.end();
  const mid = (kind, field) => median(runs[kind].map((run) => run[field]));
  const ratio = (field) => median(runs.http.map((run, i) => run[field] / runs.undici[i][field]));
  console.log(
    `Node ${process.version}, flags ${flags.join(' ') || 'none'}, NODE_OPTIONS ${options || 'none'}; ${args.requests} streams of ${args.tokens} tokens (one every ${args.interval} ms), ${args.concurrency} at a time, after ${args.warmup}; ${args.rounds} rounds, medians`,
  );
  console.log('');
  console.log('| worker client | CPU ms per request | peak RSS MB |');
  console.log('|---|---:|---:|');
  for (const kind of ['undici', 'http']) {
    const label =
      kind === 'undici' ? "undici's Agent, dispatch handler (the library's)" : "node:http's Agent and request";
    console.log(`| ${label} | ${mid(kind, 'cpuPerRequest').toFixed(3)} | ${mid(kind, 'peakRss').toFixed(1)} |`);
  }
  console.log('');
  console.log(
    `node:http / undici: CPU per request ${ratio('cpuPerRequest').toFixed(2)} x, peak RSS ${ratio('peakRss').toFixed(2)} x (${(mid('http', 'peakRss') - mid('undici', 'peakRss')).toFixed(1)} MB)`,
  );
}
