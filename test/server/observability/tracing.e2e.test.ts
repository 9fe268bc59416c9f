import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { incomingTrace } from '../../../src/server/observability/tracing.js';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

const CLIENT_TRACE = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

function recorder() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, tracer: provider.getTracer('test') };
}

/** The generation calls a fake worker received (not its probes). */
function calls(worker: { requests: Array<{ path: string; headers: Record<string, unknown> }> }) {
  return worker.requests.filter((request) => request.path.startsWith('/v1/'));
}

describe('W3C trace context without a tracer', () => {
  it("the client's traceparent and tracestate reach both legs unchanged", async () => {
    const { client, prefill, decode } = await setup('vllm');
    await client.completions.create(
      { model: 'fake-model', prompt: 'hello', max_tokens: 2 },
      { headers: { traceparent: CLIENT_TRACE, tracestate: 'vendor=abc' } },
    );
    for (const worker of [prefill, decode]) {
      expect(calls(worker)[0]?.headers).toMatchObject({ traceparent: CLIENT_TRACE, tracestate: 'vendor=abc' });
    }
  });

  it('no traceparent, or an invalid one: the workers get none', async () => {
    const { client, prefill, decode } = await setup('vllm');
    await client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 });
    await client.completions.create(
      { model: 'fake-model', prompt: 'hello', max_tokens: 2 },
      { headers: { traceparent: '00-00000000000000000000000000000000-b7ad6b7169203331-01', tracestate: 'a=b' } },
    );
    for (const worker of [prefill, decode]) {
      for (const call of calls(worker)) {
        expect(call.headers.traceparent).toBeUndefined();
        expect(call.headers.tracestate).toBeUndefined();
      }
    }
  });

  it("each request's trace context goes with that request only: traced, untraced, traced again", async () => {
    const { client, prefill, decode } = await setup('vllm');
    const other = '00-11111111111111111111111111111111-2222222222222222-01';
    const ask = (headers: Record<string, string>) =>
      client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 }, { headers });
    await ask({});
    await ask({ traceparent: CLIENT_TRACE });
    await ask({});
    await ask({ traceparent: other });
    for (const worker of [prefill, decode]) {
      expect(calls(worker).map((call) => call.headers.traceparent)).toEqual([
        undefined,
        CLIENT_TRACE,
        undefined,
        other,
      ]);
    }
  });

  it('reads traceparent as W3C Trace Context says', () => {
    expect(incomingTrace({ traceparent: CLIENT_TRACE })).toEqual({ traceparent: CLIENT_TRACE });
    expect(incomingTrace({ traceparent: CLIENT_TRACE.toUpperCase(), tracestate: ['a=1', 'b=2'] })).toEqual({
      traceparent: CLIENT_TRACE,
      tracestate: 'a=1,b=2',
    });
    // A later version may carry more after the flags; the first four fields are what we use.
    expect(incomingTrace({ traceparent: `cc${CLIENT_TRACE.slice(2)}-what-comes-next` })?.traceparent).toBe(
      `cc${CLIENT_TRACE.slice(2)}`,
    );
    for (const invalid of [
      `ff${CLIENT_TRACE.slice(2)}`,
      `${CLIENT_TRACE}-extra`,
      '00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01',
      '00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01',
      'garbage',
      '',
    ]) {
      expect(incomingTrace({ traceparent: invalid, tracestate: 'a=b' }), invalid).toBeUndefined();
    }
    expect(incomingTrace({})).toBeUndefined();
  });
});

