// The agents' APIs through `disagg serve`, read by their own SDKs: OpenAI's Responses with the
// openai client, Anthropic's Messages with @anthropic-ai/sdk. What the decode worker says
// reaches the client as it said it (the prompt's cache figure taken from prefill), failures
// come in each API's own words, and every handoff's KV is taken or freed (the harness checks
// the fakes' ledgers after each test).
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { FakeAnswer } from '../../src/testing/index.js';
import { proxyHarness } from '../support/proxy.js';

const { setup, cluster } = proxyHarness();

const rich: FakeAnswer = {
  reasoning: ['The user ', 'wants weather.'],
  content: ['Let me ', 'check.'],
  toolCalls: [{ name: 'get_weather', arguments: ['{"city": ', '"Paris"}'] }],
};

/** What differs between two answers to the same body: the ids and times each answer makes. */
function normalise(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(normalise);
  if (typeof value !== 'object' || value === null) return value;
  const ids = new Set(['id', 'item_id', 'call_id', 'created_at', 'signature']);
  return Object.fromEntries(
    Object.entries(value).map(([key, entry]) => [key, ids.has(key) ? '<id>' : normalise(entry)]),
  );
}

/** `value` with every usage's cache figure set aside: prefill's, through the proxy; decode's, direct. */
function withoutCache(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutCache);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== 'cached_tokens' && key !== 'cache_read_input_tokens')
      .map(([key, entry]) => [key, withoutCache(entry)]),
  );
}

const anthropic = (url: string) => new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
const openai = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });

const RESPONSES_BODY = {
  model: 'm',
  instructions: 'You are a weather bot.',
  input: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
  tools: [{ type: 'function' as const, name: 'get_weather', parameters: {}, strict: false }],
  max_output_tokens: 64,
};

const MESSAGES_BODY = {
  model: 'm',
  system: 'You are a weather bot.',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
  tools: [{ name: 'get_weather', input_schema: { type: 'object' as const } }],
};

