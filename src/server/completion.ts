import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { disaggregate, type Engine } from '../flow/disaggregate.js';
import type { FlowEvent, FlowEventOf, Strategy } from '../flow/events.js';
import { nestsDeeperThan, parseJson } from '../http/json.js';
import { answerJson, headerValue, RequestError, readBody } from '../http/node-server.js';
import type { EngineItem } from '../protocol/llm-engine-output.js';
import { Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { OverloadedError, type Ticket } from './admission.js';
import { type ErrorAnswer, errorAnswer, errorToResponse, ShutdownError } from './error-answers.js';
import { classifyFailure, FAILURE_RULES } from './failure-rules.js';
import type { InFlightRequest } from './in-flight.js';
import { ResponseWriter, type Route } from './openai-format.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './options.js';
import type { ProxyState } from './proxy-state.js';
import { validateRequest } from './request-schemas.js';
import { relaySse } from './sse-relay.js';
import { incomingTrace, RequestTrace } from './tracing.js';
import { answerWhole } from './whole-response.js';

type Routed = FlowEventOf<'routed', ProxyPrefillWorker, ProxyDecodeWorker>;

const STRATEGY_HEADER: Record<Strategy, string> = {
  sequential: 'disaggregated-sequential',
  concurrent: 'disaggregated-concurrent',
  early: 'disaggregated-early',
  aggregated: 'skipped-prefill',
};

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

  // A slot of the proxy's admission, or a wait for one; a client that leaves meanwhile
  // leaves the queue. Over capacity: a 429 with Retry-After, before any worker is called.
  let ticket: Ticket;
  try {
    ticket = await proxy.admission.enter(new Promise((resolve) => res.once('close', resolve)));
  } catch (error) {
    if (OverloadedError.is(error)) res.setHeader('retry-after', String(error.retryAfterS));
    proxy.logger.info({ requestId, route, status: 429, err: error }, 'request rejected');
    return answer(res, errorAnswer(error));
  }
  try {
    await serveAdmitted(proxy, req, res, { route, body, requestId, clientRequestId });
  } finally {
    ticket.release();
  }
}

/** A request that holds a slot: through the flow, tracked for shutdown, logged when over. */
async function serveAdmitted(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  request: { route: Route; body: Record<string, unknown>; requestId: string; clientRequestId: string | undefined },
): Promise<void> {
  const { route, body, requestId, clientRequestId } = request;
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
  // Every failure answered: a worker a request could not reach leaves the rotation too.
  const answerFor = (error: unknown): ErrorAnswer => {
    const routed = events.routed;
    proxy.health.noteFailure(error, { prefill: routed?.prefillWorker, decode: routed?.decodeWorker });
    failure = error;
    // The client gets the worker's words without its address; the log keeps them whole.
    return errorToResponse(error, { redact: (text) => proxy.redact(text) });
  };
  // Passed on to the workers unless a worker key replaces it (engineFor decides).
  const authorization = req.headers.authorization;
  const trace = traceOf(proxy, req, route, requestId);
  events.trace = trace;
  // Traced: each leg's calls carry their own trace context; else one engine for both legs.
  const shared = trace === undefined ? proxy.engineFor(route, authorization) : undefined;
  const engines =
    shared !== undefined
      ? { prefill: shared, decode: shared }
      : {
          prefill: proxy.engineFor(route, authorization, (worker) => trace?.headersFor('prefill', worker) ?? {}),
          decode: proxy.engineFor(route, authorization, (worker) => trace?.headersFor('decode', worker) ?? {}),
        };
  let writer: ResponseWriter | undefined;
  try {
    const sessionKey = headerValue(req.headers[proxy.options.routing.sessionHeader]);
    writer = await serve(proxy, { body, route, context, res, entry, events, answerFor, engines, sessionKey });
  } finally {
    proxy.inFlight.delete(entry);
    if (writer?.usage !== undefined) {
      proxy.metrics.tokens(route, typeof body.model === 'string' ? body.model : '', writer.usage);
    }
    logRequest(proxy, { requestId, clientRequestId, route, res, events, started, failure });
    trace?.end(
      res.statusCode,
      events.finished?.outcome ?? (failure === undefined ? 'success' : 'error'),
      writer?.usage,
      failure,
    );
  }
}

