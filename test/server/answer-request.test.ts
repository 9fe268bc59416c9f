import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { vllmNixl } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import type { Controller } from '../../src/runtime/controller.js';
import { answerFetch, answerNode } from '../../src/server/answer-request.js';
import type { FakeWorkerOptions } from '../../src/testing/index.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
});

async function flowOver(decodeOptions: Partial<FakeWorkerOptions> = {}) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2, ...decodeOptions });
  const prefillWorkers = new WorkerPool([{ url: prefill.url }]);
  const decodeWorkers = new WorkerPool([{ url: decode.url }]);
  const engine = httpEngine();
  const run = (body: Record<string, unknown>, context: Controller) =>
    disaggregate({
      request: body,
      context,
      connector: vllmNixl,
      prefill: engine,
      decode: engine,
      prefillWorkers,
      decodeWorkers,
      usage: 'always',
    });
  return { prefill, decode, decodeWorkers, run };
}

const post = (body: string, headers: Record<string, string> = {}) =>
  new Request('http://router.test/v1/completions', { method: 'POST', body, headers });

describe('answerFetch: one request read, checked, run and answered', () => {
  it('a streamed request as SSE, a whole one as JSON, each with the usage the workers reported', async () => {
    const { run } = await flowOver();
    const streamed = await answerFetch(post('{"model":"m","prompt":"hi","stream":true}'), 'completions', run);
    expect(streamed.headers.get('content-type')).toBe('text/event-stream');
    const text = await streamed.text();
    expect(text).toContain('tok1');
    expect(text).not.toContain('"usage"'); // asked on the client's behalf, not shown to it
    expect((await streamed.result).usage).toMatchObject({ completion_tokens: 2 });
    const whole = await answerFetch(post('{"model":"m","prompt":"hi"}'), 'completions', run);
    expect(await whole.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 ' }], usage: { completion_tokens: 2 } });
  });

  it('a body that is not JSON, a field out of range, a body too large: a 4xx before any worker', async () => {
    const { run, prefill } = await flowOver();
    const notJson = await answerFetch(post('{"model"'), 'completions', run);
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ error: { message: expect.stringContaining('not JSON') } });
    const range = await answerFetch(post('{"model":"m","prompt":"hi","max_tokens":-1}'), 'completions', run);
    expect(range.status).toBe(400);
    expect(await range.json()).toMatchObject({ error: { param: 'max_tokens' } });
    const large = await answerFetch(post(JSON.stringify({ prompt: 'x'.repeat(200) })), 'completions', run, {
      maxBodyBytes: 100,
    });
    expect(large.status).toBe(413);
    expect(prefill.requests).toHaveLength(0);
  });

  it("a run that throws, and a prefill that fails, are answered with their status; no worker's address in it", async () => {
    const { run, prefill } = await flowOver();
    const thrown = await answerFetch(post('{"model":"m","prompt":"hi"}'), 'completions', () => {
      throw new TypeError('my router has a bug');
    });
    expect(thrown.status).toBe(500);
    prefill.setFault({ type: 'status', status: 503, message: `busy at ${prefill.url}` });
    const failed = await answerFetch(post('{"model":"m","prompt":"hi","stream":true}'), 'completions', run);
    expect(failed.status).toBe(502);
    const body = await failed.json();
    expect(body).toMatchObject({ error: { leg: 'prefill' } });
    expect(JSON.stringify(body)).not.toContain('127.0.0.1');
    expect(prefill.ledger.outstanding()).toEqual([]);
  });
});

describe('a client that leaves', () => {
  it('stops decode once it took the KV; prefill is never cancelled and no KV is left held', async () => {
    const { prefill, decode, decodeWorkers, run } = await flowOver({ tokens: 50, tokenIntervalMs: 5 });
    const response = await answerFetch(post('{"model":"m","prompt":"hi","stream":true}'), 'completions', run);
    const reader = response.body?.getReader();
    await reader?.read();
    await reader?.cancel();
    await eventually(
      () => decodeWorkers.inFlight(decodeWorkers.workers[0] as { url: string }) === 0,
      'decode released',
    );
    expect(prefill.ledger.claimed()).toHaveLength(1);
    expect(prefill.ledger.outstanding()).toEqual([]);
    expect(decode.requests[0]?.body).toMatchObject({ kv_transfer_params: expect.any(Object) });
  });
});

describe('answerNode: the same on a Node request and response', () => {
  it('reads the body itself, or takes one a body parser read', async () => {
    const { run } = await flowOver();
    const server = createServer((req, res) => {
      // As express.json() leaves it: the stream read, the body parsed.
      if (req.headers['x-parsed'] === 'yes') {
        let text = '';
        req.on('data', (chunk) => (text += chunk));
        req.on('end', () => {
          (req as typeof req & { body: unknown }).body = JSON.parse(text);
          void answerNode(req, res, 'completions', run);
        });
      } else void answerNode(req, res, 'completions', run);
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/v1/completions`;
    for (const parsed of ['no', 'yes']) {
      const answer = await fetch(url, {
        method: 'POST',
        headers: { 'x-parsed': parsed },
        body: '{"model":"m","prompt":"hi","max_tokens":2}',
      });
      expect(await answer.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 ' }] });
    }
    const bad = await fetch(url, { method: 'POST', body: '[1]' });
    expect(bad.status).toBe(400);
  });
});
