import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Endpoint } from '../endpoints/endpoint.js';
import { ENDPOINTS } from '../endpoints/registry.js';
import { parseJson } from '../http/json.js';
import { answerJson, decodePathPart, pathOf, RequestError } from '../http/node-server.js';
import { request } from '../http/undici-parts.js';
import { UpstreamError } from '../http/upstream-error.js';
import { NoWorkerError } from '../routing/worker-pool.js';
import { clientKey } from '../tenancy/tenants.js';
import { joinUrl } from '../util/url.js';
import { ADMIN_ROUTES } from './admin-routes.js';
import { serveConversations } from './agents/conversation-routes.js';
import { serveStoredResponse } from './agents/stored-response-routes.js';
import { answerUnauthorized, bearerMatches } from './bearer-auth.js';
import { serveGeneration } from './completion.js';
import { HttpExchange, serveEndpoint } from './http-exchange.js';
import { servePassthrough } from './passthrough.js';
import { modelNotFound } from './pipeline/body-stages.js';
import { type ErrorAnswer, errorAnswer } from './pipeline/error-answers.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import { readiness } from './readiness.js';
import type { RouteEntry } from './route-entry.js';

const READ = ['GET', 'HEAD'] as const;

/** How each kind of endpoint is served once its stages let a request on. */
const SERVE = { disaggregated: serveGeneration, passthrough: servePassthrough } as const;

/** The route of an API endpoint: `POST` at its path (or one of its aliases), its stages, then its serving. */
const endpointRoute = (endpoint: Endpoint, path = endpoint.path): RouteEntry => ({
  path,
  methods: ['POST'],
  label: endpoint.name,
  auth: 'api',
  handle: (proxy, req, res, call) =>
    serveEndpoint(proxy, endpoint, new HttpExchange(req, res, call.body), SERVE[endpoint.serving]),
});

/**
 * The proxy's routes: one `POST` per endpoint of `ENDPOINTS` (src/endpoints/): the generations
 * `/v1/completions`, `/v1/chat/completions` and SGLang's `/generate`, disaggregated, and the
 * passthroughs `/v1/embeddings`, `/v1/rerank` and `/v1/score`, each calling the same path on
 * the workers; `GET /v1/models` and `/v1/models/{id}` (from
 * a decode worker), `/health` (liveness), `/ready` (a prefill and a decode worker in rotation,
 * and not shutting down), `/metrics` (Prometheus; on its own port with `metricsPort`) and,
 * with an admin key, `/admin/workers` (see {@link handleAdmin}).
 *
 * @internal
 */
export const ROUTES: readonly RouteEntry[] = [
  ...(ENDPOINTS as readonly Endpoint[]).flatMap((endpoint) => [
    endpointRoute(endpoint),
    ...(endpoint.aliases ?? []).map((alias) => endpointRoute(endpoint, alias)),
  ]),
  { path: '/v1/models', methods: READ, label: 'models', auth: 'api', handle: (proxy, _req, res) => models(proxy, res) },
  // One model: its id is the rest of the path, never a label.
  {
    path: '/v1/models/*',
    methods: ['GET'],
    label: 'models',
    auth: 'api',
    handle: (proxy, _req, res, call) => models(proxy, res, call.rest),
  },
  // Stored responses and conversations, kept by the router itself (`responses.store`).
  {
    path: '/v1/responses/*',
    methods: ['GET', 'DELETE', 'POST'],
    label: 'responses',
    auth: 'api',
    handle: (proxy, req, res, call) => serveStoredResponse(proxy, req, res, call),
  },
  {
    path: '/v1/conversations',
    methods: ['POST'],
    label: 'conversations',
    auth: 'api',
    handle: (proxy, req, res, call) => serveConversations(proxy, req, res, call),
  },
  {
    path: '/v1/conversations/*',
    methods: ['GET', 'POST', 'DELETE'],
    label: 'conversations',
    auth: 'api',
    handle: (proxy, req, res, call) => serveConversations(proxy, req, res, call),
  },
  {
    path: '/health',
    methods: READ,
    label: 'health',
    auth: 'none',
    handle: (_proxy, _req, res) => answerJson(res, 200, { status: 'ok' }),
  },
  { path: '/ready', methods: READ, label: 'ready', auth: 'none', handle: (proxy, _req, res) => ready(proxy, res) },
  {
    path: '/metrics',
    methods: READ,
    label: 'metrics',
    auth: 'none',
    // With a metrics port of its own, /metrics is not on the API port.
    present: (options) => options.metricsPort === undefined,
    handle: (proxy, _req, res) => answerMetrics(proxy, res),
  },
  {
    path: '/admin/tenants',
    methods: READ,
    label: 'admin',
    auth: 'admin',
    present: (options) => options.adminKey !== undefined,
    handle: (proxy, _req, res) => answerJson(res, 200, { tenants: tenantsNow(proxy) }),
  },
  ...ADMIN_ROUTES,
];

