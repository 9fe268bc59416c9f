import type { IncomingMessage, ServerResponse } from 'node:http';
import { pathOf } from '../http/node-server.js';
import { webExchange } from '../http/web-exchange.js';
import type { WorkerPool } from '../routing/worker-pool.js';
import { errorAnswer } from './pipeline/error-answers.js';
import { bodyReadAlready } from './pipeline/request-body.js';
import { ProxyCore } from './proxy-core.js';
import { servesPath } from './routes.js';
import type { HandlerOptions } from './settings/proxy-options.js';
import { resolveHandlerOptions } from './settings/resolve.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';

/**
 * The proxy as a standard request handler, for any framework or runtime that speaks the
 * WHATWG `Request`/`Response` types (Hono, Next.js route handlers, Bun, Deno, a `node:http`
 * server with two lines of glue).
 */
export interface DisaggHandler {
  /**
   * Answers one request on the proxy's routes (under `basePath`): the same routes, checks,
   * flow, errors and headers as `disagg serve`. A streamed answer is a `ReadableStream` read
   * from decode no faster than the body is pulled; cancelling the body (or aborting the
   * request's `signal`) is a client that left. The first call starts the proxy (see `start`).
   */
  (request: Request): Promise<Response>;
  /**
   * The same routes on a Node request and response (`node:http`, Express, Koa's `ctx.req` and
   * `ctx.res`): the path `disagg serve` itself answers by, cheaper than the WHATWG one. Its
   * path is `req.url` (under `basePath`; Express sets it under the mount path:
   * `app.use('/llm', disagg.node)` needs no `basePath`). A path that is none of the proxy's
   * routes goes to `next` when one is given (Express middleware), else it is a 404. A body that
   * a body parser has read already (`express.json()`, `express.text()`, `express.raw()`) is
   * taken from `req.body` (a parsed JSON body has lost the exactness of integers above 2^53,
   * which the proxy's own parser keeps: mount it before the parser where that matters).
   * The first call starts the proxy (see `start`).
   */
  node(req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  /** Starts discovery, probes every worker once and starts the health rounds; once. */
  start(): Promise<void>;
  /**
   * Shuts down: `/ready` fails at once; with `drainDelayMs` (0 by default: the host decides
   * when it stops sending requests) requests are still served that long; then new requests
   * get a 503, requests under way finish within `gracePeriodMs` (the option's, 30,000 by
   * default), the rest are ended cleanly and every call still open to a worker is closed.
   */
  close(options?: { gracePeriodMs?: number; drainDelayMs?: number }): Promise<void>;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  /** The proxy's Prometheus registry (what `/metrics` serves), to merge into an application's. */
  readonly metricsRegistry: import('prom-client').Registry;
}

/**
 * The proxy's routes as `(request: Request) => Promise<Response>` and, for Node hosts,
 * `handler.node(req, res, next?)`, sharing the options module, flow, pools, health, metrics
 * and error contract of `disagg serve`. Its parts are the proxy's, each replaceable: routing
 * policies of your own (`prefillPolicy`, `decodePolicy`) and engines (`engine`) keep the rest
 * (health, retries, admission, limits, metrics) as it is.
 *
 * @example
 * // Hono on Node
 * const disagg = createHandler({ connector: 'vllm', prefill: [{ url: 'http://p0:8100' }], decode: [{ url: 'http://d0:8200' }] });
 * app.all('/v1/*', (c) => disagg(c.req.raw));
 * // Express, body parsers and all
 * expressApp.use(disagg.node);
 *
 * @throws {ConfigError} for options that are missing, wrong or unknown, naming the option.
 */
export function createHandler(options: HandlerOptions): DisaggHandler {
  const { proxy, basePath } = resolveHandlerOptions(options);
  const core = new ProxyCore(proxy);
  const handler = async (request: Request): Promise<Response> => {
    const pathname = new URL(request.url).pathname;
    // Under basePath: the base itself or below it (`/llmx` is not under `/llm`); every path is under ''.
    const under = pathname === basePath || pathname.startsWith(`${basePath}/`);
    const path = under ? pathname.slice(basePath.length) || '/' : pathname;
    try {
      await core.start();
    } catch (error) {
      // Discovery could not start (its optional dependency missing, say): said on every request.
      const answer = errorAnswer(error, undefined, (text) => core.redact(text));
      return Response.json(answer.body, { status: answer.status });
    }
    const exchange = webExchange(request, path);
    // The request's signal, where the runtime aborts it when the client goes (one listener,
    // removed when the answer closes).
    const signal = request.signal;
    const onAbort = () => exchange.clientLeft();
    if (signal.aborted) exchange.clientLeft();
    else {
      signal.addEventListener('abort', onAbort, { once: true });
      exchange.res.once('close', () => signal.removeEventListener('abort', onAbort));
    }
    core.answer(exchange.req, exchange.res);
    return exchange.response;
  };
  const node = (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void => {
    const full = pathOf(req);
    const under = full === basePath || full.startsWith(`${basePath}/`);
    const path = under ? full.slice(basePath.length) || '/' : full;
    if (next !== undefined && (!under || !servesPath(core.options, path))) {
      next();
      return;
    }
    const body = bodyReadAlready(req);
    core.start().then(
      () => core.answer(req, res, { path, ...(body === undefined ? {} : { body }) }),
      (error: unknown) => {
        const answer = errorAnswer(error, undefined, (text) => core.redact(text));
        res.writeHead(answer.status, { 'content-type': 'application/json' }).end(JSON.stringify(answer.body));
      },
    );
  };
  return Object.assign(handler, {
    node,
    start: () => core.start(),
    // The host owns the listener: nothing to stop accepting or cut here, and no drain delay
    // unless asked (the host's own readiness decides when it stops sending requests).
    close: (closing: { gracePeriodMs?: number; drainDelayMs?: number } = {}) =>
      core.shutdown(
        { accepting: () => true },
        {
          drainDelayMs: closing.drainDelayMs ?? 0,
          gracePeriodMs: closing.gracePeriodMs ?? core.options.gracePeriodMs,
        },
      ),
    prefillWorkers: core.prefillWorkers,
    decodeWorkers: core.decodeWorkers,
    metricsRegistry: core.metrics.registry,
  });
}
