import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { RELEASE_MODEL } from '../../src/engines/registry.js';
import type { FakeAnswer, FakeWorker } from '../../src/testing/index.js';
import { normalise, prefillCached, sse, whole, withPrefillCache } from '../support/answers.js';
import { eventually, eventuallyAsync } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const metricsText = async (url: string) => (await request(`${url}/metrics`)).body.text();

const { setup, fakes } = proxyHarness();

const rich: FakeAnswer = {
  reasoning: ['The user ', 'wants weather.'],
  content: ['Let me ', 'check.'],
  toolCalls: [{ name: 'get_weather', arguments: ['{"city": ', '"Paris"}'] }],
};

const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

type Shape = {
  name: string;
  path: string;
  body: Record<string, unknown>;
  answer?: FakeAnswer;
  protocols: Array<'vllm' | 'sglang'>;
};

const SHAPES: Shape[] = [
  {
    name: 'chat, streamed, with the usage chunk',
    path: '/v1/chat/completions',
    body: { model: 'm', messages, stream: true, stream_options: { include_usage: true } },
    protocols: ['vllm', 'sglang'],
  },
  {
    name: 'chat, streamed: reasoning, a tool call in pieces, logprobs, finish tool_calls',
    path: '/v1/chat/completions',
    body: {
      model: 'm',
      messages,
      stream: true,
      logprobs: true,
      tools: [{ type: 'function', function: { name: 'get_weather' } }],
    },
    answer: rich,
    protocols: ['vllm', 'sglang'],
  },
  {
    name: 'chat, whole: reasoning, tool calls, logprobs',
    path: '/v1/chat/completions',
    body: { model: 'm', messages, logprobs: true },
    answer: rich,
    protocols: ['vllm', 'sglang'],
  },
  {
    name: 'completions, streamed, with logprobs',
    path: '/v1/completions',
    body: { model: 'm', prompt: 'Say hello', stream: true, logprobs: 1, max_tokens: 3 },
    protocols: ['vllm', 'sglang'],
  },
  {
    name: 'completions, whole',
    path: '/v1/completions',
    body: { model: 'm', prompt: 'Say hello', max_tokens: 3 },
    protocols: ['vllm', 'sglang'],
  },
  {
    name: 'completions, whole, a batch of two prompts',
    path: '/v1/completions',
    body: { model: 'm', prompt: ['Say hello', 'Say bye'], max_tokens: 2 },
    protocols: ['sglang'],
  },
  {
    name: "SGLang's /generate, streamed",
    path: '/generate',
    body: { text: 'Say hello', sampling_params: { max_new_tokens: 3 }, stream: true },
    protocols: ['sglang'],
  },
  {
    name: "SGLang's /generate, whole",
    path: '/generate',
    body: { text: 'Say hello', sampling_params: { max_new_tokens: 3 } },
    protocols: ['sglang'],
  },
];

