import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { legOf } from '../flow/client-stream.js';
import { disaggregate } from '../flow/disaggregate.js';
import type { FlowEvent, FlowEventOf, Strategy } from '../flow/events.js';
import { parseJson } from '../http/json.js';
import { answerJson, headerValue, RequestError, readBody } from '../http/node-server.js';
import type { EngineItem } from '../protocol/llm-engine-output.js';
import { Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { type ErrorAnswer, errorAnswer, ShutdownError } from './error-answers.js';
import type { InFlightRequest } from './in-flight.js';
import { OpenAIWriter, type Route } from './openai-format.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './options.js';
import type { ProxyState } from './proxy-state.js';
import { relaySse } from './sse-relay.js';
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
): Promise<void> {
  const requestId = headerValue(req.headers['x-request-id']) ?? randomUUID();
  res.setHeader('x-request-id', requestId);
  if (proxy.closing) return answer(res, errorAnswer(new ShutdownError('The proxy is shutting down')));
  let body: Record<string, unknown>;
  try {
    body = await readRequestBody(req, proxy.options.maxBodyBytes);
  } catch (error) {
    return answer(res, errorAnswer(error));
  }

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
  // Every failure answered: a worker a request could not reach leaves the rotation too.
  const answerFor = (error: unknown): ErrorAnswer => {
    const routed = events.routed;
    proxy.health.noteFailure(error, { prefill: routed?.prefillWorker, decode: routed?.decodeWorker });
    return errorAnswer(error, legOf(error));
  };
  try {
    await serve(proxy, { body, route, context, res, entry, events, answerFor });
  } finally {
    proxy.inFlight.delete(entry);
    logRequest(proxy, { requestId, route, res, events, started });
  }
}

/** Runs the request through the flow and answers it, streamed or whole. */
async function serve(
  proxy: ProxyState,
  request: {
    body: Record<string, unknown>;
    route: Route;
    context: Controller;
    res: ServerResponse;
    entry: InFlightRequest;
    events: ReturnType<typeof requestEvents>;
    answerFor: (error: unknown) => ErrorAnswer;
  },
): Promise<void> {
  const { body, context, res, events, answerFor } = request;
  let stream: ResponseStream<EngineItem>;
  try {
    stream = await disaggregate({
      request: body,
      context,
      prefill: proxy.engine,
      decode: proxy.engine,
      connector: proxy.connector,
      prefillWorkers: proxy.prefillWorkers,
      decodeWorkers: proxy.decodeWorkers,
      onEvent: events.onEvent,
      logger: proxy.logger,
      deadlines: proxy.options.deadlines,
      cleanupBudgetMs: proxy.options.cleanupBudgetMs,
    });
  } catch (error) {
    setRouteHeaders(res, events.routed);
    return answer(res, answerFor(error));
  }
  setRouteHeaders(res, events.routed);
  const writer = new OpenAIWriter(request.route, body);
  if (body.stream !== true) return answerWhole(stream, res, writer, answerFor);
  await relaySse(stream, res, writer, request.entry, {
    slowClientTimeoutMs: proxy.options.slowClientTimeoutMs,
    answerFor,
    interToken: (seconds) => proxy.metrics.interToken(seconds),
  });
}

/** The one log line of a request, when it is over. */
function logRequest(
  proxy: ProxyState,
  request: {
    requestId: string;
    route: Route;
    res: ServerResponse;
    events: ReturnType<typeof requestEvents>;
    started: number;
  },
): void {
  const { routed, finished } = request.events;
  proxy.logger.info(
    {
      requestId: request.requestId,
      route: request.route,
      strategy: routed === undefined ? undefined : STRATEGY_HEADER[routed.strategy],
      prefillWorker: routed?.prefillWorker?.url,
      decodeWorker: routed?.decodeWorker?.url,
      outcome: finished?.outcome,
      leg: finished?.leg,
      status: request.res.statusCode,
      durationMs: Math.round(performance.now() - request.started),
    },
    'request finished',
  );
}

/** The request body as a JSON object, or a 400 / 413 {@link RequestError}. */
async function readRequestBody(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const text = await readBody(req, limit);
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (error) {
    throw new RequestError(400, `The request body is not JSON: ${String(error)}`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new RequestError(400, 'The request body must be a JSON object');
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
    onEvent: (event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>) => void;
  } = {
    routed: undefined,
    finished: undefined,
    onEvent: (event) => {
      observe(event);
      if (tap !== undefined) {
        try {
          tap(event);
        } catch (error) {
          proxy.logger.warn({ err: error }, 'The onEvent tap threw; ignored');
        }
      }
      if (event.type === 'routed') seen.routed = event;
      else if (event.type === 'finished') seen.finished = event;
    },
  };
  return seen;
}

function setRouteHeaders(res: ServerResponse, routed: Routed | undefined): void {
  if (routed === undefined || res.headersSent) return;
  res.setHeader('x-disagg-strategy', STRATEGY_HEADER[routed.strategy]);
  if (routed.prefillWorker !== undefined) res.setHeader('x-disagg-prefill-worker', routed.prefillWorker.url);
  if (routed.decodeWorker !== undefined) res.setHeader('x-disagg-decode-worker', routed.decodeWorker.url);
}

function answer(res: ServerResponse, error: ErrorAnswer): void {
  answerJson(res, error.status, error.body);
}
