import { createServer } from 'node:http';
import * as undici from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent, request, sharedDispatcher } from '../../src/http/undici-parts.js';

// The library loads undici's own modules rather than its entry point (which also loads fetch,
// WebSocket and more): they must be the very objects the entry point exports, at the pinned
// version, and `request` must answer as undici's does.
describe('the parts of undici the library loads', () => {
  let server: ReturnType<typeof createServer>;
  let base: string;
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ method: req.method, url: req.url, body, seen: req.headers['x-seen'] ?? null }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('are the objects undici exports: its Agent', () => {
    expect(Agent).toBe(undici.Agent);
  });

  it("the library's own pool is one Agent, made once, and not undici's process-wide global dispatcher", () => {
    expect(sharedDispatcher()).toBeInstanceOf(undici.Agent);
    expect(sharedDispatcher()).toBe(sharedDispatcher());
    expect(sharedDispatcher()).not.toBe(undici.getGlobalDispatcher());
  });

  it("request is a GET by default, with the path and query of the URL, through the library's own pool", async () => {
    const answer = await request(`${base}/v1/models?x=1`);
    expect(answer.statusCode).toBe(200);
    expect(await answer.body.json()).toEqual({ method: 'GET', url: '/v1/models?x=1', body: '', seen: null });
  });

  it('request sends the method, headers and body asked, through the dispatcher given', async () => {
    const agent = new Agent();
    let dispatched = 0;
    const counting = agent.compose((dispatch) => (options, handler) => {
      dispatched++;
      return dispatch(options, handler);
    });
    try {
      const answer = await request(new URL(`${base}/fake/kv/release`), {
        method: 'POST',
        headers: { 'x-seen': 'yes' },
        body: '{"a":1}',
        dispatcher: counting,
      });
      expect(await answer.body.json()).toEqual({
        method: 'POST',
        url: '/fake/kv/release',
        body: '{"a":1}',
        seen: 'yes',
      });
      expect(dispatched).toBe(1);
    } finally {
      await agent.close();
    }
  });

  it('request fails as undici does: a refused connection rejects with its code', async () => {
    await expect(request('http://127.0.0.1:1/health')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});