describe('OpenTelemetry spans', () => {
  it("one trace: the request under the client's span, prefill, decode and the handoff under it; each worker got its leg's span", async () => {
    const { exporter, tracer } = recorder();
    const { client, prefill, decode } = await setup('vllm', {}, { tracer });
    const stream = await client.completions.create(
      { model: 'fake-model', prompt: 'hello', max_tokens: 4, stream: true, stream_options: { include_usage: true } },
      { headers: { traceparent: CLIENT_TRACE, tracestate: 'vendor=abc' } },
    );
    for await (const _ of stream) {
      // read to the end
    }
    const spans = exporter.getFinishedSpans();
    const byName = Object.fromEntries(spans.map((span) => [span.name, span]));
    expect(Object.keys(byName).sort()).toEqual(['disagg.decode', 'disagg.handoff', 'disagg.prefill', 'disagg.request']);
    const traceId = CLIENT_TRACE.split('-')[1];
    for (const span of spans) expect(span.spanContext().traceId).toBe(traceId);
    const request = byName['disagg.request'];
    expect(request?.parentSpanContext?.spanId).toBe('b7ad6b7169203331');
    const requestId = request?.spanContext().spanId;
    for (const name of ['disagg.prefill', 'disagg.decode', 'disagg.handoff']) {
      expect(byName[name]?.parentSpanContext?.spanId, name).toBe(requestId);
    }
    expect(request?.attributes).toMatchObject({
      'http.route': 'completions',
      'disagg.strategy': 'sequential',
      'disagg.prefill_worker': 'prefill-0',
      'disagg.decode_worker': 'decode-0',
      'disagg.outcome': 'success',
      'http.response.status_code': 200,
      'gen_ai.usage.output_tokens': 4,
    });
    expect(byName['disagg.prefill']?.attributes).toMatchObject({
      'disagg.worker': 'prefill-0',
      'disagg.outcome': 'success',
    });
    expect(byName['disagg.decode']?.attributes).toMatchObject({
      'disagg.worker': 'decode-0',
      'disagg.outcome': 'success',
    });
    expect(byName['disagg.handoff']?.attributes).toMatchObject({ 'disagg.handoff': 'params' });
    const sent = (leg: string) => `00-${traceId}-${byName[leg]?.spanContext().spanId}-01`;
    expect(calls(prefill)[0]?.headers).toMatchObject({ traceparent: sent('disagg.prefill'), tracestate: 'vendor=abc' });
    expect(calls(decode)[0]?.headers).toMatchObject({ traceparent: sent('disagg.decode'), tracestate: 'vendor=abc' });
  });

  it("each request's legs carry that request's own spans, however many came before", async () => {
    const { exporter, tracer } = recorder();
    const { client, prefill, decode } = await setup('vllm', {}, { tracer });
    for (let i = 0; i < 3; i++)
      await client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 });
    const spans = exporter.getFinishedSpans();
    for (const [worker, leg] of [
      [prefill, 'disagg.prefill'],
      [decode, 'disagg.decode'],
    ] as const) {
      const sent = spans
        .filter((span) => span.name === leg)
        .map((span) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
      expect(new Set(sent).size).toBe(3);
      expect(calls(worker).map((call) => call.headers.traceparent)).toEqual(sent);
    }
  });

  it('a request without a traceparent starts a trace of its own', async () => {
    const { exporter, tracer } = recorder();
    const { client, decode } = await setup('sglang', {}, { tracer });
    await client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 });
    const spans = exporter.getFinishedSpans();
    const request = spans.find((span) => span.name === 'disagg.request');
    expect(request?.parentSpanContext).toBeUndefined();
    expect(request?.attributes).toMatchObject({ 'disagg.strategy': 'concurrent' });
    const decodeSpan = spans.find((span) => span.name === 'disagg.decode');
    expect(calls(decode)[0]?.headers.traceparent).toBe(
      `00-${request?.spanContext().traceId}-${decodeSpan?.spanContext().spanId}-01`,
    );
  });

  it("a prefill failure marks the prefill span and the request's as errors, with the length of the worker's words, never the words (they may echo the prompt)", async () => {
    const { exporter, tracer } = recorder();
    const { client } = await setup(
      'vllm',
      { prefill: { fault: { type: 'status', status: 400, message: 'prompt too long for prefill' } } },
      { tracer },
    );
    await expect(client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 })).rejects.toThrow();
    const spans = exporter.getFinishedSpans();
    const prefillSpan = spans.find((span) => span.name === 'disagg.prefill');
    const request = spans.find((span) => span.name === 'disagg.request');
    expect(prefillSpan?.status.code).toBe(2); // ERROR
    expect(prefillSpan?.status.message).toContain("[the worker's text: 27 characters]");
    for (const span of spans) {
      expect(JSON.stringify([span.status, span.events])).not.toContain('prompt too long for prefill');
    }
    expect(request?.status.code).toBe(2);
    expect(request?.attributes).toMatchObject({ 'http.response.status_code': 400, 'disagg.failed_leg': 'prefill' });
    expect(spans.find((span) => span.name === 'disagg.decode')).toBeUndefined();
  });
});
