// A worker at a wrong URL (review A-10): what answers there is not an engine, so its 404s are
// the router's fault, never relayed to clients as their own.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const proxies: ProxyServer[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  await Promise.all(servers.splice(0).map((server) => new Promise((done) => server.close(done))));
});

/** Something that is not an engine: Go's `404 page not found` for every path but, if `healthy`, `/health`. */
async function notAnEngine(healthy: boolean): Promise<string> {
  const server = createServer((req, res) => {
    if (healthy && req.url === '/health') res.writeHead(200).end();
    else res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found');
  });
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function proxyOver(prefill: string[], decode: string) {
  const logger = recordingLogger();
  const proxy = createProxy({
    connector: 'vllm',
    prefill: prefill.map((url) => ({ url })),
    decode: [{ url: decode }],
    logger: logger.logger,
    selection: 'round-robin',
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  return { proxy, url, logs: logger.records, client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 }) };
}

describe('a worker at a wrong URL', () => {
  it('whose /health answers 404 is out of rotation before the proxy listens, logged with the hint, and no client meets it', async () => {
    const wrong = await notAnEngine(false);
    const good = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 });
    const { proxy, logs, client } = await proxyOver([wrong, good.url], decode.url);
    const [first] = proxy.prefillWorkers.workers;
    expect(proxy.prefillWorkers.isAvailable(first as { url: string })).toBe(false);
    expect(logs).toContainEqual({
      level: 'warn',
      fields: expect.objectContaining({
        status: 404,
        hint: 'the worker has no /health: is the URL the root of a vLLM or SGLang server?',
      }),
      message: 'Worker failed its health check (GET /health answered 404); out of rotation',
    });
    for (let i = 0; i < 3; i++) {
      const completion = await client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 });
      expect(completion.choices[0]?.text).toBeTruthy();
    }
  });

  it('whose /health passes but /v1/completions answers 404: the request goes to another worker; with none, a 502 naming no worker or path', async () => {
    const wrong = await notAnEngine(true);
    const good = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 });
    const both = await proxyOver([wrong, good.url], decode.url);
    // Round-robin: the first request meets the wrong worker first, and is retried on the good one.
    for (let i = 0; i < 2; i++) {
      const completion = await both.client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 });
      expect(completion.choices[0]?.text).toBeTruthy();
    }
    const alone = await proxyOver([wrong], decode.url);
    const failure = await alone.client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 }).then(
      () => undefined,
      (error: unknown) => error as { status?: number; message?: string },
    );
    expect(failure?.status).toBe(502);
    expect(failure?.message).not.toMatch(/prefill-0|127\.0\.0\.1|\/v1\/completions|page not found/);
  });
});
