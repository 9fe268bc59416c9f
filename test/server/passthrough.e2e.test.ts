import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { proxyHarness } from '../support/proxy.js';

const { setup, cluster } = proxyHarness();

const post = async (url: string, body: unknown, headers: Record<string, string> = {}) => {
  const answer = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: answer.statusCode, headers: answer.headers, text: await answer.body.text() };
};

describe('passthrough endpoints: embeddings, rerank and score go to one decode worker, answered as it answered', () => {
  it('the openai client embeds through disagg serve: a decode worker answers, prefill is never called', async () => {
    const { client, prefill, decode } = await setup('vllm');
    const answer = await client.embeddings.create({ model: 'fake-model', input: ['one', 'two'] });
    expect(answer.data.map((each) => each.index)).toEqual([0, 1]);
    expect(answer.data[0]?.embedding).toHaveLength(8);
    expect(answer.usage.prompt_tokens).toBeGreaterThan(0);
    expect(decode.requests.map((each) => each.path)).toEqual(['/v1/embeddings']);
    expect(prefill.requests).toEqual([]);
  });

  it("the worker's answer reaches the client, the worker named by its name (never its address) and given the request id", async () => {
    const { url, decode } = await setup('vllm');
    const sent = await post(`${url}/v1/rerank`, {
      model: 'fake-model',
      query: 'q',
      documents: ['a', 'b', 'c'],
      top_n: 2,
    });
    expect(sent.status).toBe(200);
    const body = JSON.parse(sent.text) as { results: Array<{ index: number; relevance_score: number }> };
    expect(body.results).toHaveLength(2);
    expect(body.results[0]?.relevance_score).toBeGreaterThanOrEqual(body.results[1]?.relevance_score as number);
    expect(sent.headers['x-disagg-decode-worker']).toBe('decode-0');
    expect(decode.requests[0]?.requestId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("a 4xx of the worker's own is relayed unchanged: its status and its words", async () => {
    const { url } = await setup('vllm');
    // A score needs two texts; which fields name them is the worker's business (they changed across versions).
    const refused = await post(`${url}/v1/score`, { model: 'fake-model', text_1: 'a' });
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.text)).toEqual({
      object: 'error',
      error: { message: 'text_2: Field required', type: 'BadRequestError', code: 400 },
    });
    const scored = await post(`${url}/v1/score`, { model: 'fake-model', text_1: 'a', text_2: ['b', 'c'] });
    expect(JSON.parse(scored.text)).toMatchObject({ object: 'list', data: [{ index: 0 }, { index: 1 }] });
  });

  it('a body that is not an embeddings request is a 400 naming the field, before any worker', async () => {
    const { url, decode } = await setup('vllm');
    const refused = await post(`${url}/v1/embeddings`, { model: 'fake-model' });
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.text)).toMatchObject({
      error: { param: 'input', message: '/v1/embeddings needs an input (or messages)' },
    });
    const streamed = await post(`${url}/v1/embeddings`, { model: 'fake-model', input: 'x', stream: true });
    expect(streamed.status).toBe(400);
    expect(decode.requests).toEqual([]);
  });

  it('a worker that cannot be reached is passed over: the request is answered by another, and the failure charged', async () => {
    const { url, decode, logs } = await cluster('vllm', { prefill: [{}], decode: [{}, {}] });
    await decode[0]?.close();
    for (let i = 0; i < 2; i++) {
      const answer = await post(`${url}/v1/embeddings`, { model: 'fake-model', input: `x${i}` });
      expect(answer.status).toBe(200);
      expect(answer.headers['x-disagg-decode-worker']).toBe('decode-1');
    }
    expect(logs.some((log) => log.message?.startsWith('Retrying the request on another worker'))).toBe(true);
  });

  it("a worker's 5xx is answered in the API's error shape, without the worker's address", async () => {
    const { url, decode } = await setup('vllm', {}, { retry: { maxRetries: 0 } });
    decode.setFault({ type: 'status', status: 500, stage: 'front', message: `boom at ${decode.url}` });
    const failed = await post(`${url}/v1/embeddings`, { model: 'fake-model', input: 'x' });
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(failed.text).not.toContain(decode.url.replace('http://', ''));
    expect(JSON.parse(failed.text)).toMatchObject({ error: { message: expect.any(String) } });
  });

  it("a tenant's limits hold on a passthrough as on a generation: over its requests per minute, a 429 before any worker", async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: t, keys: [sk-t-00000001], requestsPerMinute: 1 }\n');
    const { url, decode } = await setup('vllm', {}, { tenantsFile: file });
    const key = { authorization: 'Bearer sk-t-00000001' };
    expect((await post(`${url}/v1/embeddings`, { input: 'a' }, key)).status).toBe(200);
    const over = await post(`${url}/v1/embeddings`, { input: 'b' }, key);
    expect(over.status).toBe(429);
    expect(over.headers['retry-after']).toBeDefined();
    expect(decode.requests).toHaveLength(1);
  });

  it('each passthrough request is logged once with its route and worker, and counted under its route', async () => {
    const { url, logs } = await setup('vllm');
    await post(`${url}/v1/rerank`, { query: 'q', documents: ['a'] });
    const line = logs.find((log) => log.message === 'request finished');
    expect(line?.fields).toMatchObject({
      route: 'rerank',
      decodeWorker: 'decode-0',
      decodeUrl: expect.stringMatching(/^http:/),
      status: 200,
      outcome: 'success',
    });
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toMatch(/route="rerank"/);
  });
});
