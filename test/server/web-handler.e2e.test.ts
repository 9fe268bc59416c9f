import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { createHandler, type DisaggHandler, type HandlerOptions } from '../../src/server/index.js';
import type { FakeWorkerOptions } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let handlers: DisaggHandler[] = [];
afterEach(async () => {
  await Promise.all(handlers.map((handler) => handler.close({ gracePeriodMs: 0 })));
  handlers = [];
});

async function setup(
  protocol: 'vllm' | 'sglang',
  workers: { prefill?: Partial<FakeWorkerOptions>; decode?: Partial<FakeWorkerOptions> } = {},
  options: Partial<HandlerOptions> = {},
) {
  const prefill = await fakes.start({ role: 'prefill', protocol, ...workers.prefill });
  const decode = await fakes.start({ role: 'decode', protocol, tokens: 4, ...workers.decode });
  const logger = recordingLogger();
  const handler = createHandler({
    connector: protocol,
    prefill: [{ url: prefill.url, ...(protocol === 'sglang' ? { bootstrapPort: prefill.bootstrapPort } : {}) }],
    decode: [{ url: decode.url }],
    logger: logger.logger,
    ...options,
  });
  handlers.push(handler);
  return { handler, prefill, decode, logs: logger.records };
}

const post = (path: string, body: unknown) =>
  new Request(`http://app.test${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

/** The SSE events of a body, as their data lines. */
async function events(response: Response): Promise<string[]> {
  const text = await response.text();
  return text
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => block);
}

describe('createHandler: the proxy as (Request) => Promise<Response>', () => {
  it('answers a streamed chat completion as SSE, with the proxy headers, ending with [DONE]', async () => {
    const { handler } = await setup('vllm');
    const response = await handler(
      post('/v1/chat/completions', { model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    );
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-0');
    expect(response.headers.get('x-disagg-decode-worker')).toBe('decode-0');
    const blocks = await events(response);
    expect(blocks.at(-1)).toBe('data: [DONE]');
    const text = blocks
      .slice(0, -1)
      .map((block) => JSON.parse(block.slice('data: '.length)).choices[0]?.delta?.content ?? '')
      .join('');
    expect(text).toBe('tok0 tok1 tok2 tok3 ');
  });

  it('answers whole, and refuses bad input and unknown routes before any worker, in the OpenAI shape', async () => {
    const { handler, prefill } = await setup('vllm');
    const whole = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 4 }));
    expect(whole.status).toBe(200);
    expect(((await whole.json()) as { choices: Array<{ text: string }> }).choices[0]?.text).toBe(
      'tok0 tok1 tok2 tok3 ',
    );
    const bad = await handler(post('/v1/completions', '{'));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    const missing = await handler(new Request('http://app.test/v2/nothing'));
    expect(missing.status).toBe(404);
    const ready = await handler(new Request('http://app.test/ready'));
    expect(await ready.json()).toMatchObject({ ready: true, prefill_workers: 1, decode_workers: 1 });
    const head = await handler(new Request('http://app.test/health', { method: 'HEAD' }));
    expect(head.status).toBe(200);
    expect(head.body).toBeNull();
    expect(prefill.requests.filter((request) => request.path.startsWith('/v1/'))).toHaveLength(1);
  });

  it('serves under basePath, and refuses a basePath that is not a clean path', async () => {
    const { handler } = await setup('vllm', {}, { basePath: '/llm' });
    const response = await handler(post('/llm/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(response.status).toBe(200);
    await response.text();
    // The base path alone is the root; a path outside it is taken as it is.
    const root = await handler(new Request('http://app.test/llm'));
    expect([root.status, ((await root.json()) as { error: { message: string } }).error.message]).toEqual([
      404,
      'No route GET /',
    ]);
    const outside = await handler(new Request('http://app.test/health'));
    expect(outside.status).toBe(200);
    await outside.text();
    const beside = await handler(post('/llmx/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect([beside.status, ((await beside.json()) as { error: { message: string } }).error.message]).toEqual([
      404,
      'No route POST /llmx/v1/completions',
    ]);
    expect(() => createHandler({ connector: 'vllm', prefill: [], decode: [], basePath: 'llm/' })).toThrow(
      'basePath must be a path that starts with / and does not end with one',
    );
  });

  it('backpressure: a reader that stops pulling stops the reads from decode; pulling again resumes', async () => {
    const { handler, decode } = await setup('vllm', { decode: { tokens: 300 } });
    const response = await handler(
      post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 300, stream: true }),
    );
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.read();
    // Time passes for the proxy: a second request is served to its end meanwhile. The first
    // has had every chance to run ahead, yet it passed on only what its reader pulled, and a
    // chunk or two (the relay's inter-token count covers both requests).
    await eventually(() => decode.requests.some((request) => request.completed), 'decode wrote its answer');
    const other = await handler(
      post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 300, stream: true }),
    );
    const otherChunks = (await other.text()).split('\n\n').filter((block) => block.startsWith('data: {')).length;
    const metrics = await (await handler(new Request('http://app.test/metrics'))).text();
    const written = Number(/disagg_inter_token_latency_seconds_count (\d+)/.exec(metrics)?.[1]);
    expect(written - (otherChunks - 1)).toBeLessThanOrEqual(4);
    let text = '';
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
    expect(text.match(/"text":"tok\d+ "/g)).toHaveLength(298);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('a reader that cancels the body mid-stream is a client that left: decode is stopped, the KV claimed', async () => {
    const { handler, decode } = await setup('vllm', { decode: { tokens: 1000, tokenIntervalMs: 5 } });
    const response = await handler(
      post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 1000, stream: true }),
    );
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.cancel();
    await eventually(() => decode.requests.some((request) => request.aborted), 'decode stopped');
    // fakeWorkers checks after the test that no KV is left held or stranded.
  });

  it('an aborted request signal is a client that left too', async () => {
    const { handler, decode } = await setup('vllm', { decode: { tokens: 1000, tokenIntervalMs: 5 } });
    const controller = new AbortController();
    const request = new Request('http://app.test/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 1000, stream: true }),
      signal: controller.signal,
    });
    const response = await handler(request);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    controller.abort();
    await eventually(() => decode.requests.some((call) => call.aborted), 'decode stopped');
  });

  it('a prefill failure mid-stream is one SSE error event naming the leg, without [DONE]', async () => {
    const { handler } = await setup('sglang', {
      prefill: { fault: { type: 'late-failure', message: 'prefill worker lost its GPU', afterMs: 20 } },
      decode: { tokens: 50, tokenIntervalMs: 5 },
    });
    const response = await handler(
      post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 50, stream: true }),
    );
    const blocks = await events(response);
    const errors = blocks.filter((block) => block.startsWith('event: error'));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain('"leg":"prefill"');
    expect(blocks.at(-1)).toBe(errors[0]);
    expect(blocks).not.toContain('data: [DONE]');
  });

  it('close(): new requests get a 503, and the handler lets go of its workers', async () => {
    const { handler } = await setup('vllm');
    await handler.close({ gracePeriodMs: 0 });
    const response = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(response.status).toBe(503);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      'The router is shutting down',
    );
    handlers = handlers.filter((one) => one !== handler);
  });

  it('with an API key, a request without it is a 401 in the OpenAI shape, logged without a client address (a Request has none)', async () => {
    const { handler, prefill, logs } = await setup('vllm', {}, { apiKey: 'sk-app-000001' });
    const refused = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    expect(prefill.requests.filter((call) => call.path === '/v1/completions')).toEqual([]);
    const logged = logs.find((log) => log.message?.includes('API key'));
    expect(logged?.fields).toMatchObject({ client: undefined, path: '/v1/completions' });
  });

  it('close() with a drain delay serves requests through it (the host stops sending them), then refuses', async () => {
    const { handler } = await setup('vllm');
    const closing = handler.close({ gracePeriodMs: 0, drainDelayMs: 300 });
    const during = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(during.status).toBe(200);
    expect(((await during.json()) as { choices: Array<{ text: string }> }).choices[0]?.text).toBe('tok0 tok1 ');
    await closing;
    const after = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(after.status).toBe(503);
    await after.text();
    handlers = handlers.filter((one) => one !== handler);
  });

  it("the request signal's abort listener is removed when the answer closes; a signal aborted before the call is a client already gone", async () => {
    const { handler, decode } = await setup('vllm');
    const controller = new AbortController();
    const request = new Request('http://app.test/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 2 }),
      signal: controller.signal,
    });
    const response = await handler(request);
    expect(response.status).toBe(200);
    await response.text();
    await eventually(() => getEventListeners(request.signal, 'abort').length === 0, 'the abort listener removed');

    const gone = new Request('http://app.test/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 2, stream: true }),
      signal: AbortSignal.abort(),
    });
    const calls = decode.requests.length;
    const left = await handler(gone);
    await expect(left.text()).rejects.toThrow();
    expect(getEventListeners(gone.signal, 'abort')).toHaveLength(0);
    expect(decode.requests.slice(calls).every((call) => call.aborted)).toBe(true);
  });

  it('close() without a grace period gives a stream under way the configured one to finish', async () => {
    const { handler } = await setup('vllm', { decode: { tokens: 20, tokenIntervalMs: 5 } });
    const response = await handler(
      post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 20, stream: true }),
    );
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const closed = handler.close();
    let text = '';
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    await closed;
    expect(text).toContain('data: [DONE]');
    handlers = handlers.filter((one) => one !== handler);
  });

  it('the first request starts the handler: workers that DNS discovery finds serve it', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const handler = createHandler({
      connector: 'vllm',
      prefill: [],
      decode: [],
      discovery: {
        prefillDns: `http://prefill.test:${new URL(prefill.url).port}`,
        decodeDns: `http://decode.test:${new URL(decode.url).port}`,
      },
      dnsLookup: async () => [{ address: '127.0.0.1' }],
      logger: recordingLogger().logger,
    });
    handlers.push(handler);
    const response = await handler(post('/v1/completions', { model: 'fake-model', prompt: 'hi', max_tokens: 2 }));
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 ' }] });
    expect(prefill.requests).toHaveLength(1);
  });

  it('start() runs discovery and probes before any request; calling it again is the same start', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const handler = createHandler({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [],
      discovery: { decodeDns: `http://decode.test:${new URL(decode.url).port}` },
      dnsLookup: async () => [{ address: '127.0.0.1' }],
      logger: recordingLogger().logger,
    });
    handlers.push(handler);
    const first = handler.start();
    expect(handler.start()).toBe(first);
    await first;
    // Found by DNS, added out of rotation, put in by its first probe.
    expect(handler.decodeWorkers.available.map((worker) => worker.url)).toEqual([
      `http://127.0.0.1:${new URL(decode.url).port}`,
    ]);
  });
});