describe('the relay: what a worker says reaches the client as the worker said it', () => {
  for (const shape of SHAPES) {
    for (const protocol of shape.protocols) {
      it(`${protocol}: ${shape.name}: the proxy's answer is the decode worker's own, but for prefill's cache figure`, async () => {
        const { url, decode } = await setup(protocol, {
          decode: shape.answer === undefined ? {} : { answer: shape.answer },
        });
        const cached = prefillCached(shape.body);
        if (shape.body.stream === true) {
          const proxied = await sse(url, shape.path, shape.body);
          const direct = await sse(decode.url, shape.path, shape.body);
          expect(proxied.status).toBe(200);
          expect(proxied.done).toBe(true);
          expect(normalise(proxied.payloads)).toEqual(normalise(withPrefillCache(direct.payloads, cached)));
          // Byte for byte where nothing had to change: the chunks without usage.
          const plain = (events: string[]) =>
            events.filter((event) => !event.includes('"usage"') && !event.includes('"id"'));
          expect(plain(proxied.events)).toEqual(plain(direct.events));
        } else {
          const proxied = await whole(url, shape.path, shape.body);
          const direct = await whole(decode.url, shape.path, shape.body);
          expect(proxied.status).toBe(200);
          expect(normalise(proxied.body)).toEqual(normalise(withPrefillCache(direct.body, cached)));
        }
      });
    }
  }

  it('sglang: usage counts the cache prefill reports, not decode (which holds the whole prompt from prefill)', async () => {
    const { client, decode } = await setup('sglang');
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x'.repeat(40) }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    // 40 characters are 10 fake tokens: decode says 10 cached, prefill computed them with 5 cached.
    expect(usage?.prompt_tokens_details?.cached_tokens).toBe(
      prefillCached({ messages: [{ role: 'user', content: 'x'.repeat(40) }] }),
    );
    expect(decode.requests).toHaveLength(1);
  });

  it('the openai client reads reasoning, tool calls and logprobs through the proxy', async () => {
    const { client } = await setup('vllm', { decode: { answer: rich } });
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: messages as never,
      stream: true,
      logprobs: true,
    });
    let reasoning = '';
    let content = '';
    let args = '';
    let name: string | undefined;
    let finish: string | null | undefined;
    let logprobs = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      const delta = choice?.delta as ({ reasoning_content?: string } & NonNullable<typeof choice>['delta']) | undefined;
      reasoning += delta?.reasoning_content ?? '';
      content += delta?.content ?? '';
      for (const call of delta?.tool_calls ?? []) {
        name ??= call.function?.name;
        args += call.function?.arguments ?? '';
      }
      logprobs += choice?.logprobs?.content?.length ?? 0;
      finish = choice?.finish_reason ?? finish;
    }
    expect({ reasoning, content, name, args, finish, logprobs }).toEqual({
      reasoning: 'The user wants weather.',
      content: 'Let me check.',
      name: 'get_weather',
      args: '{"city": "Paris"}',
      finish: 'tool_calls',
      logprobs: 2,
    });
  });
});

describe('a prefill that already finished the request', () => {
  it('is the answer, without the handoff parameters prefill named (no decode, nothing to claim)', async () => {
    const { url, decode, prefill } = await setup('vllm', {
      prefill: { answer: { finishReason: 'stop' } },
      decode: { model: 'fake-model' }, // as vLLM: it answers 404 for a model it does not serve
    });
    const answer = await whole(url, '/v1/completions', { model: 'fake-model', prompt: 'x' });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ choices: [{ text: 'tok0 ', finish_reason: 'stop' }] });
    expect(answer.body).not.toHaveProperty('kv_transfer_params');
    // vLLM holds the blocks of a request stopped at its first token as it does for a length
    // cap. The proxy sends the decode worker a release its handler refuses (a model nobody
    // serves): vLLM's rejection clean-up frees them at once, without computing anything.
    await eventually(() => prefill.ledger.released().length === 1, 'the release freed the KV');
    expect(decode.requests.map((record) => [record.body.model, record.body.max_tokens, record.kv])).toEqual([
      [RELEASE_MODEL, 1, undefined],
    ]);
    expect(decode.requests[0]?.body.kv_transfer_params).toMatchObject({ do_remote_prefill: true });
    await eventuallyAsync(
      async () => (await metricsText(url)).includes('disagg_kv_releases_total{result="freed"} 1'),
      'the release counted',
    );
  });

  it('a decode worker that serves the release anyway takes the KV and computes one token: freed too', async () => {
    // A fake started without a model serves any name.
    const { url, decode, prefill } = await setup('vllm', { prefill: { answer: { finishReason: 'stop' } } });
    const answer = await whole(url, '/v1/completions', { model: 'm', prompt: 'x' });
    expect(answer.body).toMatchObject({ choices: [{ text: 'tok0 ', finish_reason: 'stop' }] });
    // The prefill worker's ledger records the claim as it answers it; the decode worker records
    // it once it has read that answer: wait for both.
    await eventually(
      () => prefill.ledger.claimed().length === 1 && decode.requests[0]?.kv === 'taken',
      'the release took the KV',
    );
  });

  it('a release that cannot reach a decode worker is logged and counted; the KV waits for the lease', async () => {
    const { url, decode, prefill, logs } = await setup('vllm', {
      prefill: { answer: { finishReason: 'stop' }, kvTimeoutMs: 50 },
    });
    await decode.close();
    const answer = await whole(url, '/v1/completions', { model: 'm', prompt: 'x' });
    expect(answer.status).toBe(200);
    await eventuallyAsync(
      async () => (await metricsText(url)).includes('disagg_kv_releases_total{result="failed"} 1'),
      'the failed release counted',
    );
    expect(logs.some((record) => String(record.message).startsWith('Could not release the KV'))).toBe(true);
    await eventually(() => prefill.ledger.stranded().length === 1, 'the lease freed it');
    fakes.leaveKv(prefill);
  });
});

