// Child processes of bench/proxy.mjs, so that the workers and the relays do not share an
// event loop with what is measured. Prints one JSON line with the URLs, runs until stdin ends.
//   node bench/proxy-fixtures.mjs workers <vllm|sglang> <tokens> <intervalMs>
//   node bench/proxy-fixtures.mjs relays <decodeUrl,...> <tokens>
//   node bench/proxy-fixtures.mjs handler <prefillUrl,...> <decodeUrl,...>
import { createServer } from 'node:http';
import { pipeline, Readable } from 'node:stream';
import { createHandler } from 'disagg/server';
import { startFakeWorker } from 'disagg/testing';
import Fastify from 'fastify';
import pino from 'pino';
import { Agent, request } from 'undici';

const [kind, ...rest] = process.argv.slice(2);
const closers = [];

if (kind === 'workers') {
  const protocol = rest[0];
  const [tokens, interval] = rest.slice(1).map(Number);
  // A context long enough for any prompt the benchmark sends (--prompt-kb).
  const maxModelLen = 1 << 20;
  const prefill = await startFakeWorker({ role: 'prefill', protocol, maxModelLen });
  // Paced, as a GPU streams tokens; and unpaced, for the relays' throughput.
  const decode = await startFakeWorker({ role: 'decode', protocol, tokens, tokenIntervalMs: interval, maxModelLen });
  const fast = await startFakeWorker({ role: 'decode', protocol, tokens, maxModelLen });
  closers.push(
    () => prefill.close(),
    () => decode.close(),
    () => fast.close(),
  );
  console.log(
    JSON.stringify({ prefill: prefill.url, decode: decode.url, fast: fast.url, bootstrapPort: prefill.bootstrapPort }),
  );
} else if (kind === 'handler') {
  // createHandler in a node:http server, glued as the README's Embedding example does, logging
  // every request at info as the bin does.
  const [prefillUrls, decodeUrls] = rest.map((list) => list.split(','));
  const disagg = createHandler({
    connector: 'vllm',
    prefill: prefillUrls.map((url) => ({ url })),
    decode: decodeUrls.map((url) => ({ url })),
    logger: pino({ level: 'info' }),
  });
  await disagg.start();
  const server = createServer(async (req, res) => {
    const aborted = new AbortController();
    res.on('close', () => aborted.abort());
    const body = req.method === 'GET' || req.method === 'HEAD' ? {} : { body: Readable.toWeb(req), duplex: 'half' };
    const response = await disagg(
      new Request(`http://${req.headers.host}${req.url}`, {
        method: req.method,
        headers: req.headers,
        signal: aborted.signal,
        ...body,
      }),
    );
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body === null) res.end();
    else pipeline(Readable.fromWeb(response.body), res, () => {});
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () => server.close(),
    () => disagg.close({ gracePeriodMs: 0 }),
  );
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }));
} else {
  const [decodeList, tokens] = rest;
  const decodeUrls = decodeList.split(',');
  let turn = 0;
  const dispatcher = new Agent({ connections: 128 });
  const body = JSON.stringify({ model: 'm', prompt: 'Benchmark prompt', max_tokens: Number(tokens), stream: true });
  const upstream = () =>
    request(`${decodeUrls[turn++ % decodeUrls.length]}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      dispatcher,
    });
  // Each relay passes the decode worker's SSE stream through and nothing else.
  const relay = async (res, answer) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for await (const chunk of answer.body) if (!res.write(chunk)) await new Promise((r) => res.once('drain', r));
    res.end();
  };
  // The same keep-alive window as fastify's default (72 s; Node's own is 5 s), so that the
  // comparison is of the frameworks, not of that setting.
  const bare = createServer({ keepAliveTimeout: 72_000, headersTimeout: 73_000 }, (req, res) => {
    req.resume();
    req.on('end', () => upstream().then((answer) => relay(res, answer)));
  });
  await new Promise((resolve) => bare.listen(0, '127.0.0.1', resolve));
  const fastify = Fastify({ logger: false });
  fastify.post('/v1/completions', async (_request, reply) => {
    const answer = await upstream();
    reply.hijack();
    await relay(reply.raw, answer);
  });
  const fastifyUrl = await fastify.listen({ port: 0, host: '127.0.0.1' });
  closers.push(
    () => fastify.close(),
    () => new Promise((resolve) => bare.close(resolve)),
  );
  console.log(JSON.stringify({ bare: `http://127.0.0.1:${bare.address().port}`, fastify: fastifyUrl }));
}

process.stdin.resume();
process.stdin.on('end', async () => {
  await Promise.all(closers.map((close) => close()));
  process.exit(0);
});
