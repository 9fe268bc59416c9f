import type { IncomingMessage, ServerResponse } from 'node:http';
import { request } from 'undici';
import { NoWorkerError } from '../flow/worker-pool.js';
import { parseJson } from '../http/json.js';
import { answerJson, decodePathPart, pathOf, RequestError } from '../http/node-server.js';
import { UpstreamError } from '../http/upstream-error.js';
import { joinUrl } from '../util/url.js';
import { ADMIN_PREFIX, handleAdmin } from './admin-routes.js';
import { answerUnauthorized, bearerMatches } from './bearer-auth.js';
import { handleCompletion } from './completion.js';
import { errorAnswer } from './error-answers.js';
import type { Route } from './openai-format.js';
import type { ProxyState } from './proxy-state.js';

/**
 * The proxy's routes: `POST /v1/completions`, `/v1/chat/completions` and SGLang's
 * `/generate` (each calling the same route on the workers), `GET /v1/models` (from a decode
 * worker), `/health` (liveness), `/ready` (a prefill and a decode worker in rotation, and not
 * shutting down) and `/metrics` (Prometheus). With an API key, the generation routes and
 * `/v1/models` need it (401 otherwise). With an admin key, `/admin/workers` (see
 * {@link handleAdmin}). Anything else is a 404 in the OpenAI error shape. `given.body` is the
 * request's body when the caller has read it already (a framework that parses bodies);
 * `given.path` the route's path when the proxy is mounted under a prefix.
 *
 * @internal
 */
export async function handleRequest(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  given: { body?: string | undefined; path?: string | undefined } = {},
): Promise<void> {
  const { body } = given;
  const path = given.path ?? pathOf(req);
  const method = req.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD') {
    // HEAD answers as GET without the body (Node leaves the body out of a HEAD answer).
    if (path === '/health') return answerJson(res, 200, { status: 'ok' });
    if (path === '/ready') return ready(proxy, res);
    // With a metrics port of its own, /metrics is not on the API port (a 404 like any path).
    if (path === '/metrics' && proxy.options.metricsPort === undefined) return answerMetrics(proxy, res);
  }
  const allowed = allowedMethods(path);
  if (allowed !== undefined && !allowed.includes(method)) {
    res.setHeader('allow', allowed.join(', '));
    const answer = errorAnswer(
      new RequestError(405, `${method} is not allowed on ${path}: use ${allowed.join(' or ')}`),
    );
    return answerJson(res, answer.status, answer.body);
  }
  const route = method === 'POST' ? GENERATION_ROUTES[path] : undefined;
  let modelId: string | undefined;
  try {
    modelId =
      method === 'GET' && path.startsWith('/v1/models/') ? decodePathPart(path.slice('/v1/models/'.length)) : undefined;
  } catch (error) {
    const answer = errorAnswer(error);
    return answerJson(res, answer.status, answer.body);
  }
  const isModels = method === 'GET' && (path === '/v1/models' || modelId !== undefined);
  if ((route !== undefined || isModels) && !bearerMatches(req, proxy.options.apiKey)) {
    return answerUnauthorized(res, 'API key', { req, path, logger: proxy.logger });
  }
  // Off (a 404 like any unknown path) unless an admin key is set.
  if (proxy.options.adminKey !== undefined && (path === ADMIN_PREFIX || path.startsWith(`${ADMIN_PREFIX}/`))) {
    if (!bearerMatches(req, proxy.options.adminKey)) {
      return answerUnauthorized(res, 'admin key', { req, path, logger: proxy.logger });
    }
    return handleAdmin(proxy, req, res, path, body);
  }
  if (isModels) return models(proxy, res, modelId);
  if (route !== undefined) return handleCompletion(proxy, req, res, route, body);
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
  'GET /admin/workers': 'admin',
  'POST /admin/workers': 'admin',
};

/**
 * The route of a request for the metrics: one of the proxy's routes, or `unknown`.
 *
 * @internal
 */