/**
 * Every tenant with its limits and what it uses now: requests under way and waiting on this
 * replica, and, when limits are counted here (not in Redis), requests and tokens in the last
 * minute. Never its keys.
 */
function tenantsNow(proxy: ProxyState) {
  const local = proxy.limits === proxy.minuteWindows;
  return proxy.tenants.tenants.map((tenant) => ({
    ...tenant,
    ...proxy.admission.usageOf(tenant.name),
    ...(local ? { lastMinute: proxy.minuteWindows.used(tenant.name) } : {}),
  }));
}

/** The route at `path`, with what its `*` stands for; undefined for none. The first entry that matches wins. */
function routeAt(path: string): { route: RouteEntry; rest: string | undefined } | undefined {
  for (const route of ROUTES) {
    const star = route.path.indexOf('*');
    if (star === -1) {
      if (route.path === path) return { route, rest: undefined };
      continue;
    }
    const prefix = route.path.slice(0, star);
    const suffix = route.path.slice(star + 1);
    if (path.length <= prefix.length + suffix.length || !path.startsWith(prefix) || !path.endsWith(suffix)) continue;
    const rest = path.slice(prefix.length, path.length - suffix.length);
    // A part of the path, never an empty one (`/admin/workers//drain` names no worker).
    if (!rest.startsWith('/')) return { route, rest };
  }
  return undefined;
}

/**
 * Whether the proxy has a route at `path` with these options (whatever the method: a wrong
 * one is its 405), for a host that passes other paths on to its own routes.
 *
 * @internal
 */
export function servesPath(options: ProxyState['options'], path: string): boolean {
  const found = routeAt(path);
  return found !== undefined && (found.route.present?.(options) ?? true);
}

/**
 * Answers a request by {@link ROUTES}: a path it does not have is a 404 in the OpenAI error
 * shape; a method its route does not take a 405 with `Allow`; a route that needs a key and
 * did not get it a 401; then its handler. `given.body` is the request's body when the caller
 * has read it already; `given.path` the route's path when the proxy is mounted under a prefix.
 *
 * @internal
 */
export async function handleRequest(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  given: { body?: string | undefined; path?: string | undefined } = {},
): Promise<void> {
  const path = given.path ?? pathOf(req);
  const method = req.method ?? 'GET';
  const found = routeAt(path);
  if (found === undefined || !(found.route.present?.(proxy.options) ?? true)) {
    const answer = errorAnswer(new RequestError(404, `No route ${method} ${path}`));
    return answerJson(res, answer.status, answer.body);
  }
  const { route } = found;
  if (route.methods !== undefined && !route.methods.includes(method)) {
    res.setHeader('allow', route.methods.join(', '));
    const answer = errorAnswer(
      new RequestError(405, `${method} is not allowed on ${path}: use ${route.methods.join(' or ')}`),
    );
    return answerJson(res, answer.status, answer.body);
  }
  let rest: string | undefined;
  try {
    rest = found.rest === undefined ? undefined : decodePathPart(found.rest);
  } catch (error) {
    const answer = errorAnswer(error);
    return answerJson(res, answer.status, answer.body);
  }
  if (route.auth !== 'none') {
    const key = route.auth === 'api' ? proxy.options.apiKey : proxy.options.adminKey;
    // A tenant's key opens the API as the API key does (and says whose the request is).
    const tenantKey = route.auth === 'api' && proxy.tenants.isTenantKey(clientKey(req.headers));
    if (!tenantKey && !bearerMatches(req, key)) {
      return answerUnauthorized(
        res,
        route.auth === 'api' ? 'API key' : 'admin key',
        { req, path, logger: proxy.logger },
        (ENDPOINTS as readonly Endpoint[]).find((endpoint) => endpoint.path === route.path),
      );
    }
  }
  return route.handle(proxy, req, res, { path, body: given.body, rest });
}

/**
 * The route of a request for the metrics: the label of the proxy's route at its path when the
 * route takes its method, or `unknown` (bounded labels).
 *
 * @internal
 */
export function routeLabel(req: IncomingMessage, path = pathOf(req)): string {
  const route = routeAt(path)?.route;
  if (route === undefined) return 'unknown';
  return route.methods === undefined || route.methods.includes(req.method ?? 'GET') ? route.label : 'unknown';
}

/**
 * `/ready`: 200 when requests can be served now ({@link readiness}), else 503; the body says
 * why not; the worker counts are summed over the pools, and with several pools each pool's
 * readiness is listed too (one pool: the body of before).
 */
