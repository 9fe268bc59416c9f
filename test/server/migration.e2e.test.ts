import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorkerOptions, Fault } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

/**
 * One prefill and two decode workers of 20 tokens behind a proxy with migration on; the first
 * decode worker (the first request's, round-robin) breaks as `fault` says.
 */
async function fleet(
  protocol: 'vllm' | 'sglang',
  fault: Fault | undefined,
  options: Partial<ProxyOptions> = {},
  decode: Partial<FakeWorkerOptions> = {},
) {
  const prefill = await fakes.start({ role: 'prefill', protocol });
  const first = await fakes.start({ role: 'decode', protocol, tokens: 20, ...(fault ? { fault } : {}), ...decode });
  const second = await fakes.start({ role: 'decode', protocol, tokens: 20, ...decode });
  const logger = recordingLogger();
  const proxy = createProxy({
    connector: protocol,
    prefill: [{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }],
    decode: [{ url: first.url }, { url: second.url }],
    logger: logger.logger,
    selection: 'round-robin',
    migration: { limit: 1 },
    ...options,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  return { url, client, prefill, first, second, proxy, logs: logger.records };
}

const migrations = async (url: string) =>
  (await (await request(`${url}/metrics`)).body.text())
    .split('\n')
    .filter((line) => line.startsWith('disagg_migrations_total{'));

/** The text a streamed completion or chat completion says, chunk by chunk. */
async function textOf(
  stream: AsyncIterable<{ choices: Array<{ text?: string; delta?: { content?: string | null } }> }>,
) {
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? chunk.choices[0]?.delta?.content ?? '';
  return text;
}

const twenty = Array.from({ length: 20 }, (_, i) => `tok${i} `).join('');

describe('a decode worker that dies mid-stream', () => {
  for (const protocol of ['vllm', 'sglang'] as const) {
    it(`${protocol} completions: killed after 5 of 20 tokens, the client receives all 20 once, in one stream with one id, one finish and usage counted once`, async () => {
      const { client, url, first, second } = await fleet(protocol, { type: 'reset', afterTokens: 5 });
      const stream = await client.completions.create({
        model: 'fake-model',
        prompt: 'Tell me a long story',
        max_tokens: 20,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      const text = chunks.map((chunk) => chunk.choices[0]?.text ?? '').join('');
      expect(text).toBe(twenty);
      expect(new Set(chunks.map((chunk) => chunk.id)).size).toBe(1);
      expect(
        chunks.filter((chunk) => chunk.choices[0]?.finish_reason != null).map((c) => c.choices[0]?.finish_reason),
      ).toEqual(['length']);
      expect(chunks.every((chunk) => chunk.choices.every((choice) => choice.index === 0))).toBe(true);
      // The token ids the router asked for are not the client's.
      expect(chunks.some((chunk) => JSON.stringify(chunk).includes('token_ids'))).toBe(false);
      const usage = chunks.at(-1)?.usage;
      expect(usage?.completion_tokens).toBe(20);
      expect(usage?.prompt_tokens).toBe(Math.ceil('Tell me a long story'.length / 4));
      expect(usage?.total_tokens).toBe((usage?.prompt_tokens ?? 0) + 20);
      // The second worker was sent the prompt's ids and the five generated, for 15 more.
      const continuation = second.requests.at(-1)?.body as Record<string, unknown>;
      expect(((continuation.prompt ?? []) as number[]).slice(-5)).toEqual([2000, 2001, 2002, 2003, 2004]);
      expect(continuation.max_tokens).toBe(15);
      expect(first.requests.at(-1)?.body.return_token_ids).toBe(true);
      expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="stream_error",outcome="migrated"} 1']);
    });
  }

  it('a migrated request is logged with its migrations and final decode worker, and the broken leg is counted as migrated on the worker that broke', async () => {
    const { client, url, logs } = await fleet('vllm', { type: 'reset', afterTokens: 5 });
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Tell me',
      max_tokens: 20,
      stream: true,
    });
    expect(await textOf(stream)).toBe(twenty);
    await eventually(() => logs.some((line) => line.message === 'request finished'), 'the request logged');
    const finished = logs.find((line) => line.message === 'request finished')?.fields as Record<string, unknown>;
    expect(finished.outcome).toBe('success');
    expect(finished.migrations).toBe(1);
    expect(finished.decodeWorker).toBe('decode-1');
    expect(finished.brokenDecodeWorkers).toEqual(['decode-0']);
    const legs = (await (await request(`${url}/metrics`)).body.text())
      .split('\n')
      .filter((line) => line.startsWith('disagg_worker_legs_total{role="decode"'));
    expect(legs.sort()).toEqual([
      'disagg_worker_legs_total{role="decode",worker="decode-0",outcome="migrated"} 1',
      'disagg_worker_legs_total{role="decode",worker="decode-1",outcome="success"} 1',
    ]);
    // The info line says what broke in words and a code, not with a whole stack.
    const moved = logs.find((line) => line.message === 'Decode stream broke; continued on another worker');
    expect(moved?.level).toBe('info');
    const fields = moved?.fields as Record<string, unknown>;
    expect(fields.err).toBeUndefined();
    expect(typeof fields.error).toBe('string');
    expect(fields.code).toBe('DISAGG_UPSTREAM_CONNECTION');
    expect(JSON.stringify(fields)).not.toContain('    at ');
  });

  it('vllm chat: killed after 5 of 20 tokens, the client receives all 20 once as chat deltas', async () => {
    const { client, second } = await fleet('vllm', { type: 'reset', afterTokens: 5 });
    const stream = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'Tell me a long story' }],
      max_tokens: 20,
      stream: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('')).toBe(twenty);
    expect(new Set(chunks.map((chunk) => chunk.id)).size).toBe(1);
    expect(chunks.every((chunk) => chunk.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks.filter((chunk) => chunk.choices[0]?.delta?.role === 'assistant')).toHaveLength(1);
    expect(chunks.filter((chunk) => chunk.choices[0]?.finish_reason != null)).toHaveLength(1);
    // Resumed as a token-id completion of the prompt the engine rendered and the 5 tokens.
    expect(second.requests.at(-1)?.path).toBe('/v1/completions');
  });

  it("sglang chat, whose stream cannot return token ids: replayed, the client's 5 tokens skipped", async () => {
    const { client, first, second } = await fleet('sglang', { type: 'reset', afterTokens: 5 });
    const stream = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'Tell me a long story' }],
      max_tokens: 20,
      stream: true,
    });
    const text = await textOf(stream);
    expect(text).toBe(twenty);
    expect(first.requests.at(-1)?.body.return_token_ids).toBeUndefined();
    expect(second.requests.at(-1)?.path).toBe('/v1/chat/completions');
  });

  it('--migration-via prefill: the continuation computes its prompt on a prefill worker, then decodes', async () => {
    const { client, prefill, second } = await fleet(
      'vllm',
      { type: 'reset', afterTokens: 5 },
      {
        migration: { limit: 1, via: 'prefill' },
      },
    );
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Tell me',
      max_tokens: 20,
      stream: true,
    });
    const text = await textOf(stream);
    expect(text).toBe(twenty);
    // The prefill worker computed the prompt and the 5 tokens; the second decode took its KV.
    expect(((prefill.requests.at(-1)?.body.prompt ?? []) as number[]).slice(-5)).toEqual([
      2000, 2001, 2002, 2003, 2004,
    ]);
    expect(second.requests.at(-1)?.body.kv_transfer_params).toBeDefined();
  });

  it('a guided request is not migrated: it fails cleanly as without migration, and the log says why', async () => {
    const { client, url, logs } = await fleet('vllm', { type: 'reset', afterTokens: 5 });
    const stream = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'JSON please' }],
      max_tokens: 20,
      stream: true,
      response_format: { type: 'json_object' },
    });
    let text = '';
    const failure = await (async () => {
      try {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      } catch (error) {
        return error;
      }
    })();
    expect(failure).toBeInstanceOf(Error);
    expect(text).toBe('tok0 tok1 tok2 tok3 tok4 ');
    const refused = logs.find((log) => log.message === 'Decode stream broke; not migrated');
    expect((refused?.fields as { why?: string } | undefined)?.why).toMatch(
      /response_format json_object: guided decoding/,
    );
    expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="stream_error",outcome="refused"} 1']);
  });

  it('a worker silent past the idle deadline is given up and the stream continued elsewhere', async () => {
    const { client, url, first } = await fleet(
      'vllm',
      { type: 'stall', afterTokens: 5 },
      { deadlines: { idleMs: 300 } },
    );
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Go on',
      max_tokens: 20,
      stream: true,
    });
    const text = await textOf(stream);
    expect(text).toBe(twenty);
    expect(first.requests.at(-1)?.aborted).toBe(true);
    expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="idle",outcome="migrated"} 1']);
  });

  it('a worker taken out of rotation while it streams (failed health checks, an open circuit) is left for another', async () => {
    const { client, url, proxy } = await fleet('vllm', undefined, {}, { tokenIntervalMs: 20 });
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Go on',
      max_tokens: 20,
      stream: true,
    });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      // After three tokens, health takes the first decode worker out.
      if (++chunks === 3) proxy.decodeWorkers.setAvailable(proxy.decodeWorkers.workers[0] as { url: string }, false);
    }
    expect(text).toBe(twenty);
    expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="worker_down",outcome="migrated"} 1']);
  });

  it('stop strings: replayed from the prompt (only the engine checks them), what the client has skipped', async () => {
    const { client, second } = await fleet('vllm', { type: 'reset', afterTokens: 5 });
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Count',
      max_tokens: 20,
      stop: ['never'],
      stream: true,
    });
    const text = await textOf(stream);
    expect(text).toBe(twenty);
    expect(second.requests.at(-1)?.body.prompt).toBe('Count');
  });

  it('seeded sampling: the continued stream equals an unbroken one token for token', async () => {
    const { client } = await fleet('vllm', { type: 'reset', afterTokens: 7 });
    const ask = async () => {
      const stream = await client.completions.create({
        model: 'fake-model',
        prompt: 'Once upon a time',
        max_tokens: 20,
        seed: 42,
        temperature: 0.8,
        stream: true,
      });
      return textOf(stream);
    };
    const broken = await ask(); // the first worker, which breaks
    const unbroken = await ask(); // the second, whole
    expect(broken.split(' ').filter(Boolean)).toHaveLength(20);
    expect(broken).toBe(unbroken);
    expect(broken).not.toBe(twenty);
  });

  it('with migration off (the default) the break reaches the client as before', async () => {
    const { client, url } = await fleet('vllm', { type: 'reset', afterTokens: 5 }, { migration: { limit: 0 } });
    const stream = await client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 20, stream: true });
    await expect(
      (async () => {
        for await (const _ of stream);
      })(),
    ).rejects.toThrow();
    expect(await migrations(url)).toEqual([]);
  });
});

