import { Controller } from '../runtime/controller.js';
import type { HttpExchange } from './http-exchange.js';
import { poolLabel } from './observability/scaling-metrics.js';
import { incomingTrace, RequestTrace } from './observability/tracing.js';
import { OverloadedError } from './pipeline/admission.js';
import { answerApiError } from './pipeline/api-errors.js';
import { errorAnswer, ShutdownError } from './pipeline/error-answers.js';
import { latencyFeed } from './pipeline/latency-feed.js';
import type { RequestContext } from './pipeline/request-context.js';
import { requestEvents } from './pipeline/request-events.js';
import { logRequest } from './pipeline/request-log.js';
import { type RequestStage, refusalOf } from './pipeline/stage.js';

/**
 * The proxy's request as shutdown, the metrics, health, the trace and the log see it: a context
 * a client that leaves stops, an in-flight entry (shutdown answers a 503 until the relay takes
 * over), its events (fed to the metrics, health and the `onEvent` tap), its trace (with
 * OpenTelemetry recording, or a client's `traceparent` to pass on). Once it is over: out of
 * the in-flight set, one log line, the trace ended with its outcome and usage.
 *
 * @internal
 */
export const trackingStage: RequestStage<HttpExchange> = {
  name: 'tracking',
  run: (request) => {
    const { proxy, exchange } = request;
    const { res } = exchange;
    // Preempted between its admission and here (a stage of the user's took a while): no
    // worker is called for it.
    if (exchange.preempted !== undefined) return refusalOf(request, exchange.preempted);
    const context = new Controller(request.requestId);
    request.context = context;
    const entry = {
      context,
      res,
      shutdown: (error: unknown = new ShutdownError()) => {
        context.stopGenerating();
        answerApiError(res, request.endpoint, errorAnswer(error));
      },
    };
    exchange.entry = entry;
    proxy.inFlight.add(entry);
    // A client that goes away stops the request (the flow still lets decode take the KV).
    res.on('close', () => {
      if (!res.writableFinished) context.stopGenerating();
    });
    // Only a generation has a first token and a stream to time.
    const latency =
      request.endpoint.serving === 'disaggregated'
        ? latencyFeed(proxy.latency, request.pool, () => request.input)
        : undefined;
    const events = requestEvents(proxy, poolLabel(request.pool), () => request.input.promptTokens, latency);
    request.events = events;
    request.trace = traceOf(request);
    events.trace = request.trace;
    return {
      after: () => {
        proxy.inFlight.delete(entry);
        logRequest(proxy, {
          requestId: request.requestId,
          clientRequestId: request.clientRequestId,
          route: request.endpoint.name,
          res,
          events,
          started: request.started,
          failure: request.failure,
          ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
          ...(exchange.preempted === undefined ? {} : { preemptedBy: exchange.preempted.preemptedBy }),
          bestEffort: bestEffortLegs(request),
        });
        request.trace?.end(
          res.statusCode,
          events.finished?.outcome ?? (request.failure === undefined ? 'success' : 'error'),
          request.usage,
          request.failure,
        );
      },
    };
  },
};

/**
 * The legs of a request served although no worker was predicted to meet its service levels on
 * them (an SLO-aware filter kept every worker): none for one shed for it, which was not served.
 */
function bestEffortLegs(request: RequestContext<HttpExchange>): readonly string[] {
  const { failure } = request;
  if (OverloadedError.is(failure) && failure.limit === 'slo') return [];
  return request.input.unmeetable;
}

/**
 * The request's trace: with OpenTelemetry recording, or a client's `traceparent` to pass on;
 * otherwise none (the untraced path stays as cheap as it was).
 */
function traceOf(request: RequestContext<HttpExchange>) {
  const { proxy } = request;
  const incoming = incomingTrace(request.exchange.req.headers);
  if (proxy.tracing === undefined && incoming === undefined) return undefined;
  const trace = new RequestTrace(proxy.tracing, incoming, (worker) => proxy.nameOf(worker), {
    'http.route': request.endpoint.name,
    'disagg.request_id': request.requestId,
    'disagg.tenant': request.tenant ?? '',
    'disagg.connector': proxy.options.connector,
  });
  return trace.recording || incoming !== undefined ? trace : undefined;
}
