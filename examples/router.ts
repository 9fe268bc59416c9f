// A disaggregating router of your own, on the library's pieces: the flow, HTTP engines, worker
// pools and the relay of `disagg serve`. PREFILL and DECODE are comma-separated worker URLs;
// CONNECTOR is vllm (the default) or sglang (then BOOTSTRAP_PORT, 8998 by default).
import { createServer } from 'node:http';
import {
  Controller,
  cacheAware,
  disaggregate,
  httpEngine,
  parseJson,
  sglangBootstrap,
  vllmNixl,
  WorkerPool,
  workerRedactor,
} from 'disagg';
import { errorToResponse, type Route, validateRequest, writeJson, writeSse } from 'disagg/server';

const sglang = process.env.CONNECTOR === 'sglang';
const bootstrapPort = Number(process.env.BOOTSTRAP_PORT ?? 8998);
const urls = (name: string) => (process.env[name] ?? '').split(',').filter((url) => url !== '');
const prefillWorkers = new WorkerPool(
  urls('PREFILL').map((url) => (sglang ? { url, bootstrapPort } : { url })),
  { selection: cacheAware() },
);
const decodeWorkers = new WorkerPool(
  urls('DECODE').map((url) => ({ url })),
  { selection: 'least-in-flight' },
);
// Clients never see a worker's address: errors name workers worker-0, worker-1, ...
const redact = workerRedactor([...prefillWorkers.workers, ...decodeWorkers.workers]);
const answer = (error: unknown) => errorToResponse(error, { redact });
const engine = httpEngine<{ url: string }>();
const routes: Record<string, Route> = { '/v1/completions': 'completions', '/v1/chat/completions': 'chat' };

const server = createServer(async (req, res) => {
  const route = routes[req.url ?? ''];
  if (req.method !== 'POST' || route === undefined) return void res.writeHead(404).end();
  const context = new Controller();
  // The client left: the flow stops decode (after it took its KV), never prefill.
  res.on('close', () => res.writableFinished || context.stop());
  try {
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = parseJson(text); // exact 64-bit integers
    validateRequest(route, body); // a 400 before any worker computes KV for a doomed request
    const stream = await disaggregate({
      request: body,
      context,
      connector: sglang ? sglangBootstrap : vllmNixl,
      prefill: engine,
      decode: engine,
      prefillWorkers,
      decodeWorkers,
      // A decode worker that could not be reached never saw the handoff: try the next one.
      retryDecode: (_error, attempt) => (attempt < 2 ? 50 * 2 ** attempt : undefined),
    });
    if (body.stream === true) await writeSse(stream, res, { request: body, answer, context });
    else await writeJson(stream, res, { request: body, answer });
  } catch (error) {
    const { status, body } = answer(error);
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }
});

server.listen(Number(process.env.PORT ?? 8000), '127.0.0.1', () => {
  const address = server.address();
  console.log(`router listening on http://127.0.0.1:${typeof address === 'object' ? address?.port : address}`);
});
process.on('SIGTERM', () => server.close());