export function routeLabel(req: IncomingMessage, path = pathOf(req)): string {
  if (path.startsWith(`${ADMIN_PREFIX}/`)) return 'admin';
  // One model (`GET /v1/models/{id}`) is the models route: the id must not become a label.
  if (req.method === 'GET' && path.startsWith('/v1/models/')) return 'models';
  return ROUTE_LABELS[`${req.method} ${path}`] ?? 'unknown';
}

/** The methods a path of the proxy takes; undefined for a path it does not have. */
function allowedMethods(path: string): readonly string[] | undefined {
  if (GENERATION_ROUTES[path] !== undefined) return ['POST'];
  if (path === '/health' || path === '/ready' || path === '/metrics' || path === '/v1/models') return ['GET', 'HEAD'];
  if (path.startsWith('/v1/models/')) return ['GET'];
  return undefined;
}

/** The generation routes: each calls the same route on the workers. */
const GENERATION_ROUTES: Readonly<Record<string, Route>> = {
  '/v1/completions': 'completions',
  '/v1/chat/completions': 'chat',
  '/generate': 'generate',
};

/**
 * Whether requests can be served now: a decode worker in rotation (without a prefill worker
 * they are served by decode alone) and not draining for shutdown. The body says why not.
 */
function ready(proxy: ProxyState, res: ServerResponse): void {
  const prefill = proxy.prefillWorkers.available.length;
  const decode = proxy.decodeWorkers.available.length;
  const required = proxy.options.requireDisaggregation;
  const isReady = decode > 0 && !proxy.draining && (prefill > 0 || !required);
  const reason = proxy.draining
    ? 'shutting down'
    : decode === 0
      ? 'no decode worker in rotation'
      : prefill === 0 && required
        ? 'no prefill worker in rotation (--require-disaggregation)'
        : undefined;
  answerJson(res, isReady ? 200 : 503, {
    ready: isReady,
    ...(reason === undefined ? {} : { reason }),
    prefill_workers: prefill,
    decode_workers: decode,
    ...(prefill === 0 && decode > 0 && !required ? { mode: 'aggregated (no prefill worker in rotation)' } : {}),
  });
}

/**
 * The Prometheus text of the proxy's metrics.
 *
 * @internal
 */
export async function answerMetrics(proxy: ProxyState, res: ServerResponse): Promise<void> {
  const { registry } = proxy.metrics;
  const text = await registry.metrics();
  res.writeHead(200, { 'content-type': registry.contentType });
  res.end(text);
}

/** The model list (or one model, `GET /v1/models/{id}`) of a decode worker in rotation, passed through as it answered. */
async function models(proxy: ProxyState, res: ServerResponse, id?: string): Promise<void> {
  const worker = proxy.decodeWorkers.available[0];
  if (worker === undefined) {
    const answer = errorAnswer(new NoWorkerError(proxy.decodeWorkers.workers.length));
    return answerJson(res, answer.status, answer.body);
  }
  try {
    const answer = await request(joinUrl(worker.url, '/v1/models'), {
      headers: proxy.workerHeaders,
      dispatcher: proxy.dispatcher,
    });
    const text = await answer.body.text();
    if (id === undefined || answer.statusCode !== 200) {
      res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
      res.end(text);
      return;
    }
    // One model (the SDKs' models.retrieve), from the list: not every engine has the route.
    const found = ((parseJson(text) as { data?: unknown })?.data as Array<{ id?: unknown }> | undefined)?.find(
      (model) => model?.id === id,
    );
    if (found !== undefined) return answerJson(res, 200, found);
    answerJson(res, 404, {
      error: {
        message: `The model '${id}' does not exist`,
        type: 'invalid_request_error',
        code: 'model_not_found',
        param: 'model',
      },
    });
  } catch (error) {
    const answer = errorAnswer(UpstreamError.fromFailure(worker.url, error), 'decode', (text) => proxy.redact(text));
    answerJson(res, answer.status, answer.body);
  }
}
