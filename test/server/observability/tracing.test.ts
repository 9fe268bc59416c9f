import * as api from '@opentelemetry/api';
import {
  AlwaysOffSampler,
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import type { FlowEvent } from '../../../src/flow/events.js';
import { incomingTrace, RequestTrace, Tracing } from '../../../src/server/observability/tracing.js';

const CLIENT = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
const CLIENT_STATE = { ...CLIENT, tracestate: 'vendor=abc' };
const nameOf = (worker: { url: string }) => `name-of-${worker.url}`;

async function recorded(sampled = true) {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
    ...(sampled ? {} : { sampler: new AlwaysOffSampler() }),
  });
  const tracing = (await Tracing.load(provider.getTracer('test'))) as Tracing;
  const spans = () =>
    Object.fromEntries(exporter.getFinishedSpans().map((span) => [span.name, span])) as Record<string, ReadableSpan>;
  return { tracing, exporter, spans };
}

const event = (fields: Record<string, unknown>) =>
  ({ requestId: 'r', elapsedMs: 0, late: false, ...fields }) as FlowEvent<{ url: string }, { url: string }>;

describe('RequestTrace without tracing', () => {
  it("passes the client's trace context on unchanged, and records nothing", () => {
    expect(new RequestTrace(undefined, CLIENT_STATE, nameOf, {}).headersFor('prefill', { url: 'p' })).toStrictEqual(
      CLIENT_STATE,
    );
    expect(new RequestTrace(undefined, CLIENT, nameOf, {}).headersFor('decode', undefined)).toStrictEqual(CLIENT);
    const none = new RequestTrace(undefined, undefined, nameOf, {});
    expect(none.headersFor('decode', { url: 'd' })).toEqual({});
    expect(none.recording).toBe(false);
    none.onEvent(event({ type: 'routed', strategy: 'sequential' }));
    none.end(500, 'error', undefined, new Error('x'));
  });
});

