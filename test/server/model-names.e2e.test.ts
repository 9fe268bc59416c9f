// A request's model name, tried as a hostile client would (the security pass of round 5):
// engines that serve any name (SGLang's, the fakes) made each one a metrics label, of any size.
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { eventuallyAsync } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

const post = async (url: string, path: string, body: unknown) => {
  const answer = await request(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: answer.statusCode, body: (await answer.body.json()) as Record<string, unknown> };
};

const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });

/** The `model` label values of disagg_tokens_total. */
async function modelLabels(url: string): Promise<Set<string>> {
  const text = await (await request(`${url}/metrics`)).body.text();
  return new Set([...text.matchAll(/^disagg_tokens_total\{[^}]*model="([^"]*)"/gm)].map((match) => match[1] as string));
}

describe('a model name is checked before any worker', () => {
  it('longer than 256 characters, or with a space or a control character: a 400 naming model and its limit, on every API in its own shape', async () => {
    const { url, prefill, decode } = await setup('sglang');
    for (const model of ['m'.repeat(257), 'm'.repeat(65_536), 'two words', 'line\r\nbreak', 'nul\u0000', 'tab\tbed']) {
      const answer = await post(url, '/v1/chat/completions', chat(model));
      expect(answer.status, JSON.stringify(model.slice(0, 12))).toBe(400);
      expect(answer.body.error).toMatchObject({ param: 'model', type: 'invalid_request_error' });
    }
    expect(
      ((await post(url, '/v1/chat/completions', chat('m'.repeat(300)))).body.error as { message: string }).message,
    ).toContain('at most 256 characters');
    const responses = await post(url, '/v1/responses', { model: 'a b', input: 'hi' });
    expect(responses.status).toBe(400);
    const messages = await post(url, '/v1/messages', {
      model: 'a\nb',
      max_tokens: 4,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(messages).toMatchObject({ status: 400, body: { type: 'error', error: { type: 'invalid_request_error' } } });
    const embeddings = await post(url, '/v1/embeddings', { model: 'm'.repeat(1_000), input: 'hi' });
    expect(embeddings.status).toBe(400);
    expect(prefill.requests.length + decode.requests.length).toBe(0);
  });

  it('the names real fleets serve pass: Hugging Face ids, served paths, adapters, tags', async () => {
    const { url } = await setup('sglang');
    for (const model of [
      'meta-llama/Llama-3.1-8B-Instruct',
      '/models/qwen3-8b',
      'sql-lora@v2',
      'llama3:8b',
      'Qwen/Qwen3-0.6B+adapter=x~1',
    ]) {
      expect((await post(url, '/v1/chat/completions', chat(model))).status, model).toBe(200);
    }
  });
});

describe('metrics label only the models the router knows', () => {
  it('200 distinct model names a worker serves but nobody configured or listed add no label value: they count as other', async () => {
    const { url } = await setup('sglang');
    expect((await post(url, '/v1/chat/completions', chat('fake-model'))).status).toBe(200);
    for (let i = 0; i < 200; i++) {
      const model = i % 2 === 0 ? `bogus-${i}` : `../../../../etc/passwd-${i}`;
      expect((await post(url, '/v1/chat/completions', chat(model))).status).toBe(200);
    }
    expect(await modelLabels(url)).toEqual(new Set(['fake-model', 'other']));
  });

  it('a LoRA adapter a worker lists keeps its own label', async () => {
    const { url } = await setup('vllm', { decode: { lora: { max: 2, running: ['sql-lora'] } } });
    // The workers' models are read at start and at every round of probes.
    await eventuallyAsync(
      async () => (await post(url, '/v1/chat/completions', chat('sql-lora'))).status === 200,
      'sql-lora served',
    );
    await eventuallyAsync(async () => (await modelLabels(url)).has('sql-lora'), 'sql-lora labelled');
    expect((await post(url, '/v1/chat/completions', chat('not-an-adapter'))).status).toBe(200);
    expect(await modelLabels(url)).toEqual(new Set(['sql-lora', 'other']));
  });
});
