// A disaggregating router on Hono, from the library's pieces: worker pools, health checks,
// retries, the flow, and the relay that answers SSE or whole. PREFILL and DECODE are
// comma-separated worker URLs; CONNECTOR is vllm (the default) or sglang (then BOOTSTRAP_PORT,
// 8998 by default); PORT is where it listens (8000).
import { serve } from '@hono/node-server';
import { cacheAware, disaggregate, httpEngine, sglangBootstrap, vllmNixl, WorkerPool, workerRedactor } from 'disagg';
import { answerFetch, defaultRetries, errorToResponse, watchHealth } from 'disagg/server';
import { Hono } from 'hono';

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

const app = new Hono();
for (const [path, route] of [
  ['/v1/completions', 'completions'],
  ['/v1/chat/completions', 'chat'],
] as const) {
  app.post(path, async (c) => {
    const response = await answerFetch(
      c.req.raw,
      route,
      (body, context) => disaggregate({ ...flow, request: body, context }),
      { answer: (error) => errorToResponse(error, { redact }) },
    );
    response.result.then(({ usage }) => console.log(`${route}: ${usage?.total_tokens ?? 0} tokens`));
    return response;
  });
}

const server = serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 8000), hostname: '127.0.0.1' }, (info) =>
  console.log(`router listening on http://127.0.0.1:${info.port}`),
);
process.on('SIGTERM', () => {
  health.stop();
  server.close();
});