describe('failures stay failures', () => {
  it('a decode that aborts mid-stream: one SSE error event after the tokens, never a finish or [DONE]', async () => {
    const { url } = await setup('vllm', { decode: { answer: { content: ['a ', 'b '], finishReason: 'abort' } } });
    const proxied = await sse(url, '/v1/chat/completions', { model: 'm', messages, stream: true });
    expect(proxied.done).toBe(false);
    const last = proxied.events.at(-1) as string;
    expect(last.startsWith('event: error')).toBe(true);
    expect(last).toContain('aborted');
    expect(last).toContain('"leg":"decode"');
    expect(proxied.text).not.toContain('"finish_reason":"stop"');
    expect(proxied.text).not.toContain('"finish_reason":"abort"');
  });

  it('a decode that aborts, not streamed: a 502, and the openai client raises', async () => {
    const { client } = await setup('sglang', { decode: { answer: { finishReason: 'abort' } } });
    await expect(client.chat.completions.create({ model: 'm', messages: messages as never })).rejects.toMatchObject({
      status: 502,
    });
  });

  it('a prefill that aborts fails the request on the prefill leg (502), before decode is called', async () => {
    const { client, decode } = await setup('vllm', { prefill: { answer: { finishReason: 'abort' } } });
    const failure = await client.completions.create({ model: 'm', prompt: 'x' }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect(failure).toMatchObject({ status: 502 });
    expect(((failure as InstanceType<typeof OpenAI.APIError>).error as { leg?: string }).leg).toBe('prefill');
    expect(decode.requests).toHaveLength(0);
  });

  it("a worker's error chunk with code 400 inside its 200 stream is a 400 to the client: the SDK does not retry a doomed request", async () => {
    const tooLong = { error: { code: 400, message: "This model's maximum context length is 4096 tokens" } };
    const { url, decode, prefill } = await setup('vllm', { decode: { answer: tooLong } });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 2 });
    const failure = await client.completions.create({ model: 'm', prompt: 'x' }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
    expect((failure as Error).message).toContain('maximum context length');
    expect([prefill.requests.length, decode.requests.length]).toEqual([1, 1]);
    // Streamed: the role chunk went out, then the error with the worker's code.
    const streamed = await sse(url, '/v1/chat/completions', { model: 'm', messages, stream: true });
    expect(streamed.events.at(-1)).toMatch(/^event: error\ndata: .*"code":400/);
  });
});

