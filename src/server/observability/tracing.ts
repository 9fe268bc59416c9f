import type { IncomingHttpHeaders } from 'node:http';
import type * as Otel from '@opentelemetry/api';
import type { FlowEvent } from '../../flow/events.js';
import { headerValue } from '../../http/node-server.js';
import type { CompletionUsage } from '../../protocol/llm-engine-output.js';
import { loggable, safeMessage } from '../../util/worker-text.js';
import type { TracerLike } from '../settings/types.js';

// The tracer a program gives is one of its parts, checked with the settings; the package's
// entry and the CLI import its type from here.
export type { TracerLike } from '../settings/types.js';

type Api = typeof Otel;

/** The W3C trace context a client sent: `traceparent`, checked, and `tracestate` as sent. */
export interface TraceHeaders {
  traceparent: string;
  tracestate?: string | undefined;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * The client's trace context, if its `traceparent` is valid (W3C Trace Context: version `ff`,
 * an all-zero trace or parent id, or a version-00 header with anything after the flags are
 * invalid, and then `tracestate` is dropped too, as the standard says).
 *
 * @internal
 */
export function incomingTrace(headers: IncomingHttpHeaders): TraceHeaders | undefined {
  const traceparent = headerValue(headers.traceparent)?.trim().toLowerCase();
  if (traceparent === undefined) return undefined;
  const parts = TRACEPARENT.exec(traceparent);
  if (parts === null) return undefined;
  const [, version, traceId, spanId, , rest] = parts;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId as string) || /^0+$/.test(spanId as string)) return undefined;
  const tracestate = headers.tracestate;
  const state = Array.isArray(tracestate) ? tracestate.join(',') : tracestate;
  return {
    traceparent: traceparent.slice(0, 55),
    ...(state === undefined || state === '' ? {} : { tracestate: state }),
  };
}

let loading: Promise<Api | undefined> | undefined;

/** `@opentelemetry/api` if it is installed (an optional peer), loaded once. */
function loadApi(): Promise<Api | undefined> {
  loading ??= import('@opentelemetry/api').then(
    (module) => module,
    () => undefined,
  );
  return loading;
}

/**
 * The proxy's spans, when `@opentelemetry/api` is installed: with the tracer given, else the
 * global one (`disagg`), which records nothing until the application registers an SDK.
 *
 * @internal
 */
export class Tracing {
  readonly api: Api;
  readonly tracer: Otel.Tracer;

  private constructor(api: Api, tracer: Otel.Tracer) {
    this.api = api;
    this.tracer = tracer;
  }

  /** Tracing with `tracer` (or the global tracer), or undefined without the API. */
  static async load(tracer: TracerLike | undefined): Promise<Tracing | undefined> {
    const api = await loadApi();
    if (api === undefined) return undefined;
    return new Tracing(api, (tracer as Otel.Tracer | undefined) ?? api.trace.getTracer('disagg'));
  }
}

type Leg = 'prefill' | 'decode';

/**
 * One request's trace. Without tracing, the client's `traceparent`/`tracestate` go to both
 * legs unchanged (the proxy is not a participant). With tracing, a `disagg.request` span
 * (a child of the client's context, if any), a `disagg.prefill` and a `disagg.decode` span
 * per leg call (each worker gets its own leg span as parent), and `disagg.handoff` from
 * prefill's first output to decode taking the KV; the flow's events set their outcome.
 *
 * @internal
 */
export class RequestTrace {
  /** With tracing: the API, the tracer, the request's span and its context; undefined without. */
  readonly #traced: { api: Api; tracer: Otel.Tracer; span: Otel.Span; context: Otel.Context } | undefined;
  readonly #incoming: TraceHeaders | undefined;
  readonly #nameOf: (worker: { url: string }) => string;
  readonly #legs: { prefill?: Otel.Span; decode?: Otel.Span } = {};
  #handoff: Otel.Span | undefined;

  constructor(
    tracing: Tracing | undefined,
    incoming: TraceHeaders | undefined,
    nameOf: (worker: { url: string }) => string,
    attributes: Record<string, string>,
  ) {
    this.#incoming = incoming;
    this.#nameOf = nameOf;
    if (tracing === undefined) return;
    const { api, tracer } = tracing;
    const parent = incoming === undefined ? api.ROOT_CONTEXT : remoteContext(api, incoming);
    const span = tracer.startSpan('disagg.request', { kind: api.SpanKind.SERVER, attributes }, parent);
    this.#traced = { api, tracer, span, context: api.trace.setSpan(parent, span) };
  }

  /** Whether this request's spans are recorded (an SDK is registered, and sampled it in). */
  get recording(): boolean {
    return this.#traced?.span.isRecording() === true;
  }