/** What serving one admitted request needs. */
type ServeRequest = {
  body: Record<string, unknown>;
  route: Route;
  context: Controller;
  res: ServerResponse;
  entry: InFlightRequest;
  events: ReturnType<typeof requestEvents>;
  answerFor: (error: unknown) => ErrorAnswer;
  engines: { prefill: Engine<{ url: string }>; decode: Engine<{ url: string }> };
  /** The session header's value, for the session policy. */
  sessionKey: string | undefined;
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
function traceOf(proxy: ProxyState, req: IncomingMessage, route: Route, requestId: string): RequestTrace | undefined {
  const incoming = incomingTrace(req.headers);
  if (proxy.tracing === undefined && incoming === undefined) return undefined;
  const trace = new RequestTrace(proxy.tracing, incoming, (worker) => proxy.nameOf(worker), {
    'http.route': route,
    'disagg.request_id': requestId,
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
    const delayMs = backoff(proxy, error, events.retries);
    if (delayMs !== undefined) events.retries++;
    return delayMs;
  };
  try {
    const stream = await disaggregate({
      request: body,
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
      onEvent: events.onEvent,
      logger: proxy.logger,
      deadlines: proxy.options.deadlines,
      cleanupBudgetMs: proxy.options.cleanupBudgetMs,
    });
    return { ok: true, stream };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * The wait before attempt `attempt + 1` after `error`, or undefined: retries off or used up,
 * or a failure {@link FAILURE_RULES} does not retry (a deadline, a 4xx, a stream that broke
 * after the worker answered). Full
 * jitter: a random wait up to the doubled backoff, capped. A sequential decode is retried
 * also for a client that has left: the next decode worker takes the KV and frees it.
 */
function backoff(proxy: ProxyState, error: unknown, attempt: number): number | undefined {
  const { retry } = proxy.options;
  if (retry.disabled || attempt >= retry.maxRetries) return undefined;
  if (!FAILURE_RULES[classifyFailure(error).kind].retry) return undefined;
  const ceiling = Math.min(retry.maxBackoffMs, retry.initialBackoffMs * 2 ** attempt);
  return Math.random() * ceiling;
}

/** The one log line of a request, when it is over. */
function logRequest(
  proxy: ProxyState,
  request: {
    requestId: string;
    clientRequestId: string | undefined;
    route: Route;
    res: ServerResponse;
    events: ReturnType<typeof requestEvents>;
    started: number;
    failure: unknown;
  },
): void {
  const { routed, finished } = request.events;
  if (finished !== undefined) {
    proxy.metrics.verdict(request.res, finished.outcome, finished.leg);
    const name = (worker: { url: string } | undefined) => (worker === undefined ? undefined : proxy.nameOf(worker));
    proxy.metrics.legsFinished(
      { prefill: name(routed?.prefillWorker), decode: name(routed?.decodeWorker) },
      finished.outcome,
      finished.leg,
    );
  }
  if (finished?.outcome === 'success') {
    proxy.health.noteSuccess({ prefill: routed?.prefillWorker, decode: routed?.decodeWorker });
  }
  proxy.logger.info(
    {
      requestId: request.requestId,
      ...(request.clientRequestId === undefined ? {} : { clientRequestId: request.clientRequestId }),
      route: request.route,
      strategy: routed === undefined ? undefined : STRATEGY_HEADER[routed.strategy],
      ...(routed?.reason === undefined ? {} : { aggregatedBecause: routed.reason }),
      prefillWorker: workerOf(proxy, routed?.prefillWorker),
      decodeWorker: workerOf(proxy, routed?.decodeWorker),
      outcome: finished?.outcome,
      leg: finished?.leg,
      status: request.res.statusCode,
      durationMs: Math.round(performance.now() - request.started),
      ...(request.failure === undefined ? {} : { err: request.failure }),
    },
    'request finished',
  );
}

/**
 * How deep a request body may nest. No OpenAI or engine field comes near it (a JSON schema for
 * structured output nests a few dozen levels at most); far deeper bodies would overflow the
 * stack of every recursive reader on the way to a worker.
 */
const MAX_BODY_DEPTH = 128;

/** The request body as a JSON object, or a 400 / 413 {@link RequestError}. */
async function readRequestBody(
  req: IncomingMessage,
  limit: number,
  given: string | undefined,
): Promise<Record<string, unknown>> {
  if (given !== undefined && Buffer.byteLength(given) > limit) {
    throw new RequestError(413, `The request body is larger than ${limit} bytes`);
  }
  const text = given ?? (await readBody(req, limit));
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (error) {
    throw new RequestError(400, `The request body is not JSON: ${String(error)}`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new RequestError(400, 'The request body must be a JSON object');
  }
  if (nestsDeeperThan(parsed, MAX_BODY_DEPTH)) {
    throw new RequestError(400, `The request body nests objects and arrays more than ${MAX_BODY_DEPTH} deep`);
  }
  return parsed as Record<string, unknown>;
}

/**
 * The request's events: fed to the metrics and to the embedding application's tap (whose
 * errors are logged and ignored), and the two the handler reads (`routed`, `finished`) kept.
 */
function requestEvents(proxy: ProxyState) {
  const observe = proxy.metrics.listener();
  const tap = proxy.options.onEvent;
  const seen: {
    routed: Routed | undefined;
    finished: FlowEventOf<'finished'> | undefined;
    trace: RequestTrace | undefined;
    /** Retries of this request so far, of both kinds (one budget). */
    retries: number;
    onEvent: (event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>) => void;
  } = {
    routed: undefined,
    finished: undefined,
    trace: undefined,
    retries: 0,
    onEvent: (event) => {
      observe(event);
      seen.trace?.onEvent(event);
      if (tap !== undefined) {
        try {
          tap(event);
        } catch (error) {
          proxy.logger.warn({ err: error }, 'The onEvent tap threw; ignored');
        }
      }
      if (event.type === 'routed') seen.routed = event;
      else if (event.type === 'decodeRetried') decodeRetried(proxy, seen, event);
      else if (event.type === 'prefillRetried') prefillRetried(proxy, seen, event);
      else if (event.type === 'finished') seen.finished = event;
    },
  };
  return seen;
}

/**
 * The flow runs the request again from prefill: the worker of the leg that failed is charged
 * (a worker that could not be reached leaves the rotation), the retry counted and logged.
 */
function prefillRetried(
  proxy: ProxyState,
  seen: { retries: number },
  event: FlowEventOf<'prefillRetried', ProxyPrefillWorker, ProxyDecodeWorker>,
): void {
  const leg = event.leg ?? 'prefill';
  proxy.health.noteFailure(event.error, { prefill: event.prefillWorker, decode: event.decodeWorker });
  proxy.metrics.retried(leg);
  const worker = leg === 'prefill' ? event.prefillWorker : event.decodeWorker;
  proxy.metrics.legRetried(leg, worker === undefined ? undefined : proxy.nameOf(worker));
  proxy.logger.warn(
    {
      requestId: event.requestId,
      attempt: seen.retries,
      leg,
      worker: worker?.url,
      delayMs: Math.round(event.delayMs),
      err: event.error,
    },
    'Retrying the request on another worker (nothing was sent to the client yet)',
  );
}

/**
 * The flow sends a failed sequential decode to another decode worker: the failed one is
 * charged, the retry counted and logged, and the request now names the new worker.
 */
function decodeRetried(
  proxy: ProxyState,
  seen: { routed: Routed | undefined },
  event: FlowEventOf<'decodeRetried', ProxyPrefillWorker, ProxyDecodeWorker>,
): void {
  const failed = seen.routed?.decodeWorker;
  proxy.health.noteFailure(event.error, { decode: failed });
  proxy.metrics.retried('decode');
  proxy.metrics.legRetried('decode', failed === undefined ? undefined : proxy.nameOf(failed));
  proxy.logger.warn(
    {
      requestId: event.requestId,
      attempt: event.attempt,
      leg: 'decode',
      worker: failed?.url,
      delayMs: Math.round(event.delayMs),
      err: event.error,
    },
    'Retrying decode on another worker with the same handoff: the first was never reached, so the prefill worker still holds the KV (nothing was sent to the client yet)',
  );
  if (seen.routed !== undefined && event.decodeWorker !== undefined) {
    seen.routed = { ...seen.routed, decodeWorker: event.decodeWorker };
  }
}

/** The strategy and the workers, by name: a client never sees a worker's address. */
function setRouteHeaders(proxy: ProxyState, res: ServerResponse, routed: Routed | undefined): void {
  if (routed === undefined || res.headersSent) return;
  res.setHeader('x-disagg-strategy', STRATEGY_HEADER[routed.strategy]);
  if (routed.prefillWorker !== undefined) res.setHeader('x-disagg-prefill-worker', proxy.nameOf(routed.prefillWorker));
  if (routed.decodeWorker !== undefined) res.setHeader('x-disagg-decode-worker', proxy.nameOf(routed.decodeWorker));
}

/** A worker as the log names it: its name and its address. */
function workerOf(proxy: ProxyState, worker: { url: string } | undefined): string | undefined {
  return worker === undefined ? undefined : `${proxy.nameOf(worker)} ${worker.url}`;
}

function answer(res: ServerResponse, error: ErrorAnswer): void {
  answerJson(res, error.status, error.body);
}
