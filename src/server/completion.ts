import type { ServerResponse } from 'node:http';
import { disaggregate, type Engine } from '../flow/disaggregate.js';
import type { MigrationOptions } from '../flow/migration.js';
import type { EngineItem } from '../protocol/annotated.js';
import { NoWorkerError } from '../routing/worker-pool.js';
import type { Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { runInBackground } from './agents/background-runs.js';
import { clientAuthorization } from './bearer-auth.js';
import { hookedEngine } from './custom-parts.js';
import { retryDelay } from './fleet/failure-rules.js';
import type { ModelPool } from './fleet/pool-set.js';
import type { HttpRequest } from './http-exchange.js';
import { poolLabel } from './observability/scaling-metrics.js';
import { ResponseWriter, type Route } from './openai-format.js';
import { answerApiError } from './pipeline/api-errors.js';
import { type ErrorAnswer, errorToResponse } from './pipeline/error-answers.js';
import type { InFlightRequest } from './pipeline/in-flight.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import { countFailure, type RequestEvents, type Routed } from './pipeline/request-events.js';
import { STRATEGY_HEADER } from './pipeline/request-log.js';
import { sloRefusal } from './pipeline/shedding.js';
import { relaySse } from './sse-relay.js';
import { answerWhole } from './whole-response.js';

/**
 * One generation request (`POST /v1/completions`, `/v1/chat/completions`, `/generate`) once
 * its stages let it on (open, body, admission, tracking: `request-stages`): runs it through
 * {@link disaggregate} and answers streamed or whole. Says how it was served in headers
 * (`x-request-id`, `x-disagg-strategy`, the workers) and feeds the metrics and health.
 *
 * @internal
 */
export async function serveGeneration(request: HttpRequest): Promise<void> {
  const { background } = request;
  if (background !== undefined) return runInBackground(request, background, serveAnswer);
  return serveAnswer(request);
}

/** One generation request served to whoever its exchange answers: its client, or a background run. */
async function serveAnswer(request: HttpRequest): Promise<void> {
  const { proxy, body, endpoint } = request;
  const { req, res } = request.exchange;
  const events = request.events as RequestEvents;
  // Every failure answered is counted against its worker (health learns of it from the events).
  const answerFor = (error: unknown): ErrorAnswer => {
    const routed = events.routed;
    countFailure(proxy, error, { prefill: routed?.prefillWorker, decode: routed?.decodeWorker });
    // No worker in rotation to decide for: refused, as the scaling signals count it.
    if (routed === undefined && NoWorkerError.is(error)) proxy.metrics.refused(poolLabel(request.pool), 'no-worker');
    request.failure = error;
    // The client gets the worker's words without its address; the log keeps them whole.
    return errorToResponse(error, { redact: (text) => proxy.redact(text) });
  };
  const route = endpoint.name as Route;
  // Passed on to the workers unless a worker key replaces it (engineFor decides).
  const authorization = clientAuthorization(req.headers);
  const { trace } = request;
  // Traced: each leg's calls carry their own trace context; else one engine for both legs.
  const shared = trace === undefined ? proxy.engineFor(route, authorization) : undefined;
  const own =
    shared !== undefined
      ? { prefill: shared, decode: shared }
      : {
          prefill: proxy.engineFor(route, authorization, (worker) => trace?.headersFor('prefill', worker) ?? {}),
          decode: proxy.engineFor(route, authorization, (worker) => trace?.headersFor('decode', worker) ?? {}),
        };
  // An engine of the program's own, in place of the proxy's or around it.
  const hook = proxy.options.engine;
  const engines =
    hook === undefined
      ? own
      : {
          prefill: hookedEngine(hook, 'prefill', own.prefill, route),
          decode: hookedEngine(hook, 'decode', own.decode, route),
        };
  const writer = await serve(proxy, {
    request,
    body,
    context: request.context as Controller,
    res,
    entry: request.exchange.entry as InFlightRequest,
    events,
    answerFor,
    engines,
  });
  request.answer = { id: writer?.answerId, decodeWorker: events.routed?.decodeWorker };
  if (writer?.usage !== undefined) {
    request.usage = writer.usage;
    proxy.metrics.tokens(route, proxy.modelLabel(body.model), writer.usage);
    proxy.metrics.lengths(poolLabel(request.pool), writer.usage);
    const predicted = events.routed?.predictedCachedTokens;
    const reported = writer.usage.prompt_tokens_details?.cached_tokens;
    const worker = events.routed?.prefillWorker;
    if (predicted !== undefined && typeof reported === 'number' && worker !== undefined) {
      proxy.metrics.kvPrediction(proxy.nameOf(worker), predicted, reported);
    }
  }
}

/** What serving one admitted request needs. */
type ServeRequest = {
  request: HttpRequest;
  body: Record<string, unknown>;
  context: Controller;
  res: ServerResponse;
  entry: InFlightRequest;
  events: RequestEvents;
  answerFor: (error: unknown) => ErrorAnswer;
  engines: { prefill: Engine<{ url: string }>; decode: Engine<{ url: string }> };
};

/**
 * Runs the request through the flow (with retries) and answers it, streamed or whole;
 * resolves with the writer that answered (what the workers reported), if the flow started.
 */
async function serve(proxy: ProxyState, request: ServeRequest): Promise<ResponseWriter | undefined> {
  const { body, res, events, answerFor } = request;
  const flow = await startFlow(proxy, request);
  setRouteHeaders(proxy, res, events.routed);
  if (!flow.ok) {
    answerApiError(res, request.request.endpoint, answerFor(flow.error));
    return undefined;
  }
  const { keeper } = request.request;
  const writer = new ResponseWriter(request.request.endpoint, body, keeper?.restate);
  const settle = keeper?.keep;
  if (body.stream !== true) await answerWhole(flow.stream, res, writer, answerFor, settle);
  else {
    await relaySse(flow.stream, res, writer, request.entry, {
      slowClientTimeoutMs: proxy.options.slowClientTimeoutMs,
      answerFor,
      interToken: (seconds) => {
        proxy.metrics.interToken(seconds);
        events.latency?.gap(seconds);
      },
      settle,
    });
  }
  return writer;
}

/**
 * The client stream of the request, or the failure to answer with: the flow, with its retries
 * before the first byte on one budget per request (the flow's: a decode that could not be
 * reached given the same handoff, `retryDecode`; the request again from prefill, `retryPrefill`),
 * each logged, counted and charged to the worker that failed as its event comes. Nothing has
 * been sent to the client while this runs.
 */
async function startFlow(
  proxy: ProxyState,
  request: ServeRequest,
): Promise<{ ok: true; stream: ResponseStream<EngineItem> } | { ok: false; error: unknown }> {
  const { body, context, events, engines } = request;
  const { endpoint } = request.request;
  // The body stage chose it (and refused a model no pool serves).
  const pool = request.request.pool as ModelPool;
  const retry = (error: unknown): number | undefined => {
    // A sequential decode is retried also for a client that has left: the next decode worker
    // takes the KV and frees it.
    const delayMs = retryDelay(proxy.options.retry, error, events.retries);
    if (delayMs !== undefined) events.retries++;
    return delayMs;
  };
  // A sidecar retries on the prefill worker(s) its request named, as often as
  // --prefill-max-retries says (llm-d's sidecar's flag; none by default).
  const targets = proxy.prefillTargets;
  const retryFromPrefill =
    targets === undefined
      ? retry
      : (error: unknown): number | undefined => {
          const delayMs = retryDelay({ ...proxy.options.retry, maxRetries: targets.maxRetries }, error, events.retries);
          if (delayMs !== undefined) events.retries++;
          return delayMs;
        };
  try {
    // The prepare stage produced what the decision reads (tokens, bindings, the P/D verdict);
    // the flow's scheduler decides each attempt with them.
    const { verdict } = request.request;
    const stream = await disaggregate({
      request: body,
      endpoint,
      input: request.request.input,
      context,
      prefill: engines.prefill,
      decode: engines.decode,
      connector: pool.connector,
      // The pool's scheduler picks its workers (and says when prefill is missing: it was
      // built with the proxy's --require-disaggregation).
      scheduler: pool.scheduler,
      ...(verdict === undefined ? {} : { skipPrefill: () => verdict }),
      // A sheddable request no worker is predicted to serve within its service levels: a 429
      // before any worker is called, as the picker refuses it.
      refuseDecision: () => sloRefusal(request.request),
      retryDecode: retry,
      // Not once the proxy is shutting down: the request is ended then, not started again.
      retryPrefill: (error) => (proxy.closing ? undefined : retryFromPrefill(error)),
      reuseHandoff: proxy.options.retry.reuseHandoff,
      // A tenant's token limit needs what the answer used, whether or not its client asked (it
      // gets no usage chunk then); asked only there, since the extra chunk costs every stream
      // about 3 % of the proxy's CPU per request.
      usage: request.request.usageNeeded ? 'always' : 'as-asked',
      onEvent: events.onEvent,
      logger: proxy.logger,
      deadlines: { ...proxy.options.deadlines, ...pool.deadlines },
      cleanupBudgetMs: proxy.options.cleanupBudgetMs,
      ...(migrationOf(proxy, body, pool) ?? {}),
    });
    return { ok: true, stream };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * The flow's migration settings for `body`: its pool's over the proxy's, and its model's
 * context length as the decode workers say it; undefined when the limit is 0 (no migration).
 */
function migrationOf(
  proxy: ProxyState,
  body: Record<string, unknown>,
  pool: ModelPool,
): { migration: MigrationOptions } | undefined {
  const { limit, via, maxSeqLen } = { ...proxy.options.migration, ...pool.migration } as typeof proxy.options.migration;
  if (limit === 0) return undefined;
  const maxModelLen = proxy.models.maxModelLen(body.model);
  return {
    migration: {
      limit,
      via,
      ...(maxSeqLen === undefined ? {} : { maxSeqLen }),
      ...(maxModelLen === undefined ? {} : { maxModelLen }),
    },
  };
}

/** The strategy and the workers, by name: a client never sees a worker's address. */
function setRouteHeaders(proxy: ProxyState, res: ServerResponse, routed: Routed | undefined): void {
  if (routed === undefined || res.headersSent) return;
  res.setHeader('x-disagg-strategy', STRATEGY_HEADER[routed.strategy]);
  if (routed.prefillWorker !== undefined) res.setHeader('x-disagg-prefill-worker', proxy.nameOf(routed.prefillWorker));
  if (routed.decodeWorker !== undefined) res.setHeader('x-disagg-decode-worker', proxy.nameOf(routed.decodeWorker));
}