describe('n > 1 and batched prompts', () => {
  it('sglang: a room per prompt of a batch, the same on both legs; its answers in order', async () => {
    const { url, prefill, decode } = await setup('sglang', {}, {});
    const answer = await whole(url, '/v1/completions', { model: 'm', prompt: ['a', 'b', 'c'], max_tokens: 2 });
    expect((answer.body.choices as Array<{ index: number }>).map((choice) => choice.index)).toEqual([0, 1, 2]);
    const rooms = (worker: FakeWorker) => worker.requests[0]?.body.bootstrap_room as bigint[];
    expect(rooms(prefill)).toHaveLength(3);
    expect(new Set(rooms(prefill)).size).toBe(3);
    expect(rooms(decode)).toEqual(rooms(prefill));
  });

  it('sglang: more than one sample per prompt is a 400 naming the field (n, or sampling_params.n on /generate), before any worker', async () => {
    const { client, url, prefill, decode } = await setup('sglang');
    const failure = await client.chat.completions
      .create({ model: 'm', messages: messages as never, n: 3 })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
    expect((failure as InstanceType<typeof OpenAI.APIError>).param).toBe('n');
    expect((failure as InstanceType<typeof OpenAI.APIError>).message).toContain('bootstrap room');
    const generate = await whole(url, '/generate', { text: ['a', 'b'], sampling_params: { n: 2, max_new_tokens: 2 } });
    expect(generate.status).toBe(400);
    expect(generate.body).toMatchObject({ error: { param: 'sampling_params.n', type: 'invalid_request_error' } });
    expect([prefill.requests.length, decode.requests.length]).toEqual([0, 0]);
  });

  it('sglang with data parallelism: every room of a batch goes to the worker rank', async () => {
    const { url, prefill } = await setup('sglang', {}, ({ prefill }) => ({
      prefill: [{ url: prefill.url, bootstrapPort: prefill.bootstrapPort, dpRank: 3, dpSize: 4 }],
    }));
    const answer = await whole(url, '/v1/completions', { model: 'm', prompt: ['a', 'b'], max_tokens: 2 });
    expect(answer.status).toBe(200);
    const rooms = prefill.requests[0]?.body.bootstrap_room as bigint[];
    expect(rooms).toHaveLength(2);
    for (const room of rooms) expect(BigInt(room) % 4n).toBe(3n);
  });

  it('vllm: n > 1, best_of and a batch of prompts are refused with a 400 naming the field, before any worker is called', async () => {
    const { client, prefill, decode } = await setup('vllm');
    for (const [body, param] of [
      [{ n: 2 }, 'n'],
      [{ best_of: 3 }, 'best_of'],
      [{ prompt: ['a', 'b'] }, 'prompt'],
    ] as const) {
      const failure = await client.completions
        .create({ model: 'm', prompt: 'x', ...body } as never)
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
      expect((failure as InstanceType<typeof OpenAI.APIError>).param).toBe(param);
    }
    expect([prefill.requests.length, decode.requests.length]).toEqual([0, 0]);
  });
});

describe('routes mean what they say', () => {
  it('a chat body on /v1/completions, or a prompt on the chat route, is a 400 naming the field; no worker is called', async () => {
    const { url, prefill, decode } = await setup('vllm');
    const onCompletions = await whole(url, '/v1/completions', { model: 'm', messages });
    expect(onCompletions.status).toBe(400);
    expect(onCompletions.body).toMatchObject({ error: { param: 'prompt', type: 'invalid_request_error' } });
    const onChat = await whole(url, '/v1/chat/completions', { model: 'm', prompt: 'x' });
    expect(onChat.status).toBe(400);
    expect(onChat.body).toMatchObject({ error: { param: 'messages' } });
    expect([prefill.requests.length, decode.requests.length]).toEqual([0, 0]);
  });

  it('each route calls the same route on the workers, /generate included', async () => {
    const { url, client, prefill, decode } = await setup('sglang');
    await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
    await client.chat.completions.create({ model: 'm', messages: messages as never, max_tokens: 2 });
    await whole(url, '/generate', { text: 'x', sampling_params: { max_new_tokens: 2 } });
    const paths = (worker: FakeWorker) => worker.requests.map((entry) => entry.path);
    expect(paths(prefill)).toEqual(['/v1/completions', '/v1/chat/completions', '/generate']);
    expect(paths(decode)).toEqual(paths(prefill));
  });
});

