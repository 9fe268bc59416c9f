// The examples of docs/embedding.md, run: the handler in a Hono app and in a plain node:http
// server, the fastify plugin beside the app's own route and behind its auth hook; each driven by
// the official openai client through a whole streamed request, a client that leaves mid-stream,
// and a prefill failure mid-stream.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline, Readable } from 'node:stream';
import { serve } from '@hono/node-server';
import Fastify, { type FastifyInstance } from 'fastify';
import { Hono } from 'hono';
import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { disaggPlugin } from '../../src/fastify/index.js';
import { createHandler, type DisaggHandler } from '../../src/server/index.js';
import type { FakeWorker, FakeWorkerOptions } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  cleanups = [];
});

async function workers(decode: Partial<FakeWorkerOptions> = {}, prefill: Partial<FakeWorkerOptions> = {}) {
  const p = await fakes.start({ role: 'prefill', protocol: 'sglang', ...prefill });
  const d = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 6, ...decode });
  return {
    prefill: p,
    decode: d,
    options: {
      connector: 'sglang' as const,
      prefill: [{ url: p.url, bootstrapPort: p.bootstrapPort }],
      decode: [{ url: d.url }],
      logger: recordingLogger().logger,
    },
  };
}

/** `examples`: each mounts the proxy and answers with the base URL of the OpenAI routes. */
const mounts: Record<string, (options: Parameters<typeof createHandler>[0]) => Promise<string>> = {
  async hono(options) {
    const disagg = createHandler({ ...options, basePath: '/llm' });
    const app = new Hono();
    app.get('/hello', (c) => c.text('hello from the app'));
    app.all('/llm/*', (c) => disagg(c.req.raw));
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await new Promise<void>((resolve) => server.once('listening', resolve));
    cleanups.push(async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await disagg.close({ gracePeriodMs: 0 });
    });
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/llm/v1`;
  },

  async 'node:http'(options) {
    const disagg: DisaggHandler = createHandler(options);
    const server = createServer(async (req, res) => {
      if (req.url === '/hello') return res.end('hello from the app');
      // Node request -> WHATWG Request; the client leaving aborts the request's signal.
      const controller = new AbortController();
      res.on('close', () => controller.abort());
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
      const request = new Request(`http://${req.headers.host}${req.url}`, {
        method: req.method ?? 'GET',
        headers: req.headers as Record<string, string>,
        signal: controller.signal,
        ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream, duplex: 'half' } : {}),
      } as RequestInit);
      const response = await disagg(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body === null) return res.end();
      // pipeline keeps backpressure (the body is pulled as fast as the socket takes it) and
      // ends the connection when the proxy cuts the answer.
      pipeline(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream), res, () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await disagg.close({ gracePeriodMs: 0 });
    });
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  },

  async fastify(options) {
    // Streaming answers: close() ends connections that departed clients keep open.
    const app: FastifyInstance = Fastify({ forceCloseConnections: true });
    app.get('/hello', async () => 'hello from the app');
    await app.register(disaggPlugin, { ...options, prefix: '/llm', gracePeriodMs: 0 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/llm/v1`;
  },
};

for (const [name, mount] of Object.entries(mounts)) {
  describe(`embedded in ${name}`, () => {
    it('a whole streamed request through the official openai client, beside the app’s own route', async () => {
      const { options } = await workers();
      const baseURL = await mount(options);
      const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'fake-model',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      expect(text).toBe('tok0 tok1 tok2 tok3 tok4 tok5 ');
      const hello = await fetch(new URL('/hello', baseURL));
      expect(await hello.text()).toBe('hello from the app');
    });

    it('a whole answer, and a bad request refused with a 400 before any worker is called', async () => {
      const { options, prefill } = await workers();
      const baseURL = await mount(options);
      const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0 });
      const answer = await client.completions.create({ model: 'fake-model', prompt: 'hi', max_tokens: 3 });
      expect(answer.choices[0]?.text).toBe('tok0 tok1 tok2 ');
      await expect(
        client.completions.create({ model: 'fake-model', prompt: 'hi', max_tokens: 3, n: 0 }),
      ).rejects.toMatchObject({ status: 400 });
      const bad = await fetch(`${baseURL}/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"model": ',
      });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
      expect(prefill.requests.filter((request) => request.path.startsWith('/v1/'))).toHaveLength(1);
    });

    it('a client that leaves mid-stream: decode is stopped and its KV claimed', async () => {
      const { options, decode } = await workers({ tokens: 2000, tokenIntervalMs: 5 });
      const baseURL = await mount(options);
      const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0 });
      const controller = new AbortController();
      const stream = await client.completions.create(
        { model: 'fake-model', prompt: 'hi', max_tokens: 2000, stream: true },
        { signal: controller.signal },
      );
      let chunks = 0;
      try {
        for await (const _ of stream) {
          chunks += 1;
          if (chunks === 3) {
            controller.abort();
            // A chunk the SDK had already read may still come out of the loop: not ours to count.
            break;
          }
        }
      } catch {
        // The SDK may end the loop or throw on its own abort; either is the client leaving.
      }
      expect(chunks).toBe(3);
      await eventually(() => decodeAborted(decode), 'decode stopped');
      // fakeWorkers checks that no KV is left held or stranded.
    });

    it('backpressure: a client that never reads is not buffered for; past the slow-client limit decode is stopped', async () => {
      const { options, decode } = await workers({ tokens: 200_000 });
      const baseURL = await mount({ ...options, slowClientTimeoutMs: 200 });
      const answer = await request(`${baseURL}/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'fake-model', prompt: 'hi', stream: true }),
      });
      expect(answer.statusCode).toBe(200);
      // Never read: the socket fills, the proxy stops reading decode, waits 200 ms, gives up.
      await eventually(() => decodeAborted(decode), 'decode stopped', 2000);
      answer.body.destroy();
    }, 20_000);

    it('a prefill failure mid-stream: one SSE error event naming the leg, then the end', async () => {
      const { options } = await workers(
        { tokens: 60, tokenIntervalMs: 5 },
        { fault: { type: 'late-failure', message: 'prefill lost its GPU', afterMs: 20 } },
      );
      const baseURL = await mount(options);
      const response = await fetch(`${baseURL}/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 60, stream: true }),
      });
      const text = await response.text();
      expect(text.match(/event: error/g)).toHaveLength(1);
      expect(text).toContain('"leg":"prefill"');
      expect(text).not.toContain('[DONE]');
      const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0 });
      const stream = await client.completions.create({
        model: 'fake-model',
        prompt: 'hi',
        max_tokens: 60,
        stream: true,
      });
      await expect(
        (async () => {
          for await (const _ of stream) {
            // read until the error
          }
        })(),
      ).rejects.toThrow(/prefill/);
    });
  });
}

