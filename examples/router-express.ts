// The router of examples/router-hono.ts on Express: the same pieces, answered on Node's own
// request and response. No body parser is needed: answerNode reads the body itself (integers
// above 2^53 kept exact, a bad body its 400), and takes one that express.json() read.
// PREFILL and DECODE are comma-separated worker URLs; CONNECTOR is vllm (the default) or
// sglang (then BOOTSTRAP_PORT, 8998 by default); PORT is where it listens (8000).
import { cacheAware, disaggregate, httpEngine, sglangBootstrap, vllmNixl, WorkerPool, workerRedactor } from 'disagg';
import { answerNode, defaultRetries, errorToResponse, watchHealth } from 'disagg/server';
import express from 'express';

const urls = (name: string) => (process.env[name] ?? '').split(',').filter((url) => url !== '');
const bootstrapPort = Number(process.env.BOOTSTRAP_PORT ?? 8998);
const prefillWorkers = new WorkerPool(
  urls('PREFILL').map((url) => ({ url, bootstrapPort })),
  { selection: cacheAware() }, // to the worker most likely to hold the prompt's prefix
);
const decodeWorkers = new WorkerPool(
  urls('DECODE').map((url) => ({ url })),
  { selection: 'least-in-flight' },
);
// Probes each worker's /health and learns from every request: a dead worker leaves the rotation.
const health = watchHealth({ prefill: prefillWorkers, decode: decodeWorkers });
// Clients never see a worker's address: errors name workers worker-0, worker-1, ...
const redact = workerRedactor([...prefillWorkers.workers, ...decodeWorkers.workers]);
const engine = httpEngine();
const flow = {
  connector: process.env.CONNECTOR === 'sglang' ? sglangBootstrap : vllmNixl,
  prefill: engine,
  decode: engine,
  prefillWorkers,
  decodeWorkers,
  onEvent: health.onEvent,
  ...defaultRetries(), // a request that failed before its first byte goes to another worker
  usage: 'always' as const, // every answer reports its tokens, shown only to clients that asked
};

const app = express();
for (const [path, route] of [
  ['/v1/completions', 'completions'],
  ['/v1/chat/completions', 'chat'],
] as const) {
  app.post(path, async (req, res) => {
    const { usage } = await answerNode(
      req,
      res,
      route,
      (body, context) => disaggregate({ ...flow, request: body, context }),
      { answer: (error) => errorToResponse(error, { redact }) },
    );
    console.log(`${route}: ${usage?.total_tokens ?? 0} tokens`);
  });
}

const server = app.listen(Number(process.env.PORT ?? 8000), '127.0.0.1', () => {
  const address = server.address();
  console.log(`router listening on http://127.0.0.1:${typeof address === 'object' ? address?.port : address}`);
});
process.on('SIGTERM', () => {
  health.stop();
  server.close();
});