describe('credentials and privacy', () => {
  it('--worker-api-key: sent to both legs and every probe of workers that need it', async () => {
    const key = { apiKey: 'worker-secret' };
    const { url, client, prefill, decode } = await setup(
      'vllm',
      { prefill: key, decode: key },
      { workerApiKey: 'worker-secret' },
    );
    expect((await request(`${url}/ready`)).statusCode).toBe(200);
    const answer = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
    expect(answer.choices[0]?.text).toBe('tok0 tok1 ');
    for (const worker of [prefill, decode])
      expect(worker.requests[0]?.headers.authorization).toBe('Bearer worker-secret');
    expect((await request(`${url}/v1/models`)).statusCode).toBe(200);
  });

  it("without a worker key, the client's own Authorization is passed on", async () => {
    const key = { apiKey: 'client-key' };
    const { url, prefill, decode } = await setup('vllm', { prefill: key, decode: key });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'client-key', maxRetries: 0 });
    await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
    for (const worker of [prefill, decode]) expect(worker.requests[0]?.headers.authorization).toBe('Bearer client-key');
  });

  it('without a worker key or a client key, the workers get no Authorization at all', async () => {
    const { url, prefill, decode } = await setup('vllm');
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
    });
    expect(answer.statusCode).toBe(200);
    await answer.body.dump();
    for (const worker of [prefill, decode]) {
      expect(worker.requests).toHaveLength(1);
      expect(worker.requests[0]?.headers.authorization).toBeUndefined();
    }
  });

  it("one client's Authorization passed on is never sent with another client's request, before or after it", async () => {
    const { url, prefill, decode } = await setup('vllm');
    const send = (headers: Record<string, string>) =>
      request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
      }).then((answer) => answer.body.dump());
    await send({});
    await send({ authorization: 'Bearer alice' });
    await send({});
    await send({ authorization: 'Bearer bob' });
    for (const worker of [prefill, decode]) {
      expect(worker.requests.map((call) => call.headers.authorization)).toEqual([
        undefined,
        'Bearer alice',
        undefined,
        'Bearer bob',
      ]);
    }
  });

  it('--api-key: a client without the key gets an OpenAI-style 401 and no worker is called; with it, the answer', async () => {
    const { url, prefill } = await setup('vllm', {}, { apiKey: 'proxy-secret' });
    const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'nope', maxRetries: 0 });
    await expect(wrong.completions.create({ model: 'm', prompt: 'x' })).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    await expect(wrong.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    expect(prefill.requests).toHaveLength(0);
    expect((await request(`${url}/health`)).statusCode).toBe(200);
    const right = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'proxy-secret', maxRetries: 0 });
    expect((await right.completions.create({ model: 'm', prompt: 'x', max_tokens: 1 })).choices).toHaveLength(1);
  });

  it('a request refused for its key is logged at warn: where from, at what, missing or wrong, never the key sent', async () => {
    const { url, logs } = await setup('vllm', {}, { apiKey: 'proxy-secret' });
    const wrong = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer not-the-secret',
        'user-agent': 'scanner/1',
        'content-type': 'application/json',
      },
      body: '{}',
    });
    expect(wrong.statusCode).toBe(401);
    await wrong.body.dump();
    const missing = await request(`${url}/v1/models`);
    expect(missing.statusCode).toBe(401);
    await missing.body.dump();
    const refused = logs.filter((record) => String(record.message).startsWith('Refused a request'));
    expect(refused.map(({ level, message, fields }) => ({ level, message, ...(fields as object) }))).toEqual([
      expect.objectContaining({
        level: 'warn',
        message: 'Refused a request with a wrong API key',
        method: 'POST',
        path: '/v1/completions',
        auth: 'wrong',
        userAgent: 'scanner/1',
        client: expect.stringMatching(/127\.0\.0\.1/),
      }),
      expect.objectContaining({ message: 'Refused a request without an API key', path: '/v1/models', auth: 'missing' }),
    ]);
    expect(JSON.stringify(logs)).not.toContain('not-the-secret');
  });

  it('worker addresses never reach a client: errors and headers name workers', async () => {
    const { url, prefill } = await setup('vllm', {
      prefill: { fault: { type: 'status', status: 503, message: 'busy' } },
    });
    const answer = await whole(url, '/v1/completions', { model: 'm', prompt: 'x' });
    const text = JSON.stringify(answer.body);
    expect(answer.status).toBe(502);
    expect(text).toContain('prefill-0');
    expect(text).toContain('busy');
    expect(text).not.toContain(String(prefill.port));
    expect(text).not.toContain('127.0.0.1');
  });

  it("SGLang's router-only fields from a client never reach the workers", async () => {
    const { url, prefill, decode } = await setup('sglang');
    const body = {
      model: 'm',
      prompt: 'x',
      max_tokens: 2,
      bootstrap_room: 7,
      bootstrap_pair_key: 'k',
      routed_dp_rank: 1,
      disagg_prefill_dp_rank: 1,
      data_parallel_rank: 1,
    };
    expect((await whole(url, '/v1/completions', body)).status).toBe(200);
    for (const worker of [prefill, decode]) {
      const sent = worker.requests[0]?.body as Record<string, unknown>;
      expect(sent.bootstrap_room).not.toBe(7);
      for (const field of ['bootstrap_pair_key', 'routed_dp_rank', 'disagg_prefill_dp_rank', 'data_parallel_rank']) {
        expect(sent).not.toHaveProperty(field);
      }
    }
  });
});