  /** The trace headers of a call of `leg` to `worker`; with tracing, a new leg span. */
  headersFor(leg: Leg, worker: { url: string } | undefined): Record<string, string> {
    const traced = this.#traced;
    if (traced === undefined) return this.#passOn();
    const { api, tracer } = traced;
    // A leg called again (a retry) ends the span of the call before it.
    this.#legs[leg]?.end();
    const span = tracer.startSpan(
      `disagg.${leg}`,
      {
        kind: api.SpanKind.CLIENT,
        attributes: { 'disagg.leg': leg, ...(worker === undefined ? {} : { 'disagg.worker': this.#nameOf(worker) }) },
      },
      traced.context,
    );
    this.#legs[leg] = span;
    const context = span.spanContext();
    if (!api.isSpanContextValid(context)) return this.#passOn();
    const flags = (context.traceFlags & 0xff).toString(16).padStart(2, '0');
    const state = context.traceState?.serialize() ?? this.#incoming?.tracestate;
    return {
      traceparent: `00-${context.traceId}-${context.spanId}-${flags}`,
      ...(state === undefined || state === '' ? {} : { tracestate: state }),
    };
  }

  /** Follows the flow: who serves, how each leg ended, the handoff. */
  onEvent(event: FlowEvent<{ url: string }, { url: string }>): void {
    const traced = this.#traced;
    if (traced === undefined) return;
    const { api, tracer, span } = traced;
    switch (event.type) {
      case 'routed':
        span.setAttributes({
          'disagg.strategy': event.strategy,
          ...(event.reason === undefined ? {} : { 'disagg.aggregated_because': event.reason }),
          ...(event.prefillWorker === undefined ? {} : { 'disagg.prefill_worker': this.#nameOf(event.prefillWorker) }),
          ...(event.decodeWorker === undefined ? {} : { 'disagg.decode_worker': this.#nameOf(event.decodeWorker) }),
        });
        break;
      case 'prefillFirstOutput':
        this.#handoff ??= tracer.startSpan('disagg.handoff', { kind: api.SpanKind.INTERNAL }, traced.context);
        break;
      case 'handoff':
        this.#handoff?.setAttribute('disagg.handoff', event.handoff);
        break;
      case 'kvClaimed':
        this.#handoff?.end();
        this.#handoff = undefined;
        break;
      case 'prefillCompleted':
        this.#endLeg('prefill', 'success');
        break;
      case 'prefillFailed':
        this.#endLeg('prefill', 'error', event.error);
        break;
      case 'decodeRetried':
        this.#endLeg('decode', 'error', event.error);
        break;
      case 'migration':
        // The request's span says each break and what became of it; a leg that broke ends, and
        // its continuation's call opens a leg span of its own.
        span.addEvent('disagg.migration', {
          'disagg.migration.attempt': event.attempt,
          'disagg.migration.reason': event.reason,
          'disagg.migration.outcome': event.outcome,
          'disagg.migration.generated_tokens': event.generatedTokens,
          ...(event.why === undefined ? {} : { 'disagg.migration.why': event.why }),
          ...(event.mode === undefined ? {} : { 'disagg.migration.mode': event.mode }),
          ...(event.toWorker === undefined ? {} : { 'disagg.migration.to_worker': this.#nameOf(event.toWorker) }),
        });
        if (event.outcome === 'migrated') this.#endLeg('decode', 'error', event.error);
        break;
      case 'finished':
        span.setAttribute('disagg.outcome', event.outcome);
        if (event.leg !== undefined) span.setAttribute('disagg.failed_leg', event.leg);
        this.#endLeg('decode', event.outcome, event.leg === 'decode' ? event.error : undefined);
        break;
      default:
        break;
    }
  }

  /** Ends the request span (and any span still open) with the answer's status and the token counts. */
  end(status: number, outcome: string, usage: CompletionUsage | undefined, error: unknown): void {
    const traced = this.#traced;
    if (traced === undefined) return;
    const { api, span } = traced;
    this.#endLeg('prefill', outcome);
    this.#endLeg('decode', outcome);
    this.#handoff?.end();
    span.setAttribute('http.response.status_code', status);
    if (usage !== undefined) {
      span.setAttributes({
        'gen_ai.usage.input_tokens': usage.prompt_tokens,
        'gen_ai.usage.output_tokens': usage.completion_tokens,
      });
    }
    if (error !== undefined || status >= 500) {
      span.setStatus({
        code: api.SpanStatusCode.ERROR,
        message: error instanceof Error ? safeMessage(error) : `HTTP ${status}`,
      });
      if (error instanceof Error) span.recordException(spanError(error));
    }
    span.end();
  }

  #endLeg(leg: Leg, outcome: string, error?: Error): void {
    // Leg spans exist only with tracing.
    const span = this.#legs[leg];
    const traced = this.#traced;
    if (span === undefined || traced === undefined) return;
    this.#legs[leg] = undefined;
    span.setAttribute('disagg.outcome', outcome);
    if (error !== undefined) {
      span.setStatus({ code: traced.api.SpanStatusCode.ERROR, message: safeMessage(error) });
      span.recordException(spanError(error));
    }
    span.end();
  }

  #passOn(): Record<string, string> {
    const incoming = this.#incoming;
    if (incoming === undefined) return {};
    return incoming.tracestate === undefined
      ? { traceparent: incoming.traceparent }
      : { traceparent: incoming.traceparent, tracestate: incoming.tracestate };
  }
}

/** The client's span as the parent of ours. */
function remoteContext(api: Api, incoming: TraceHeaders): Otel.Context {
  const [, traceId, spanId, flags] = incoming.traceparent.split('-') as [string, string, string, string];
  return api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16),
    isRemote: true,
    ...(incoming.tracestate === undefined ? {} : { traceState: api.createTraceState(incoming.tracestate) }),
  });
}

/**
 * An error as a span records it: as it is, but a worker's answer, which may echo the prompt, is
 * its name and its message with the worker's words replaced by their length, without a stack
 * (a span goes to a collector, as a log line does: the same rule).
 */
function spanError(error: Error): Error | { name: string; message: string } {
  return loggable(error) === error ? error : { name: error.name, message: safeMessage(error) };
}
