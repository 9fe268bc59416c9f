import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { request } from 'undici';
import { NoWorkerError } from '../flow/worker-pool.js';
import { answerJson, pathOf, RequestError } from '../http/node-server.js';
import { UpstreamError } from '../http/upstream-error.js';
import { joinUrl } from '../util/url.js';
import { handleCompletion } from './completion.js';
import { errorAnswer } from './error-answers.js';
import type { Route } from './openai-format.js';
import type { ProxyState } from './proxy-state.js';

/**
 * The proxy's routes: `POST /v1/completions`, `/v1/chat/completions` and SGLang's
 * `/generate` (each calling the same route on the workers), `GET /v1/models` (from a decode
 * worker), `/health` (liveness), `/ready` (a prefill and a decode worker in rotation, and not
 * shutting down) and `/metrics` (Prometheus). With an API key, the generation routes and
 * `/v1/models` need it (401 otherwise). Anything else is a 404 in the OpenAI error shape.
 *
 * @internal
 */
export async function handleRequest(proxy: ProxyState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = pathOf(req);
  if (req.method === 'GET') {
    if (path === '/health') return answerJson(res, 200, { status: 'ok' });
    if (path === '/ready') return ready(proxy, res);
    if (path === '/metrics') return metrics(proxy, res);
  }
  const route = req.method === 'POST' ? GENERATION_ROUTES[path] : undefined;
  const isModels = req.method === 'GET' && path === '/v1/models';
  if ((route !== undefined || isModels) && !authorized(proxy, req)) {
    return answerJson(res, 401, {
      error: {
        message: 'Incorrect or missing API key: send it as "Authorization: Bearer <key>"',
        type: 'invalid_request_error',
        code: 'invalid_api_key',
        param: null,
      },
    });
  }
  if (isModels) return models(proxy, res);
  if (route !== undefined) return handleCompletion(proxy, req, res, route);
  const answer = errorAnswer(new RequestError(404, `No route ${req.method} ${path}`));
  answerJson(res, answer.status, answer.body);
}

/** The proxy's own routes as the metrics name them: any other path is `unknown` (bounded labels). */
const ROUTE_LABELS: Readonly<Record<string, string>> = {
  'POST /v1/completions': 'completions',
  'POST /v1/chat/completions': 'chat',
  'POST /generate': 'generate',
  'GET /v1/models': 'models',
  'GET /health': 'health',
  'GET /ready': 'ready',
  'GET /metrics': 'metrics',
};

/**
 * The route of a request for the metrics: one of the proxy's routes, or `unknown`.
 *
 * @internal
 */
export function routeLabel(req: IncomingMessage): string {
  return ROUTE_LABELS[`${req.method} ${pathOf(req)}`] ?? 'unknown';
}

/** The generation routes: each calls the same route on the workers. */
const GENERATION_ROUTES: Readonly<Record<string, Route>> = {
  '/v1/completions': 'completions',
  '/v1/chat/completions': 'chat',
  '/generate': 'generate',
};

/**
 * Whether the request carries the proxy's API key (`Authorization: Bearer <key>`), compared in
 * constant time (as digests, so that the key's length does not show either); true without a key.
 */
function authorized(proxy: ProxyState, req: IncomingMessage): boolean {
  const key = proxy.options.apiKey;
  if (key === undefined) return true;
  const given = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim() ?? '';
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(given), digest(key));
}

function ready(proxy: ProxyState, res: ServerResponse): void {
  const prefill = proxy.prefillWorkers.available.length;
  const decode = proxy.decodeWorkers.available.length;
  const isReady = prefill > 0 && decode > 0 && !proxy.closing;
  answerJson(res, isReady ? 200 : 503, { ready: isReady, prefill_workers: prefill, decode_workers: decode });
}

async function metrics(proxy: ProxyState, res: ServerResponse): Promise<void> {
  const { registry } = proxy.metrics;
  const text = await registry.metrics();
  res.writeHead(200, { 'content-type': registry.contentType });
  res.end(text);
}

/** The model list of a decode worker in rotation, passed through as it answered. */
async function models(proxy: ProxyState, res: ServerResponse): Promise<void> {
  const worker = proxy.decodeWorkers.available[0];
  if (worker === undefined) {
    const answer = errorAnswer(new NoWorkerError(proxy.decodeWorkers.workers.length));
    return answerJson(res, answer.status, answer.body);
  }
  try {
    const { dispatcher } = proxy.options;
    const answer = await request(joinUrl(worker.url, '/v1/models'), {
      headers: proxy.workerHeaders,
      ...(dispatcher === undefined ? {} : { dispatcher }),
    });
    const text = await answer.body.text();
    res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
    res.end(text);
  } catch (error) {
    const answer = errorAnswer(UpstreamError.fromFailure(worker.url, error), 'decode', (text) => proxy.redact(text));
    answerJson(res, answer.status, answer.body);
  }
}
