// Tracing turned on from the command line, as it ships: the built bin with --otlp-endpoint,
// its optional OpenTelemetry packages loaded from node_modules, exporting to a stand-in
// OTLP/HTTP receiver that collects what a collector would be sent.
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { tracesUrl } from '../../src/cli/otlp-tracing.js';
import { serveBin } from '../support/bin.js';
import { fakeWorkers } from '../support/http.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const fakes = fakeWorkers();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Attribute = { key: string; value: { stringValue?: string; intValue?: string | number } };
type ExportedSpan = { traceId: string; spanId: string; parentSpanId?: string; name: string; attributes: Attribute[] };
type Export = {
  resourceSpans: Array<{ resource: { attributes: Attribute[] }; scopeSpans: Array<{ spans: ExportedSpan[] }> }>;
};

/** A stand-in collector: every POST to /v1/traces, as JSON, with the path it came to. */
async function startReceiver(): Promise<{
  url: string;
  exports: Array<{ path: string; body: Export; headers: Record<string, unknown> }>;
}> {
  const exports: Array<{ path: string; body: Export; headers: Record<string, unknown> }> = [];
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    req.on('end', () => {
      exports.push({ path: req.url ?? '', body: JSON.parse(text) as Export, headers: req.headers });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exports };
}

/** The built bin in front of two vLLM fakes, with `args`; stopped by SIGTERM when asked (or after the test). */
async function serve(args: string[], env: Record<string, string> = {}) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
  const served = await serveBin(['--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url, ...args], {
    cleanups,
    env,
  });
  return { ...served, traces: served.listening.traces as string | undefined, decode };
}

const complete = (url: string, headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
  }).then(async (answer) => {
    expect(answer.status).toBe(200);
    await answer.text();
  });

const spansOf = (exports: Array<{ body: Export }>) =>
  exports.flatMap((each) => each.body.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
const attribute = (attributes: Attribute[], key: string) => attributes.find((each) => each.key === key)?.value;

describe('disagg serve --otlp-endpoint', () => {
  it("exports each request's spans to the collector, in the caller's trace, and sends the rest at shutdown", async () => {
    const receiver = await startReceiver();
    // The standard variable for the collector's headers (an API key, say) is honoured.
    const proxy = await serve(['--otlp-endpoint', receiver.url, '--trace-service-name', 'disagg-test'], {
      OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-key=secret',
    });
    expect(proxy.traces).toBe(`${receiver.url}/v1/traces`);
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    await complete(proxy.url, { traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    await complete(proxy.url);
    // The batch is sent at the latest when the proxy stops.
    expect(await proxy.stop()).toBe(0);
    expect(receiver.exports.map((each) => each.path)).toEqual(receiver.exports.map(() => '/v1/traces'));
    expect(receiver.exports.map((each) => each.headers['x-collector-key'])).toEqual(
      receiver.exports.map(() => 'secret'),
    );
    expect(attribute(receiver.exports[0]?.body.resourceSpans[0]?.resource.attributes ?? [], 'service.name')).toEqual({
      stringValue: 'disagg-test',
    });
    const spans = spansOf(receiver.exports);
    const requests = spans.filter((span) => span.name === 'disagg.request');
    expect(requests).toHaveLength(2);
    // The first continues the client's trace; the second starts one of its own.
    const continued = requests.find((span) => span.traceId === traceId) as ExportedSpan;
    expect(continued.parentSpanId).toBe('00f067aa0ba902b7');
    expect(requests.filter((span) => span.traceId !== traceId)).toHaveLength(1);
    // Both legs are children of the request span, and the worker got the leg's context.
    const legs = spans.filter((span) => span.traceId === traceId && span.parentSpanId === continued.spanId);
    expect(legs.map((span) => span.name).sort()).toEqual(expect.arrayContaining(['disagg.decode', 'disagg.prefill']));
    const decodeLeg = legs.find((span) => span.name === 'disagg.decode') as ExportedSpan;
    expect(proxy.decode.requests[0]?.headers.traceparent).toBe(`00-${traceId}-${decodeLeg.spanId}-01`);
  }, 30_000);

  it('samples new traces at --trace-sample-ratio, and follows a sampled caller', async () => {
    const receiver = await startReceiver();
    const proxy = await serve(['--otlp-endpoint', `${receiver.url}/v1/traces`, '--trace-sample-ratio', '0']);
    await complete(proxy.url);
    await complete(proxy.url, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
    expect(await proxy.stop()).toBe(0);
    const requests = spansOf(receiver.exports).filter((span) => span.name === 'disagg.request');
    expect(requests.map((span) => span.traceId)).toEqual(['0af7651916cd43dd8448eb211c80319c']);
  }, 30_000);

  it('a collector that is down costs no request, delays shutdown by 5 s at most, and the log says spans were dropped', async () => {
    const receiver = await startReceiver();
    const down = receiver.url.replace(/:\d+$/, ':1');
    const proxy = await serve(['--otlp-endpoint', down]);
    await complete(proxy.url);
    expect(await proxy.stop()).toBe(0);
    // The exporter retries within its budget; at shutdown the proxy waits 5 s at most, then says so.
    const dropped = proxy.output.out
      .split('\n')
      .filter((line) => line.includes('Spans still buffered were dropped'))
      .map((line) => JSON.parse(line));
    expect(dropped).toMatchObject([{ level: 40, url: `${down}/v1/traces`, timeoutMs: 5000 }]);
    expect(proxy.output.out).not.toContain('"level":50');
  }, 30_000);

  it('an endpoint that is not an http(s) URL is refused with what to give', async () => {
    const child = spawn(
      process.execPath,
      [
        `${root}/dist/cli.js`,
        'serve',
        '--connector',
        'vllm',
        '--prefill',
        'http://p',
        '--decode',
        'http://d',
        '--otlp-endpoint',
        'collector:4318',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).toBe(2);
    expect(err).toContain(
      '--otlp-endpoint (tracing.otlpEndpoint) must be an http(s) URL such as http://otel-collector:4318',
    );
  });
});

describe('tracesUrl', () => {
  it('adds /v1/traces to a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is read, and keeps a full one', () => {
    expect(tracesUrl('http://collector:4318')).toBe('http://collector:4318/v1/traces');
    expect(tracesUrl('http://collector:4318/')).toBe('http://collector:4318/v1/traces');
    expect(tracesUrl('https://gateway.example/otlp')).toBe('https://gateway.example/otlp/v1/traces');
    expect(tracesUrl('http://collector:4318/v1/traces')).toBe('http://collector:4318/v1/traces');
  });
});