describe('RequestTrace with tracing', () => {
  it('Tracing.load uses the tracer given, else the global one named disagg', async () => {
    const { tracing } = await recorded();
    expect(tracing.api.trace).toBe(api.trace);
    const global = (await Tracing.load(undefined)) as Tracing;
    expect(global.tracer).toMatchObject({ name: 'disagg' });
  });

  it("the request span is a SERVER span under the client's, the leg spans CLIENT spans under it, each worker told its own", async () => {
    const { tracing, spans } = await recorded();
    const trace = new RequestTrace(tracing, CLIENT_STATE, nameOf, { 'http.route': 'chat' });
    expect(trace.recording).toBe(true);
    const prefill = trace.headersFor('prefill', { url: 'p0' });
    const decode = trace.headersFor('decode', undefined);
    trace.end(200, 'success', { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }, undefined);
    const byName = spans();
    const request = byName['disagg.request'] as ReadableSpan;
    expect(request.kind).toBe(api.SpanKind.SERVER);
    expect(request.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(request.parentSpanContext?.spanId).toBe('b7ad6b7169203331');
    expect(request.attributes).toEqual({
      'http.route': 'chat',
      'http.response.status_code': 200,
      'gen_ai.usage.input_tokens': 5,
      'gen_ai.usage.output_tokens': 3,
    });
    expect(request.status.code).toBe(api.SpanStatusCode.UNSET);
    for (const [leg, headers, attributes] of [
      ['prefill', prefill, { 'disagg.leg': 'prefill', 'disagg.worker': 'name-of-p0', 'disagg.outcome': 'success' }],
      ['decode', decode, { 'disagg.leg': 'decode', 'disagg.outcome': 'success' }],
    ] as const) {
      const span = byName[`disagg.${leg}`] as ReadableSpan;
      expect(span.kind).toBe(api.SpanKind.CLIENT);
      expect(span.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
      expect(span.attributes).toEqual(attributes);
      expect(headers).toEqual({
        traceparent: `00-0af7651916cd43dd8448eb211c80319c-${span.spanContext().spanId}-01`,
        tracestate: 'vendor=abc',
      });
    }
  });

  it('without a client trace the request starts its own; an unsampled one says so in its flags', async () => {
    const sampled = await recorded();
    const own = new RequestTrace(sampled.tracing, undefined, nameOf, {});
    const headers = own.headersFor('decode', { url: 'd0' });
    expect(headers).toStrictEqual({ traceparent: expect.stringMatching(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/) });
    own.end(200, 'success', undefined, undefined);
    expect(sampled.spans()['disagg.request']?.parentSpanContext).toBeUndefined();
    const unsampled = await recorded(false);
    const quiet = new RequestTrace(unsampled.tracing, undefined, nameOf, {});
    expect(quiet.recording).toBe(false);
    expect(quiet.headersFor('decode', { url: 'd0' }).traceparent).toMatch(/-00$/);
  });

  it("a tracer that makes no valid span (no SDK registered) passes the client's context on", async () => {
    const noop = (await Tracing.load(new api.ProxyTracerProvider().getTracer('none'))) as Tracing;
    expect(new RequestTrace(noop, undefined, nameOf, {}).headersFor('prefill', { url: 'p' })).toEqual({});
    const trace = new RequestTrace(noop, CLIENT_STATE, nameOf, {});
    expect(trace.recording).toBe(false);
    // The no-op tracer's span is the client's own context: its ids go on as they came.
    expect(trace.headersFor('prefill', { url: 'p' })).toEqual(CLIENT_STATE);
  });

  it('a leg called again (a retry) ends the span of the call before', async () => {
    const { tracing, exporter } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('decode', { url: 'd0' });
    expect(exporter.getFinishedSpans()).toEqual([]);
    trace.headersFor('decode', { url: 'd1' });
    expect(exporter.getFinishedSpans().map((span) => span.attributes['disagg.worker'])).toEqual(['name-of-d0']);
  });

  it("a migration is an event of the request's span; the leg that broke ends with its error", async () => {
    const { tracing, spans } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(
      event({
        type: 'migration',
        attempt: 1,
        reason: 'stream_error',
        outcome: 'migrated',
        mode: 'resume',
        error: new Error('reset'),
        generatedTokens: 5,
        fromWorker: { url: 'd0' },
        toWorker: { url: 'd1' },
      }),
    );
    trace.onEvent(
      event({
        type: 'migration',
        attempt: 2,
        reason: 'idle',
        outcome: 'refused',
        why: 'limit',
        error: new Error('x'),
        generatedTokens: 9,
      }),
    );
    trace.end(200, 'success', undefined, undefined);
    const byName = spans();
    expect(byName['disagg.decode']?.attributes['disagg.outcome']).toBe('error');
    // Strictly: the SDK keeps an attribute set to undefined, and an exporter would send it empty.
    expect(byName['disagg.request']?.events.map(({ name, attributes }) => ({ name, attributes }))).toStrictEqual([
      {
        name: 'disagg.migration',
        attributes: {
          'disagg.migration.attempt': 1,
          'disagg.migration.reason': 'stream_error',
          'disagg.migration.outcome': 'migrated',
          'disagg.migration.generated_tokens': 5,
          'disagg.migration.mode': 'resume',
          'disagg.migration.to_worker': 'name-of-d1',
        },
      },
      {
        name: 'disagg.migration',
        attributes: {
          'disagg.migration.attempt': 2,
          'disagg.migration.reason': 'idle',
          'disagg.migration.outcome': 'refused',
          'disagg.migration.generated_tokens': 9,
          'disagg.migration.why': 'limit',
        },
      },
    ]);
  });

  it('a refused migration leaves the leg span open: it ends with how the request finished', async () => {
    const { tracing, exporter, spans } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(
      event({
        type: 'migration',
        attempt: 1,
        reason: 'idle',
        outcome: 'refused',
        why: 'off',
        error: new Error('silent'),
        generatedTokens: 3,
      }),
    );
    expect(exporter.getFinishedSpans()).toEqual([]);
    const failure = new Error('decode went silent');
    trace.onEvent(event({ type: 'finished', outcome: 'error', leg: 'decode', error: failure }));
    trace.end(502, 'error', undefined, failure);
    expect(spans()['disagg.decode']?.status).toEqual({ code: api.SpanStatusCode.ERROR, message: 'decode went silent' });
  });

  it('the flow events set who served, the handoff span and how each leg ended', async () => {
    const { tracing, spans, exporter } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('prefill', { url: 'p0' });
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(
      event({
        type: 'routed',
        strategy: 'aggregated',
        reason: 'short-prompt',
        prefillWorker: { url: 'p0' },
        decodeWorker: { url: 'd0' },
      }),
    );
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.onEvent(event({ type: 'handoff', handoff: 'bootstrap' }));
    trace.onEvent(event({ type: 'prefillCompleted' }));
    trace.onEvent(event({ type: 'kvClaimed' }));
    expect(
      exporter
        .getFinishedSpans()
        .map((span) => span.name)
        .sort(),
    ).toEqual(['disagg.handoff', 'disagg.prefill']);
    trace.onEvent(event({ type: 'finished', outcome: 'success' }));
    trace.end(200, 'success', undefined, undefined);
    const byName = spans();
    expect(byName['disagg.request']?.attributes).toEqual({
      'disagg.strategy': 'aggregated',
      'disagg.aggregated_because': 'short-prompt',
      'disagg.prefill_worker': 'name-of-p0',
      'disagg.decode_worker': 'name-of-d0',
      'disagg.outcome': 'success',
      'http.response.status_code': 200,
    });
    expect(byName['disagg.handoff']?.attributes).toEqual({ 'disagg.handoff': 'bootstrap' });
    expect(byName['disagg.handoff']?.kind).toBe(api.SpanKind.INTERNAL);
    expect(byName['disagg.prefill']?.attributes['disagg.outcome']).toBe('success');
    expect(exporter.getFinishedSpans()).toHaveLength(4);
  });

  it('a routed event without a reason or workers sets only the strategy', async () => {
    const { tracing, spans } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.onEvent(event({ type: 'routed', strategy: 'sequential' }));
    trace.onEvent(event({ type: 'decodeOpened' }));
    trace.end(200, 'success', undefined, undefined);
    expect(spans()['disagg.request']?.attributes).toEqual({
      'disagg.strategy': 'sequential',
      'http.response.status_code': 200,
    });
  });

  it("failures: the failing leg's span and the request's carry the error and its words", async () => {
    const { tracing, spans } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('prefill', { url: 'p0' });
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(event({ type: 'prefillFailed', error: new Error('prompt too long') }));
    const failure = new Error('decode broke');
    trace.onEvent(event({ type: 'finished', outcome: 'error', leg: 'decode', error: failure }));
    trace.end(502, 'error', undefined, failure);
    const byName = spans();
    for (const [name, message] of [
      ['disagg.prefill', 'prompt too long'],
      ['disagg.decode', 'decode broke'],
      ['disagg.request', 'decode broke'],
    ] as const) {
      expect(byName[name]?.status, name).toEqual({ code: api.SpanStatusCode.ERROR, message });
      expect(
        byName[name]?.events.map((each) => each.name),
        name,
      ).toEqual(['exception']);
    }
    expect(byName['disagg.request']?.attributes).toMatchObject({
      'disagg.outcome': 'error',
      'disagg.failed_leg': 'decode',
    });
    expect(byName['disagg.prefill']?.attributes['disagg.outcome']).toBe('error');
  });

  it('a decode retried ends its span as an error; a prefill failure reported as finished does not mark decode', async () => {
    const { tracing, spans, exporter } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(event({ type: 'decodeRetried', attempt: 1, error: new Error('reset'), delayMs: 0 }));
    expect(exporter.getFinishedSpans()[0]?.status).toEqual({ code: api.SpanStatusCode.ERROR, message: 'reset' });
    trace.headersFor('decode', { url: 'd1' });
    trace.onEvent(event({ type: 'finished', outcome: 'error', leg: 'prefill', error: new Error('prefill gone') }));
    trace.end(503, 'error', undefined, undefined);
    const byName = spans();
    const decodes = exporter.getFinishedSpans().filter((span) => span.name === 'disagg.decode');
    expect(decodes[1]?.status.code).toBe(api.SpanStatusCode.UNSET);
    expect(decodes[1]?.attributes['disagg.outcome']).toBe('error');
    // A 5xx without an error object still marks the request, in HTTP terms.
    expect(byName['disagg.request']?.status).toEqual({ code: api.SpanStatusCode.ERROR, message: 'HTTP 503' });
    expect(byName['disagg.request']?.events).toEqual([]);
  });

  it('end closes what is still open with the outcome; a 4xx is not a span error', async () => {
    const { tracing, exporter, spans } = await recorded();
    const trace = new RequestTrace(tracing, undefined, nameOf, {});
    trace.headersFor('prefill', { url: 'p0' });
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.end(400, 'rejected', undefined, undefined);
    expect(
      exporter
        .getFinishedSpans()
        .map((span) => span.name)
        .sort(),
    ).toEqual(['disagg.handoff', 'disagg.prefill', 'disagg.request']);
    expect(spans()['disagg.prefill']?.attributes['disagg.outcome']).toBe('rejected');
    expect(spans()['disagg.request']?.status.code).toBe(api.SpanStatusCode.UNSET);
  });
});

describe('RequestTrace: what the client sent shapes the trace', () => {
  it("a client's unsampled trace stays unsampled; its span is marked remote", async () => {
    const { tracing, spans } = await recorded();
    const quiet = new RequestTrace(tracing, { traceparent: CLIENT.traceparent.replace(/-01$/, '-00') }, nameOf, {});
    expect(quiet.recording).toBe(false);
    expect(quiet.headersFor('decode', { url: 'd0' }).traceparent).toMatch(
      /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-00$/,
    );
    const sampled = new RequestTrace(tracing, CLIENT, nameOf, {});
    sampled.end(200, 'success', undefined, undefined);
    expect(spans()['disagg.request']?.parentSpanContext?.isRemote).toBe(true);
    // No tracestate header, no trace state: not an empty one made up for it.
    expect(spans()['disagg.request']?.parentSpanContext?.traceState).toBeUndefined();
  });

  it("the trace state the SDK keeps (the client's, plus what its sampler adds) goes to the workers; an empty one is not sent", async () => {
    const exporter = new InMemorySpanExporter();
    const addsItsOwn = {
      shouldSample: (context: api.Context) => ({
        decision: 2, // RECORD_AND_SAMPLED
        traceState: (api.trace.getSpanContext(context)?.traceState ?? api.createTraceState()).set('sdk', 'x'),
      }),
      toString: () => 'adds its own',
    };
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(exporter)],
      sampler: addsItsOwn,
    });
    const tracing = (await Tracing.load(provider.getTracer('test'))) as Tracing;
    expect(new RequestTrace(tracing, CLIENT_STATE, nameOf, {}).headersFor('prefill', { url: 'p' }).tracestate).toBe(
      'sdk=x,vendor=abc',
    );
    const emptying = {
      shouldSample: () => ({ decision: 2, traceState: api.createTraceState() }),
      toString: () => 'empties it',
    };
    const quiet = (await Tracing.load(new BasicTracerProvider({ sampler: emptying }).getTracer('test'))) as Tracing;
    expect(new RequestTrace(quiet, undefined, nameOf, {}).headersFor('prefill', { url: 'p' })).toEqual({
      traceparent: expect.stringMatching(/-01$/),
    });
  });
});