describe("OpenAI's Responses through the proxy, read by the openai client", () => {
  it("streamed: the same events as the decode worker sends, reasoning and a tool call included; the cache figure is prefill's (a turn not stored)", async () => {
    const { url, decode } = await setup('vllm', { decode: { answer: rich } });
    // The raw event stream: openai 6's stream helper cannot accumulate vLLM's reasoning parts
    // (it throws on response.reasoning_part.added, from the worker as from the proxy).
    const events = async (base: string) => {
      const seen: Array<{ type: string; response?: OpenAI.Responses.Response }> = [];
      // Not stored: a stored turn's lifecycle events say store: true (the router keeps it).
      for await (const event of await openai(base).responses.create({
        ...RESPONSES_BODY,
        stream: true,
        store: false,
      })) {
        seen.push(event);
      }
      return seen;
    };
    const proxied = await events(url);
    const direct = await events(decode.url);
    expect(normalise(withoutCache(proxied))).toEqual(normalise(withoutCache(direct)));
    const types = proxied.map((event) => event.type);
    expect(types).toContain('response.reasoning_text.delta');
    expect(types).toContain('response.function_call_arguments.delta');
    expect(types.at(-1)).toBe('response.completed');
    const final = proxied.at(-1)?.response as OpenAI.Responses.Response;
    expect(final.output.find((item) => item.type === 'function_call')).toMatchObject({
      name: 'get_weather',
      arguments: '{"city": "Paris"}',
    });
    // Decode took the prompt from prefill, which found half of it cached; decode says all.
    const cached = (seen: typeof proxied) =>
      (seen.at(-1) as { response: OpenAI.Responses.Response }).response.usage?.input_tokens_details.cached_tokens;
    expect(cached(proxied)).toBeLessThan(cached(direct) as number);
  });

  it("the openai client's stream helper reads a plain answer through the proxy to its final response", async () => {
    const { url } = await setup('vllm', { decode: { answer: { content: ['Sunny ', 'in Paris.'] } } });
    const stream = openai(url).responses.stream({ ...RESPONSES_BODY, tools: [] });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (event) => deltas.push(event.delta));
    const final = await stream.finalResponse();
    expect(deltas.join('')).toBe('Sunny in Paris.');
    expect(final.output_text).toBe('Sunny in Paris.');
    expect(final.status).toBe('completed');
  });
  it("whole: the decode worker's response object, but for the cache figure (a turn not stored)", async () => {
    const { url, decode } = await setup('vllm', { decode: { answer: rich } });
    const proxied = await openai(url).responses.create({ ...RESPONSES_BODY, store: false });
    const direct = await openai(decode.url).responses.create({ ...RESPONSES_BODY, store: false });
    expect(normalise(withoutCache(proxied))).toEqual(normalise(withoutCache(direct)));
    expect(proxied.output_text).toBe('Let me check.');
    expect(proxied).not.toHaveProperty('kv_transfer_params.remote_host');
  });

  it("the prefill leg: max_output_tokens 1, not streamed, nothing stored, vLLM's handoff asked; the decode leg the client's body with prefill's handoff and nothing stored (the router keeps the answer); both the router's response id", async () => {
    const { url, prefill, decode } = await setup('vllm');
    await openai(url)
      .responses.create({ ...RESPONSES_BODY, stream: true })
      .then(async (stream) => {
        for await (const _ of stream) {
          // read to the end
        }
      });
    const [leg] = prefill.requests;
    expect(leg?.path).toBe('/v1/responses');
    // The id the answer will carry: the router's own (vLLM and SGLang name a response by it).
    const id = leg?.body.request_id;
    expect(id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(leg?.body).toEqual({
      ...RESPONSES_BODY,
      request_id: id,
      max_output_tokens: 1,
      stream: false,
      store: false,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    const [decoded] = decode.requests;
    expect(decoded?.path).toBe('/v1/responses');
    const { kv_transfer_params: params, ...rest } = decoded?.body ?? {};
    expect(rest).toEqual({ ...RESPONSES_BODY, request_id: id, stream: true, store: false });
    expect(params).toMatchObject({ do_remote_prefill: true, remote_port: prefill.port });
    expect(decoded?.kv).toBe('taken');
  });

  it("an unknown previous_response_id is OpenAI's 400 previous_response_not_found, before any worker", async () => {
    const { url, prefill, decode } = await setup('vllm');
    const error = await openai(url)
      .responses.create({ ...RESPONSES_BODY, previous_response_id: 'resp_earlier' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('previous_response_id');
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('previous_response_not_found');
    expect(prefill.requests.length + decode.requests.length).toBe(0);
  });

  it("a prefill that fails is the API's error, never a success: a 502 naming the prefill leg", async () => {
    const { url, decode } = await setup('vllm', { prefill: { fault: { type: 'late-failure', message: 'GPU lost' } } });
    const error = await openai(url)
      .responses.create(RESPONSES_BODY)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((error as Error).message).toContain('GPU lost');
    expect(decode.requests).toHaveLength(0);
  });

  it("a failure after the stream began ends it with the API's error event, then response.failed: never response.completed", async () => {
    const broken = { tokens: 8, fault: { type: 'error-event' as const, afterTokens: 2, message: 'decode OOM' } };
    const { url } = await setup('vllm', { decode: broken });
    const seen: Array<{ type: string; message?: string; sequence_number?: number; response?: unknown }> = [];
    for await (const event of await openai(url).responses.create({ ...RESPONSES_BODY, tools: [], stream: true })) {
      seen.push(event as (typeof seen)[number]);
    }
    const types = seen.map((event) => event.type);
    expect(types.slice(-2)).toEqual(['error', 'response.failed']);
    expect(types).toContain('response.output_text.delta');
    expect(types).not.toContain('response.completed');
    expect(seen.at(-2)?.message).toContain('decode OOM');
    expect(seen.at(-1)?.response).toMatchObject({ status: 'failed', error: { code: 'server_error' } });
    // Numbered on from the last event the worker sent.
    expect(seen.map((event) => event.sequence_number)).toEqual(seen.map((_, i) => i));
    // The stream helper rejects with the error event.
    const helper = await setup('vllm', { decode: broken });
    const error = await openai(helper.url)
      .responses.stream({ ...RESPONSES_BODY, tools: [] })
      .finalResponse()
      .catch((e: unknown) => e);
    expect(error).toMatchObject({
      type: 'error',
      code: 'server_error',
      message: expect.stringContaining('decode OOM'),
    });
  });
  it("SGLang: a prefill that fails after decode began streaming ends the stream with the API's error (never response.completed)", async () => {
    const { url } = await setup('sglang', {
      prefill: { fault: { type: 'late-failure', afterMs: 40, message: 'KV transfer aborted' } },
      decode: { tokens: 40, tokenIntervalMs: 5 },
    });
    const raw = await fetch(`${url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'Hi', stream: true }),
    });
    const text = await raw.text();
    expect(text).not.toContain('response.completed');
    expect(text).toMatch(
      /event: error\ndata: \{"type":"error","code":"server_error","message":"[^"]*KV transfer aborted/,
    );
    expect(text).toMatch(
      /event: response\.failed\ndata: \{"type":"response\.failed","response":\{[^\n]*"status":"failed"/,
    );
  });
});

describe("Anthropic's Messages through the proxy, read by @anthropic-ai/sdk", () => {
  it('streamed: the same events as the decode worker sends, thinking and tool use included', async () => {
    const { url, decode } = await setup('vllm', { decode: { answer: rich } });
    const events = async (base: string) => {
      const stream = anthropic(base).messages.stream(MESSAGES_BODY);
      const seen: unknown[] = [];
      for await (const event of stream) seen.push(event);
      return { seen, final: await stream.finalMessage() };
    };
    const proxied = await events(url);
    const direct = await events(decode.url);
    expect(normalise(proxied.seen)).toEqual(normalise(direct.seen));
    expect(proxied.final.content.map((block) => block.type)).toEqual(['thinking', 'text', 'tool_use']);
    expect(proxied.final.content[2]).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: 'Paris' } });
    expect(proxied.final.stop_reason).toBe('tool_use');
  });

  it("whole: the decode worker's message", async () => {
    const { url, decode } = await setup('vllm', { decode: { answer: rich } });
    const proxied = await anthropic(url).messages.create(MESSAGES_BODY);
    const direct = await anthropic(decode.url).messages.create(MESSAGES_BODY);
    expect(normalise(proxied)).toEqual(normalise(direct));
    expect(proxied).not.toHaveProperty('kv_transfer_params');
  });

  it("the prefill leg: max_tokens 1, not streamed, vLLM's handoff asked, system and tools as sent", async () => {
    const { url, prefill, decode } = await setup('vllm');
    await anthropic(url).messages.create(MESSAGES_BODY);
    const [leg] = prefill.requests;
    expect(leg?.path).toBe('/v1/messages');
    const { kv_transfer_params: params, ...rest } = leg?.body ?? {};
    expect(rest).toEqual({ ...MESSAGES_BODY, max_tokens: 1, stream: false });
    expect(params).toEqual({
      do_remote_decode: true,
      do_remote_prefill: false,
      remote_engine_id: null,
      remote_block_ids: null,
      remote_host: null,
      remote_port: null,
    });
    const { kv_transfer_params: handoff, ...decoded } = decode.requests[0]?.body ?? {};
    expect(decoded).toEqual(MESSAGES_BODY);
    expect(handoff).toMatchObject({ do_remote_prefill: true });
  });

  it("errors in Anthropic's shape: a refusal before any worker, a prefill's failure, a failure mid-stream", async () => {
    const { url, prefill } = await setup('vllm');
    const refused = await anthropic(url)
      .messages.create({ ...MESSAGES_BODY, max_tokens: 0 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    expect((refused as InstanceType<typeof Anthropic.APIError>).error).toEqual({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'max_tokens must be at least 1, got 0' },
    });
    expect(prefill.requests).toHaveLength(0);

    const failing = await setup('vllm', { prefill: { fault: { type: 'late-failure', message: 'GPU lost' } } });
    const failed = await anthropic(failing.url)
      .messages.create(MESSAGES_BODY)
      .catch((e: unknown) => e);
    expect((failed as InstanceType<typeof Anthropic.APIError>).status).toBe(502);
    expect((failed as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
      type: 'error',
      error: { type: 'api_error', message: expect.stringContaining('GPU lost') },
    });

    const broken = await setup('vllm', {
      decode: { tokens: 8, fault: { type: 'error-event', afterTokens: 2, message: 'decode OOM' } },
    });
    const stream = anthropic(broken.url).messages.stream({ ...MESSAGES_BODY, tools: [] });
    const error = await stream.finalMessage().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as Error).message).toContain('decode OOM');
  });

  it('SGLang cannot disaggregate Messages (its route drops the bootstrap fields): a 501 saying why, no worker called', async () => {
    const { url, prefill, decode } = await setup('sglang');
    const error = await anthropic(url)
      .messages.create(MESSAGES_BODY)
      .catch((e: unknown) => e);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(501);
    expect((error as Error).message).toContain('sglang#35229');
    expect(prefill.requests.length + decode.requests.length).toBe(0);
  });

  it('SGLang serves Messages that the router sends to decode alone (here: short prompts, --aggregate-below-chars)', async () => {
    const { url, decode, prefill } = await cluster(
      'sglang',
      { prefill: [{}], decode: [{}] },
      { routing: { aggregateBelowChars: 10_000 } },
    );
    const answer = await anthropic(url).messages.create({ ...MESSAGES_BODY, tools: [] });
    expect(answer.content).toEqual([{ type: 'text', text: 'tok0 tok1 tok2 tok3 ' }]);
    expect(decode[0]?.requests.map((record) => record.path)).toEqual(['/v1/messages']);
    expect(prefill[0]?.requests).toEqual([]);
  });

  it('count_tokens without a tokenizer of the router is answered by a decode worker', async () => {
    const { url, decode } = await setup('vllm');
    const counted = await anthropic(url).messages.countTokens({ model: 'm', messages: MESSAGES_BODY.messages });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(decode.requests.map((record) => record.path)).toEqual(['/v1/messages/count_tokens']);
  });
});

describe("an agent's conversation without a tokenizer: its text routes by prefix (cache-aware)", () => {
  it("each conversation's next turn goes to the prefill worker that computed its first; distinct conversations spread, on each API", async () => {
    const { url, prefill } = await cluster(
      'vllm',
      { prefill: [{}, {}, {}], decode: [{}] },
      { prefillPolicy: 'cache-aware' },
    );
    const servedBy = () => prefill.findIndex((worker) => worker.requests.length > 0);
    const clear = () => {
      for (const worker of prefill) worker.requests.splice(0);
    };
    const firsts = { messages: new Set<number>(), responses: new Set<number>() };
    const topics = ['the build', 'the tests', 'the docs'];
    // A conversation of its own from its first character: nothing in common with the others.
    const systemOf = (topic: string) =>
      `${topic}: you are a coding agent in a large repository. ${'Follow the style guide. '.repeat(40)}`;
    for (const topic of topics) {
      const system = systemOf(topic);
      const history = [{ role: 'user' as const, content: `Look at ${topic}.` }];
      await anthropic(url).messages.create({ ...MESSAGES_BODY, system, messages: history, tools: [] });
      const first = servedBy();
      firsts.messages.add(first);
      clear();
      await anthropic(url).messages.create({
        ...MESSAGES_BODY,
        system,
        messages: [...history, { role: 'assistant', content: 'Done.' }, { role: 'user', content: 'Now fix it.' }],
        tools: [],
      });
      expect(servedBy()).toBe(first);
      clear();
    }
    for (const topic of topics) {
      const instructions = `Codex on ${systemOf(topic)}`;
      await openai(url).responses.create({ ...RESPONSES_BODY, instructions, input: `Look at ${topic}.`, tools: [] });
      const first = servedBy();
      firsts.responses.add(first);
      clear();
      await openai(url).responses.create({
        ...RESPONSES_BODY,
        instructions,
        input: [
          { role: 'user', content: `Look at ${topic}.` },
          { role: 'assistant', content: 'Done.' },
          { role: 'user', content: 'Now fix it.' },
        ],
        tools: [],
      });
      expect(servedBy()).toBe(first);
      clear();
    }
    // Had routing not read these bodies, every conversation would look alike (and go to one worker).
    expect(firsts.messages.size).toBeGreaterThan(1);
    expect(firsts.responses.size).toBeGreaterThan(1);
  });
});

describe("an agent's session", () => {
  it("two turns of one agent session land on the same prefill worker, by the agent's own header", async () => {
    const { url, prefill } = await cluster(
      'vllm',
      { prefill: [{}, {}, {}, {}], decode: [{}] },
      { prefillPolicy: 'session' },
    );
    const claude = (session: string) =>
      new Anthropic({
        baseURL: url,
        apiKey: 'unused',
        maxRetries: 0,
        defaultHeaders: { 'x-claude-code-session-id': session },
      });
    const codex = (session: string) =>
      new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { session_id: session } });
    const servedBy = () => prefill.findIndex((worker) => worker.requests.length > 0);
    const sessions = ['a', 'b', 'c', 'd', 'e', 'f'];
    const homes = { claude: new Set<number>(), codex: new Set<number>() };
    for (const session of sessions) {
      await claude(session).messages.create(MESSAGES_BODY);
      const first = servedBy();
      homes.claude.add(first);
      for (const worker of prefill) worker.requests.splice(0);
      await claude(session).messages.create({
        ...MESSAGES_BODY,
        messages: [
          ...MESSAGES_BODY.messages,
          { role: 'assistant', content: 'Sunny.' },
          { role: 'user', content: 'And Rome?' },
        ],
      });
      expect(servedBy()).toBe(first);
      for (const worker of prefill) worker.requests.splice(0);
      await codex(session).responses.create(RESPONSES_BODY);
      const firstCodex = servedBy();
      for (const worker of prefill) worker.requests.splice(0);
      await codex(session).responses.create({ ...RESPONSES_BODY, input: 'And Rome?' });
      expect(servedBy()).toBe(firstCodex);
      homes.codex.add(firstCodex);
      for (const worker of prefill) worker.requests.splice(0);
    }
    // Keyed by session: the sessions spread over the workers (without a key, all would go to one).
    expect(homes.claude.size).toBeGreaterThan(1);
    expect(homes.codex.size).toBeGreaterThan(1);
  });
});

describe("the router's API key, as each agent sends it", () => {
  it("Anthropic's x-api-key opens the API as a bearer does, and goes on to the workers as one; a wrong key is a 401 in Anthropic's shape", async () => {
    const { url, prefill, decode } = await setup('vllm', {}, { apiKey: 'sk-router-0001' });
    const claude = (apiKey: string) => new Anthropic({ baseURL: url, apiKey, maxRetries: 0 });
    const answer = await claude('sk-router-0001').messages.create({ ...MESSAGES_BODY, tools: [] });
    expect(answer.type).toBe('message');
    // vLLM reads a bearer only: the client's key is passed on as one (no worker key is set).
    expect(prefill.requests[0]?.headers.authorization).toBe('Bearer sk-router-0001');
    expect(decode.requests[0]?.headers.authorization).toBe('Bearer sk-router-0001');
    const refused = await claude('sk-wrong')
      .messages.create({ ...MESSAGES_BODY, tools: [] })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((refused as InstanceType<typeof Anthropic.APIError>).error).toEqual({
      type: 'error',
      error: {
        type: 'authentication_error',
        message: 'Incorrect or missing API key: send it as "Authorization: Bearer <key>" (or "x-api-key: <key>")',
      },
    });
    // OpenAI's clients send a bearer, as before.
    expect(
      (await openai(url)
        .responses.create({ ...RESPONSES_BODY, tools: [] })
        .catch((e: unknown) => e)) instanceof OpenAI.AuthenticationError,
    ).toBe(true);
    const codex = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-router-0001', maxRetries: 0 });
    expect((await codex.responses.create({ ...RESPONSES_BODY, tools: [] })).status).toBe('completed');
  });
});

describe('what the agents ask of the router besides a generation', () => {
  it("GET /v1/responses/{id} is the router's own: the answer as stored, whole or streamed, with no worker call; an id never stored is a 404", async () => {
    const { url, prefill, decode } = await cluster('vllm', { prefill: [{}], decode: [{}, {}, {}] });
    const client = openai(url);
    const answers = new Map<string, OpenAI.Responses.Response>();
    for (let i = 0; i < 3; i++) {
      const answer = await client.responses.create({ ...RESPONSES_BODY, tools: [] });
      answers.set(answer.id, answer);
    }
    for await (const event of await client.responses.create({ ...RESPONSES_BODY, tools: [], stream: true })) {
      // Every lifecycle event says what the client asked: stored (the worker was asked for nothing).
      if ('response' in event) expect(event.response).toMatchObject({ store: true, previous_response_id: null });
      if (event.type === 'response.completed') answers.set(event.response.id, event.response);
    }
    for (const answer of answers.values()) expect(answer).toHaveProperty('store', true);
    for (const worker of [...prefill, ...decode]) worker.requests.splice(0);
    for (const [id, answer] of answers) {
      // The openai client adds output_text to a whole response it reads (not to a streamed one's).
      const { output_text: _stored, ...stored } = await client.responses.retrieve(id);
      const { output_text: _answered, ...answered } = answer;
      // As answered: stored, continuing nothing.
      expect(stored).toEqual(answered);
    }
    const unknown = await client.responses.retrieve('resp_never').catch((e: unknown) => e);
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404);
    expect((unknown as Error).message).toContain("Response with id 'resp_never' not found.");
    expect([...prefill, ...decode].every((worker) => worker.requests.length === 0)).toBe(true);
  });
});
