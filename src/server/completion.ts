import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { disaggregate, type Engine } from '../flow/disaggregate.js';
import type { MigrationOptions } from '../flow/migration.js';
import { answerJson, headerValue, RequestError } from '../http/node-server.js';
import type { CompletionUsage, EngineItem } from '../protocol/llm-engine-output.js';
import { RoutingInput } from '../routing/routing-input.js';
import { Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import type { OverLimit } from '../tenancy/rate-window.js';
import { LimitsUnavailableError } from '../tenancy/redis-windows.js';
import { OverloadedError, type Ticket } from './admission.js';
import { hookedEngine } from './custom-parts.js';
import { type ErrorAnswer, errorAnswer, errorToResponse, ShutdownError } from './error-answers.js';
import { retryDelay } from './failure-rules.js';
import type { InFlightRequest } from './in-flight.js';
import { ResponseWriter, type Route } from './openai-format.js';
import type { ProxyState } from './proxy-state.js';
import { readRequestBody } from './request-body.js';
import { countFailure, type RequestEvents, type Routed, requestEvents } from './request-events.js';
import { logRequest, STRATEGY_HEADER } from './request-log.js';
import { validateRequest } from './request-schemas.js';
import { relaySse } from './sse-relay.js';
import { incomingTrace, RequestTrace } from './tracing.js';
import { answerWhole } from './whole-response.js';

/**
 * One `POST /v1/completions` or `/v1/chat/completions`: reads the body, runs it through
 * {@link disaggregate}, and answers streamed or whole. Says how it was served in headers
 * (`x-request-id`, `x-disagg-strategy`, the workers), feeds the metrics and health, is
 * tracked for shutdown, and is logged once when it is over.
 *
 * @internal
 */
export async function handleCompletion(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  route: Route,
  bodyText?: string,
): Promise<void> {
  // The workers get an id of their own for every request (two clients reusing an id must not
  // meet inside an engine); the client gets its own id back.
  const requestId = randomUUID();
  const clientRequestId = headerValue(req.headers['x-request-id']);
  res.setHeader('x-request-id', clientRequestId ?? requestId);
  if (proxy.closing) return answer(res, errorAnswer(new ShutdownError('The proxy is shutting down')));
  let body: Record<string, unknown>;
  try {
    body = await readRequestBody(req, proxy.options.maxBodyBytes, bodyText);
    validateRequest(route, body, proxy.models);
  } catch (error) {
    // Over the size limit the rest of the body is not read: the connection closes after the 413.
    if (RequestError.is(error) && error.status === 413) res.setHeader('connection', 'close');
    const refusal = errorAnswer(error);
    proxy.logger.info(
      {
        requestId,
        ...(clientRequestId === undefined ? {} : { clientRequestId }),
        route,
        status: refusal.status,
        err: error,
      },
      'request rejected',
    );
    return answer(res, refusal);
  }

  // The tenant's per-minute limits, then a slot of the proxy's admission (by the tenant's
  // priority, fair between tenants), or a wait for one; a client that leaves meanwhile leaves
  // the queue. Over a limit: a 429 with Retry-After naming it, before any worker is called.
  const tenant = proxy.tenants.tenantOf(req.headers);
  const label = proxy.tenantLabel(tenant.name);
  // Tokens per minute: the prompt's by the router's tokenizer where there is one (tokenized
  // off the event loop, only for a tenant so limited), else a quarter of its text.
  const counted = tenant.tokensPerMinute === undefined ? undefined : await proxy.countPromptTokens(body, route);
  const estimate = counted ?? estimatedTokens(body);
  let ticket: Ticket;
  try {
    const over = await proxy.limits.take(tenant, estimate);
    if (over !== undefined) throw overLimit(tenant.name, over);
    ticket = await proxy.admission.enter(new Promise((resolve) => res.once('close', resolve)), {
      tenant: tenant.name,
      priority: tenant.priority,
      maxConcurrent: tenant.maxConcurrent,
    });
  } catch (error) {
    if (OverloadedError.is(error)) {
      res.setHeader('retry-after', String(error.retryAfterS));
      proxy.metrics.tenantRequest(label, error.limit);
    } else if (LimitsUnavailableError.is(error)) proxy.metrics.tenantRequest(label, 'limits_unavailable');
    const refusal = errorAnswer(error);
    proxy.logger.info(
      { requestId, route, tenant: tenant.name, status: refusal.status, err: error },
      'request rejected',
    );
    return answer(res, refusal);
  }
  proxy.metrics.tenantRequest(label, 'admitted');
  let usage: CompletionUsage | undefined;
  try {
    usage = await serveAdmitted(proxy, req, res, {
      route,
      body,
      requestId,
      clientRequestId,
      tenant: tenant.name,
      // A tokens-per-minute limit is held to what answers used: every answer must say it.
      usageNeeded: tenant.tokensPerMinute !== undefined,
    });
  } finally {
    ticket.release();
    // What the answer said it used, against what was counted for it before.
    const used = usage === undefined ? estimate : usage.prompt_tokens + usage.completion_tokens;
    // A correction Redis does not take is logged there; nothing waits for it.
    void Promise.resolve(proxy.limits.correct(tenant, used - estimate));
    proxy.metrics.tenantTokens(label, used);
  }
}

/** A request's tokens before it is served: its prompt's (a quarter of its text, or its token ids). */
function estimatedTokens(body: Record<string, unknown>): number {
  const input = new RoutingInput(body);
  return input.tokenIds?.length ?? Math.ceil(input.text.length / 4);
}

const LIMIT_WORDS = { requestsPerMinute: 'requests', tokensPerMinute: 'tokens' } as const;

/** The 429 of a tenant over a per-minute limit: which one, how much of it is used, when to try again. */
function overLimit(tenant: string, over: OverLimit): OverloadedError {
  return new OverloadedError(
    `Tenant ${tenant} is over its limit of ${over.allowed} ${LIMIT_WORDS[over.limit]} per minute (${Math.round(over.used)} in the last minute); try again in ${over.retryAfterS} s`,
    over.retryAfterS,
    over.limit === 'requestsPerMinute' ? 'requests_per_minute' : 'tokens_per_minute',
  );
}

/** A request that holds a slot: through the flow, tracked for shutdown, logged when over. */
async function serveAdmitted(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  request: {
    route: Route;
    body: Record<string, unknown>;
    requestId: string;
    clientRequestId: string | undefined;
    tenant: string;
    usageNeeded: boolean;
  },
): Promise<CompletionUsage | undefined> {
  const { route, body, requestId, clientRequestId, tenant, usageNeeded } = request;
  const context = new Controller(requestId);
  const started = performance.now();
  // Until the relay takes over, ending it at shutdown is a 503 (nothing was sent yet).
  const entry: InFlightRequest = {
    context,
    res,
    shutdown: () => {
      context.stopGenerating();
      answer(res, errorAnswer(new ShutdownError()));
    },
  };
  proxy.inFlight.add(entry);
  // A client that goes away stops the request (the flow still lets decode take the KV).
  res.on('close', () => {
    if (!res.writableFinished) context.stopGenerating();
  });
  const events = requestEvents(proxy);
  let failure: unknown;
  // Every failure answered is counted against its worker (health learns of it from the events).
  const answerFor = (error: unknown): ErrorAnswer => {
    const routed = events.routed;
    countFailure(proxy, error, { prefill: routed?.prefillWorker, decode: routed?.decodeWorker });
    failure = error;
    // The client gets the worker's words without its address; the log keeps them whole.
    return errorToResponse(error, { redact: (text) => proxy.redact(text) });
  };
  // Passed on to the workers unless a worker key replaces it (engineFor decides).
  const authorization = req.headers.authorization;
  const trace = traceOf(proxy, req, route, requestId, tenant);
  events.trace = trace;
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
  let writer: ResponseWriter | undefined;
  try {
    const sessionKey = headerValue(req.headers[proxy.options.routing.sessionHeader]);
    writer = await serve(proxy, {
      body,
      route,
      context,
      res,
      entry,
      events,
      answerFor,
      engines,
      sessionKey,
      usageNeeded,
    });
  } finally {
    proxy.inFlight.delete(entry);
    if (writer?.usage !== undefined) {
      proxy.metrics.tokens(route, typeof body.model === 'string' ? body.model : '', writer.usage);
      const predicted = events.routed?.predictedCachedTokens;
      const reported = writer.usage.prompt_tokens_details?.cached_tokens;
      const worker = events.routed?.prefillWorker;
      if (predicted !== undefined && typeof reported === 'number' && worker !== undefined) {
        proxy.metrics.kvPrediction(proxy.nameOf(worker), predicted, reported);
      }
    }
    logRequest(proxy, { requestId, clientRequestId, route, res, events, started, failure, tenant });
    trace?.end(
      res.statusCode,
      events.finished?.outcome ?? (failure === undefined ? 'success' : 'error'),
      writer?.usage,
      failure,
    );
  }
  return writer?.usage;
}

/** What serving one admitted request needs. */
type ServeRequest = {
  body: Record<string, unknown>;
  route: Route;
  context: Controller;
  res: ServerResponse;
  entry: InFlightRequest;
  events: RequestEvents;
  answerFor: (error: unknown) => ErrorAnswer;
  engines: { prefill: Engine<{ url: string }>; decode: Engine<{ url: string }> };
  /** The session header's value, for the session policy. */
  sessionKey: string | undefined;
  /** The request's usage is needed whether or not its client asked (a tenant's token limit). */
  usageNeeded: boolean;
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
    answer(res, answerFor(flow.error));
    return undefined;
  }
  const writer = new ResponseWriter(request.route, body);
  if (body.stream !== true) await answerWhole(flow.stream, res, writer, answerFor);
  else {
    await relaySse(flow.stream, res, writer, request.entry, {
      slowClientTimeoutMs: proxy.options.slowClientTimeoutMs,
      answerFor,
      interToken: (seconds) => proxy.metrics.interToken(seconds),
    });
  }
  return writer;
}