function decodeAborted(decode: FakeWorker): boolean {
  return decode.requests.some((request) => request.aborted);
}

describe('the fastify plugin with the app', () => {
  it("runs behind the app's hooks (auth first), logs through the app's logger, and joins its metrics registry", async () => {
    const { options } = await workers();
    const { Registry, Counter } = await import('prom-client');
    const appRegistry = new Registry();
    new Counter({ name: 'app_requests_total', help: 'the app’s own', registers: [appRegistry] }).inc();
    const lines: string[] = [];
    const app = Fastify({
      forceCloseConnections: true,
      logger: { level: 'info', stream: { write: (line: string) => lines.push(line) } },
    });
    app.addHook('onRequest', async (request, reply) => {
      if (request.headers.authorization !== 'Bearer app-key') {
        await reply.code(401).send({ error: { message: 'the app says no', type: 'invalid_request_error' } });
      }
    });
    const { logger: _logger, ...proxy } = options;
    await app.register(disaggPlugin, { ...proxy, prefix: '/llm', metricsRegistry: appRegistry });
    app.get('/metrics', async (_request, reply) =>
      reply.type(appRegistry.contentType).send(await appRegistry.metrics()),
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const refused = await fetch(`${base}/llm/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi' }),
    });
    expect(refused.status).toBe(401);
    const client = new OpenAI({ baseURL: `${base}/llm/v1`, apiKey: 'app-key', maxRetries: 0 });
    const answer = await client.completions.create({ model: 'fake-model', prompt: 'hi', max_tokens: 2 });
    expect(answer.choices[0]?.text).toBe('tok0 tok1 ');
    expect(lines.some((line) => line.includes('"route":"completions"'))).toBe(true);
    const metrics = await (await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer app-key' } })).text();
    expect(metrics).toContain('app_requests_total 1');
    expect(metrics).toContain('disagg_requests_total{route="completions",status="200",outcome="success"');
    const wrongMethod = await fetch(`${base}/llm/v1/completions`, { headers: { authorization: 'Bearer app-key' } });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
  });

  it('with an admin key, the admin API under the prefix: a worker added there takes requests', async () => {
    const { options } = await workers();
    const app = Fastify({ forceCloseConnections: true });
    // Least in flight: the same prompt four times would stay where its prefix is, by default.
    await app.register(disaggPlugin, {
      ...options,
      prefix: '/llm',
      adminKey: 'admin-secret',
      selection: 'least-in-flight',
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/llm`;
    const extra = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 6 });
    const added = await fetch(`${base}/admin/workers`, {
      method: 'POST',
      headers: { authorization: 'Bearer admin-secret', 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'decode', url: extra.url, name: 'decode-extra' }),
    });
    expect(added.status).toBe(201);
    const list = (await (
      await fetch(`${base}/admin/workers`, { headers: { authorization: 'Bearer admin-secret' } })
    ).json()) as { decode: Array<{ name: string }> };
    expect(list.decode.map((worker) => worker.name)).toEqual(['decode-0', 'decode-extra']);
    expect((await fetch(`${base}/admin/workers`)).status).toBe(401);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'x', maxRetries: 0 });
    for (let i = 0; i < 4; i++) await client.completions.create({ model: 'fake-model', prompt: 'hi', max_tokens: 2 });
    expect(extra.requests.filter((request) => request.path === '/v1/completions').length).toBeGreaterThan(0);
  });
});