function ready(proxy: ProxyState, res: ServerResponse): void {
  const required = proxy.options.requireDisaggregation;
  const { ready: isReady, reason, pools } = readiness(proxy);
  const prefill = pools.reduce((sum, pool) => sum + pool.prefill, 0);
  const decode = pools.reduce((sum, pool) => sum + pool.decode, 0);
  answerJson(res, isReady ? 200 : 503, {
    ready: isReady,
    ...(reason === undefined ? {} : { reason }),
    prefill_workers: prefill,
    decode_workers: decode,
    ...(prefill === 0 && decode > 0 && !required ? { mode: 'aggregated (no prefill worker in rotation)' } : {}),
    ...(pools.length === 1
      ? {}
      : {
          pools: pools.map((pool) => ({
            model: pool.model,
            ready: pool.ready,
            ...(pool.reason === undefined ? {} : { reason: pool.reason }),
            prefill_workers: pool.prefill,
            decode_workers: pool.decode,
          })),
        }),
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

/**
 * The model list of the decode workers in rotation (`GET /v1/models`), or one model of it
 * (`GET /v1/models/{id}`, asked of the pool that serves it). With one pool, its first decode
 * worker's answer as it came; with several, each pool's first decode worker in rotation asked,
 * their lists merged (each model once, the first pool's entry; an adapter keeps its `parent`),
 * a pool that cannot answer left out unless none can.
 */
async function models(proxy: ProxyState, res: ServerResponse, id?: string): Promise<void> {
  const pools = id === undefined ? proxy.pools.all() : [proxy.pools.poolFor(id)].filter((pool) => pool !== undefined);
  if (pools.length === 0) {
    const answer = modelNotFound(id, proxy.pools.named());
    return answerJson(res, answer.status, answer.body);
  }
  const workers = pools.flatMap((pool) => pool.decode.available.slice(0, 1));
  if (workers.length === 0) {
    const known = pools.reduce((sum, pool) => sum + pool.decode.workers.length, 0);
    const answer = errorAnswer(new NoWorkerError(known, 'decode', id ?? onlyModel(pools)));
    // Counted as the decode leg's error, as a generation request without a worker is.
    proxy.metrics.verdict(res, 'error', 'decode');
    return answerJson(res, answer.status, answer.body);
  }
  const asked = await Promise.all(workers.map((worker) => modelsOf(proxy, worker)));
  const [first] = asked;
  if (workers.length === 1 && first !== undefined && 'text' in first && (id === undefined || first.status !== 200)) {
    res.writeHead(first.status, { 'content-type': 'application/json' });
    res.end(first.text);
    return;
  }
  const lists = asked.flatMap((each) => ('data' in each ? [each.data] : []));
  if (lists.length === 0) {
    const failed = asked.find((each) => 'error' in each) as { error: ErrorAnswer } | undefined;
    const answer = failed?.error ?? errorAnswer(new NoWorkerError(workers.length));
    return answerJson(res, answer.status, answer.body);
  }
  const merged = new Map<unknown, { id?: unknown }>();
  for (const list of lists) for (const model of list) if (!merged.has(model.id)) merged.set(model.id, model);
  if (id === undefined) return answerJson(res, 200, { object: 'list', data: [...merged.values()] });
  // One model (the SDKs' models.retrieve), from the list: not every engine has the route.
  const found = merged.get(id);
  if (found !== undefined) return answerJson(res, 200, found);
  const notFound = modelNotFound(id, proxy.pools.named());
  answerJson(res, notFound.status, notFound.body);
}

/** The model of the one pool asked, when it names one. */
function onlyModel(pools: readonly { model: string | undefined }[]): string | undefined {
  return pools.length === 1 ? pools[0]?.model : undefined;
}

/** What one worker says of its models: its list, its answer as it came when that is no list, or the failure to reach it. */
async function modelsOf(
  proxy: ProxyState,
  worker: { url: string },
): Promise<{ data: Array<{ id?: unknown }> } | { status: number; text: string } | { error: ErrorAnswer }> {
  try {
    const answer = await request(joinUrl(worker.url, '/v1/models'), {
      headers: proxy.workerHeaders,
      dispatcher: proxy.dispatcher,
    });
    const text = await answer.body.text();
    const data = answer.statusCode === 200 ? (parseJson(text) as { data?: unknown } | undefined)?.data : undefined;
    // With one pool its answer goes on as it came; the list is read for a model or a merge.
    return Array.isArray(data)
      ? Object.assign({ data: data as Array<{ id?: unknown }> }, { status: 200, text })
      : { status: answer.statusCode, text };
  } catch (error) {
    return { error: errorAnswer(UpstreamError.fromFailure(worker.url, error), 'decode', (text) => proxy.redact(text)) };
  }
}