/**
 * The request's trace: with OpenTelemetry recording, or a client's `traceparent` to pass on;
 * otherwise none (the untraced path stays as cheap as it was).
 */
function traceOf(
  proxy: ProxyState,
  req: IncomingMessage,
  route: Route,
  requestId: string,
  tenant: string,
): RequestTrace | undefined {
  const incoming = incomingTrace(req.headers);
  if (proxy.tracing === undefined && incoming === undefined) return undefined;
  const trace = new RequestTrace(proxy.tracing, incoming, (worker) => proxy.nameOf(worker), {
    'http.route': route,
    'disagg.request_id': requestId,
    'disagg.tenant': tenant,
    'disagg.connector': proxy.options.connector,
  });
  return trace.recording || incoming !== undefined ? trace : undefined;
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
  const { body, context, events, engines, sessionKey } = request;
  const retry = (error: unknown): number | undefined => {
    // A sequential decode is retried also for a client that has left: the next decode worker
    // takes the KV and frees it.
    const delayMs = retryDelay(proxy.options.retry, error, events.retries);
    if (delayMs !== undefined) events.retries++;
    return delayMs;
  };
  try {
    const promptTokenIds = await proxy.promptTokens(body, request.route);
    const stream = await disaggregate({
      request: body,
      ...(promptTokenIds === undefined ? {} : { promptTokenIds }),
      context,
      prefill: engines.prefill,
      decode: engines.decode,
      connector: proxy.connector,
      prefillWorkers: proxy.prefillWorkers,
      decodeWorkers: proxy.decodeWorkers,
      ...(sessionKey === undefined ? {} : { sessionKey }),
      ...(proxy.skipPrefill === undefined ? {} : { skipPrefill: proxy.skipPrefill }),
      retryDecode: retry,
      // Not once the proxy is shutting down: the request is ended then, not started again.
      retryPrefill: (error) => (proxy.closing ? undefined : retry(error)),
      reuseHandoff: proxy.options.retry.reuseHandoff,
      noPrefillWorker: proxy.options.requireDisaggregation ? 'fail' : 'aggregate',
      // A tenant's token limit needs what the answer used, whether or not its client asked (it
      // gets no usage chunk then); asked only there, since the extra chunk costs every stream
      // about 3 % of the proxy's CPU per request.
      usage: request.usageNeeded ? 'always' : 'as-asked',
      onEvent: events.onEvent,
      logger: proxy.logger,
      deadlines: proxy.options.deadlines,
      cleanupBudgetMs: proxy.options.cleanupBudgetMs,
      ...(proxy.options.migration.limit === 0 ? {} : { migration: migrationOf(proxy, body) }),
    });
    return { ok: true, stream };
  } catch (error) {
    return { ok: false, error };
  }
}

/** The flow's migration settings for `body`: the proxy's, and its model's context length as the decode workers say it. */
function migrationOf(proxy: ProxyState, body: Record<string, unknown>): MigrationOptions {
  const { limit, via, maxSeqLen } = proxy.options.migration;
  const maxModelLen = proxy.models.maxModelLen(body.model);
  return {
    limit,
    via,
    ...(maxSeqLen === undefined ? {} : { maxSeqLen }),
    ...(maxModelLen === undefined ? {} : { maxModelLen }),
  };
}

/** The strategy and the workers, by name: a client never sees a worker's address. */
function setRouteHeaders(proxy: ProxyState, res: ServerResponse, routed: Routed | undefined): void {
  if (routed === undefined || res.headersSent) return;
  res.setHeader('x-disagg-strategy', STRATEGY_HEADER[routed.strategy]);
  if (routed.prefillWorker !== undefined) res.setHeader('x-disagg-prefill-worker', proxy.nameOf(routed.prefillWorker));
  if (routed.decodeWorker !== undefined) res.setHeader('x-disagg-decode-worker', proxy.nameOf(routed.decodeWorker));
}

function answer(res: ServerResponse, error: ErrorAnswer): void {
  answerJson(res, error.status, error.body);
}