describe("the agents' APIs: a broken stream is not continued (their events carry no token ids)", () => {
  const why = (path: string) =>
    `a ${path} stream is not continued: only OpenAI's completions and chat resume as a token-id completion`;
  const post = (url: string, path: string, body: object) =>
    request(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it("Responses: refused, counted and logged as today; the client reads the API's error, never response.completed", async () => {
    const { url, logs } = await fleet('vllm', { type: 'reset', afterTokens: 3 });
    const answer = await post(url, '/v1/responses', {
      model: 'fake-model',
      input: 'Tell me a long story',
      max_output_tokens: 20,
      stream: true,
    });
    const events = (await answer.body.text()).split('\n\n').filter((event) => event !== '');
    expect(events.slice(-2).map((event) => event.split('\n')[0])).toEqual(['event: error', 'event: response.failed']);
    expect(events.some((event) => event.startsWith('event: response.completed'))).toBe(false);
    const refused = logs.filter((log) => log.message === 'Decode stream broke; not migrated');
    expect(refused.map((log) => (log.fields as { why?: string }).why)).toEqual([why('/v1/responses')]);
    expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="stream_error",outcome="refused"} 1']);
  });

  it("Messages: refused, counted and logged as today; the client reads Anthropic's error event, never message_stop", async () => {
    const { url, logs } = await fleet('vllm', { type: 'reset', afterTokens: 3 });
    const answer = await post(url, '/v1/messages', {
      model: 'fake-model',
      max_tokens: 20,
      messages: [{ role: 'user', content: 'Tell me a long story' }],
      stream: true,
    });
    const text = await answer.body.text();
    const last = text.trim().split('\n\n').at(-1) as string;
    expect(last).toMatch(/^event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":/);
    expect(text).not.toContain('message_stop');
    const refused = logs.filter((log) => log.message === 'Decode stream broke; not migrated');
    expect(refused.map((log) => (log.fields as { why?: string }).why)).toEqual([why('/v1/messages')]);
    expect(await migrations(url)).toEqual(['disagg_migrations_total{reason="stream_error",outcome="refused"} 1']);
  });
});
