import { describe, expect, it, vi } from 'vitest';
import { RequestTrace, Tracing } from '../../src/server/observability/tracing.js';

// As on a machine where the optional peer is not installed.
vi.mock('@opentelemetry/api', () => {
  throw new Error("Cannot find package '@opentelemetry/api'");
});

describe('Tracing without @opentelemetry/api', () => {
  it("is off, even with a tracer given, and the client's trace context still reaches the workers", async () => {
    const tracer = { startSpan: vi.fn() };
    const tracing = await Tracing.load(tracer);
    expect(tracing).toBeUndefined();
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    expect(new RequestTrace(tracing, { traceparent }, (w) => w.url, {}).headersFor('decode', { url: 'd0' })).toEqual({
      traceparent,
    });
    expect(tracer.startSpan).not.toHaveBeenCalled();
  });
});