describe('RequestTrace over a tracer of its own kind', () => {
  /** A tracer whose spans count what is done to them, and carry no trace state. */
  function countingTracer() {
    const spans: Array<{ name: string; ended: number; attributes: Record<string, unknown>; exceptions: unknown[] }> =
      [];
    let next = 1;
    const tracer = {
      startSpan(name: string) {
        const record = { name, ended: 0, attributes: {} as Record<string, unknown>, exceptions: [] as unknown[] };
        spans.push(record);
        const spanId = (next++).toString(16).padStart(16, '0');
        return {
          spanContext: () => ({ traceId: 'a'.repeat(32), spanId, traceFlags: 1 }),
          isRecording: () => true,
          setAttribute(key: string, value: unknown) {
            record.attributes[key] = value;
          },
          setAttributes(values: Record<string, unknown>) {
            Object.assign(record.attributes, values);
          },
          setStatus() {},
          recordException(error: unknown) {
            record.exceptions.push(error);
          },
          end() {
            record.ended += 1;
          },
        };
      },
    };
    return { tracer, spans };
  }

  it("each span ends once, whatever events come after; the client's trace state goes on when the span has none", async () => {
    const { tracer, spans } = countingTracer();
    const tracing = (await Tracing.load(tracer)) as Tracing;
    const trace = new RequestTrace(tracing, CLIENT_STATE, nameOf, {});
    expect(trace.headersFor('prefill', { url: 'p0' })).toEqual({
      traceparent: `00-${'a'.repeat(32)}-0000000000000002-01`,
      tracestate: 'vendor=abc',
    });
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.onEvent(event({ type: 'prefillCompleted' }));
    trace.onEvent(event({ type: 'kvClaimed' }));
    trace.onEvent(event({ type: 'finished', outcome: 'success' }));
    trace.end(200, 'success', undefined, undefined);
    expect(spans.map((span) => [span.name, span.ended])).toEqual([
      ['disagg.request', 1],
      ['disagg.prefill', 1],
      ['disagg.decode', 1],
      ['disagg.handoff', 1],
    ]);
    expect(spans[0]?.attributes).not.toHaveProperty('disagg.failed_leg');
  });

  it('a handoff or KV claim without a first output first starts no span and breaks nothing', async () => {
    const { tracer, spans } = countingTracer();
    const trace = new RequestTrace((await Tracing.load(tracer)) as Tracing, undefined, nameOf, {});
    trace.onEvent(event({ type: 'handoff', handoff: 'params' }));
    trace.onEvent(event({ type: 'kvClaimed' }));
    trace.onEvent(event({ type: 'routed', strategy: 'sequential' }));
    expect(spans.map((span) => span.name)).toEqual(['disagg.request']);
    expect(spans[0]?.attributes).toStrictEqual({ 'disagg.strategy': 'sequential' });
  });

  it('a decode sent again ends the span of the call before as an error, with outcome error', async () => {
    const { tracer, spans } = countingTracer();
    const trace = new RequestTrace((await Tracing.load(tracer)) as Tracing, undefined, nameOf, {});
    trace.headersFor('decode', { url: 'd0' });
    trace.onEvent(event({ type: 'decodeRetried', attempt: 1, error: new Error('reset'), delayMs: 0 }));
    expect(spans[1]).toMatchObject({ name: 'disagg.decode', ended: 1, attributes: { 'disagg.outcome': 'error' } });
    expect(spans[1]?.exceptions).toHaveLength(1);
  });

  it('one handoff span however often prefill reports its first output', async () => {
    const { tracer, spans } = countingTracer();
    const trace = new RequestTrace((await Tracing.load(tracer)) as Tracing, undefined, nameOf, {});
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.onEvent(event({ type: 'handoff', handoff: 'bootstrap' }));
    trace.onEvent(event({ type: 'prefillFirstOutput' }));
    trace.onEvent(event({ type: 'kvClaimed' }));
    expect(spans.filter((span) => span.name === 'disagg.handoff')).toEqual([
      { name: 'disagg.handoff', ended: 1, attributes: { 'disagg.handoff': 'bootstrap' }, exceptions: [] },
    ]);
  });

  it('a 500 marks the request an error even without an error object; a thrown non-Error is not recorded as an exception', async () => {
    for (const [status, error] of [
      [500, undefined],
      [502, 'boom'],
    ] as const) {
      const { tracer } = countingTracer();
      const statuses: unknown[] = [];
      const wrapped = {
        startSpan(name: string) {
          const span = tracer.startSpan(name);
          return { ...span, setStatus: (value: unknown) => statuses.push(value) };
        },
      };
      const trace = new RequestTrace((await Tracing.load(wrapped)) as Tracing, undefined, nameOf, {});
      trace.end(status, 'error', undefined, error);
      expect(statuses).toEqual([{ code: api.SpanStatusCode.ERROR, message: `HTTP ${status}` }]);
    }
    const { tracer, spans } = countingTracer();
    new RequestTrace((await Tracing.load(tracer)) as Tracing, undefined, nameOf, {}).end(
      502,
      'error',
      undefined,
      'boom',
    );
    expect(spans[0]?.exceptions).toEqual([]);
  });
});

describe('incomingTrace, at the edges of W3C Trace Context', () => {
  const id = '0af7651916cd43dd8448eb211c80319c';
  it('ids that start or end with zeros are ids; all zeros is none', () => {
    for (const traceparent of [
      `00-00${id.slice(2)}-00ad6b7169203331-01`,
      `00-${id.slice(0, 30)}00-b7ad6b7169203300-01`,
    ]) {
      expect(incomingTrace({ traceparent })).toStrictEqual({ traceparent });
    }
    expect(incomingTrace({ traceparent: `00-${'0'.repeat(32)}-b7ad6b7169203331-01` })).toBeUndefined();
  });

  it('a header with anything before it or after its flags (version 00) is invalid; an empty tracestate is dropped', () => {
    expect(incomingTrace({ traceparent: `x00-${id}-b7ad6b7169203331-01` })).toBeUndefined();
    expect(incomingTrace({ traceparent: `00-${id}-b7ad6b7169203331-01x` })).toBeUndefined();
    expect(incomingTrace({ traceparent: `00-${id}-b7ad6b7169203331-01`, tracestate: '' })).toStrictEqual({
      traceparent: `00-${id}-b7ad6b7169203331-01`,
    });
  });
});
