import { describe, expect, it } from 'vitest';
import { endpointNamed, endpointOf } from '../../src/endpoints/registry.js';
import type { RequestBody } from '../../src/flow/request-shaping.js';
import {
  withUsageAsked as askedWith,
  promptDetailsOf,
  withoutUsageChunks,
  withPromptDetails,
} from '../../src/flow/usage.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { collect, ScriptedSource, token } from '../support/async.js';
import { engine, kvParams, runFlow } from '../support/flow.js';

const usage = (details?: Record<string, unknown> | null) => ({
  prompt_tokens: 10,
  completion_tokens: 2,
  total_tokens: 12,
  ...(details === undefined ? {} : { prompt_tokens_details: details }),
});
const finish = (completionUsage?: object): EngineItem =>
  Annotated.fromData<LLMEngineOutput>({
    ...LLMEngineOutput.length(),
    ...(completionUsage === undefined ? {} : { completion_usage: completionUsage as never }),
  });

describe("the prefill leg's prompt details in the client's usage", () => {
  it("promptDetailsOf: prefill's prompt_tokens_details, or nothing when it reports none", () => {
    expect(promptDetailsOf(finish(usage({ cached_tokens: 4 })))).toEqual({ cached_tokens: 4 });
    expect(promptDetailsOf(finish(usage(null)))).toBeUndefined();
    expect(promptDetailsOf(finish(usage()))).toBeUndefined();
    expect(promptDetailsOf(finish())).toBeUndefined();
    expect(promptDetailsOf(undefined)).toBeUndefined();
  });

  it("withPromptDetails: prefill's figures over decode's in the data, keeping decode's other fields; an item without usage is left as it is", () => {
    const patched = withPromptDetails(finish(usage({ cached_tokens: 10, audio_tokens: 0 })), { cached_tokens: 4 });
    expect(patched.data?.completion_usage).toEqual(usage({ cached_tokens: 4, audio_tokens: 0 }));
    const bare = finish();
    expect(withPromptDetails(bare, { cached_tokens: 4 })).toBe(bare);
    expect(withPromptDetails(finish(usage()), { cached_tokens: 4 }).data?.completion_usage).toEqual(
      usage({ cached_tokens: 4 }),
    );
  });

  it("and in what the worker sent: an OpenAI chunk's usage, SGLang's meta_info.cached_tokens; the wire text is dropped so the patched JSON is what goes out", () => {
    const openai = Annotated.withWire(finish(usage({ cached_tokens: 10 })), [
      { form: 'event', text: 'data: {...}', json: { choices: [], usage: usage({ cached_tokens: 10 }) } },
      { form: 'event', text: 'data: {"choices":[]}', json: { choices: [] } },
    ]);
    const [first, second] = Annotated.wire(withPromptDetails(openai, { cached_tokens: 4 })) ?? [];
    expect(first).toEqual({
      form: 'event',
      text: undefined,
      json: { choices: [], usage: usage({ cached_tokens: 4 }) },
    });
    // A chunk without usage or meta_info goes out as the worker sent it.
    expect(second).toEqual({ form: 'event', text: 'data: {"choices":[]}', json: { choices: [] } });
    const withoutDetails = Annotated.withWire(finish(usage()), [
      { form: 'body', text: '{}', json: { usage: { prompt_tokens: 10 } } },
    ]);
    expect(Annotated.wire(withPromptDetails(withoutDetails, { cached_tokens: 4 }))?.[0]?.json).toEqual({
      usage: { prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 4 } },
    });
    const sglang = Annotated.withWire(finish(usage({ cached_tokens: 10 })), [
      { form: 'event', text: 'data: {...}', json: { text: 'x', meta_info: { cached_tokens: 10, prompt_tokens: 10 } } },
    ]);
    expect(Annotated.wire(withPromptDetails(sglang, { cached_tokens: 4 }))?.[0]).toEqual({
      form: 'event',
      text: undefined,
      json: { text: 'x', meta_info: { cached_tokens: 4, prompt_tokens: 10 } },
    });
    // SGLang's meta_info is only patched with a cached count to give.
    const other = Annotated.withWire(finish(usage({ cached_tokens: 10 })), [
      { form: 'event', text: 'data: {...}', json: { meta_info: { cached_tokens: 10 } } },
    ]);
    expect(Annotated.wire(withPromptDetails(other, { audio_tokens: 1 }))?.[0]?.text).toBe('data: {...}');
  });
});

describe('through the flow', () => {
  it("the item with decode's usage carries prefill's prompt details; items without usage reach the client as decode sent them", async () => {
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData<LLMEngineOutput>({
          token_ids: [9],
          finish_reason: 'length',
          disaggregated_params: kvParams,
          completion_usage: usage({ cached_tokens: 7 }) as never,
        }),
      ]).end(),
    );
    const plain = token(1);
    const noUsage = Annotated.fromData<LLMEngineOutput>({ token_ids: [2], completion_usage: null });
    const decode = engine(() => new ScriptedSource([plain, noUsage, finish(usage({ cached_tokens: 0 }))]).end());
    const items = await collect(await runFlow({ prefill: prefill.run, decode: decode.run }));
    expect(items[0]).toBe(plain);
    expect(items[1]).toBe(noUsage);
    expect(items[2]?.data?.completion_usage).toEqual(usage({ cached_tokens: 7 }));
    expect(items[2]?.data?.finish_reason).toBe('length');
  });

  it('without prompt details from prefill, decode’s usage goes through as it is', async () => {
    const last = finish(usage({ cached_tokens: 3 }));
    const decode = engine(() => new ScriptedSource([token(1), last]).end());
    const items = await collect(await runFlow({ decode: decode.run }));
    expect(items[1]).toBe(last);
  });
});

// The flow names the endpoint; these bodies are each their shape's (a library caller's reading).
const withUsageAsked = (request: RequestBody) => askedWith(request, endpointOf(request));

describe('withUsageAsked: usage asked of the workers on behalf of a streamed OpenAI request', () => {
  const chat = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true };

  it('a streamed chat or completion gets stream_options.include_usage, keeping the options it gave', () => {
    expect(withUsageAsked(chat)).toEqual({ ...chat, stream_options: { include_usage: true } });
    expect(withUsageAsked({ model: 'm', prompt: 'Hi', stream: true })?.stream_options).toEqual({ include_usage: true });
    expect(withUsageAsked({ ...chat, stream_options: { continuous_usage_stats: true } })?.stream_options).toEqual({
      continuous_usage_stats: true,
      include_usage: true,
    });
    for (const options of [null, 'yes', 3]) {
      expect(withUsageAsked({ ...chat, stream_options: options })?.stream_options).toEqual({ include_usage: true });
    }
  });

  it('nothing for a whole request, SGLang /generate, or one that asked for usage itself', () => {
    expect(withUsageAsked({ ...chat, stream: false })).toBeUndefined();
    expect(withUsageAsked({ model: 'm', prompt: 'Hi' })).toBeUndefined();
    expect(askedWith({ text: 'Hi', stream: true }, endpointNamed('generate'))).toBeUndefined();
    expect(withUsageAsked({ ...chat, stream_options: { include_usage: true } })).toBeUndefined();
    expect(withUsageAsked({ ...chat, stream_options: { include_usage: false } })?.stream_options).toEqual({
      include_usage: true,
    });
  });
});

describe('withoutUsageChunks: only a chunk with no choices and a usage object is taken off', () => {
  const event = (json: Record<string, unknown>) => ({ form: 'event' as const, text: JSON.stringify(json), json });
  const item = (chunks: Array<Record<string, unknown>>) =>
    Annotated.withWire(Annotated.fromData<LLMEngineOutput>(LLMEngineOutput.stop()), chunks.map(event));

  it('keeps a chunk with choices and usage, one without usage, one whose usage is null, one without choices', () => {
    const kept = item([
      { choices: [{ index: 0, text: 'a' }], usage: usage() },
      { choices: [] },
      { choices: [], usage: null },
      { usage: usage() },
    ]);
    // withWire may re-use the item: what it carries is the check.
    expect(Annotated.wire(withoutUsageChunks(kept))).toHaveLength(4);
    const dropped = withoutUsageChunks(item([{ choices: [{ index: 0, text: 'a' }] }, { choices: [], usage: usage() }]));
    expect(Annotated.wire(dropped)?.map((chunk) => chunk.json)).toEqual([{ choices: [{ index: 0, text: 'a' }] }]);
    const bare = finish(usage());
    expect(withoutUsageChunks(bare)).toBe(bare);
  });
});

describe('withPromptDetails on items without data or wire', () => {
  it('an item without data, or without usage, is the same item; one without a wire gets the details in its data alone', () => {
    const empty = Annotated.fromData<LLMEngineOutput>(undefined as never);
    expect(withPromptDetails(empty, { cached_tokens: 1 })).toBe(empty);
    const patched = withPromptDetails(finish(usage({ cached_tokens: 0, audio_tokens: 2 })), { cached_tokens: 4 });
    expect(patched.data?.completion_usage?.prompt_tokens_details).toEqual({ cached_tokens: 4, audio_tokens: 2 });
    expect(Annotated.wire(patched)).toBeUndefined();
  });

  it('a usage or meta_info that is null is left as it is, in the data and on the wire', () => {
    const nullUsage = finish(null as never);
    expect(withPromptDetails(nullUsage, { cached_tokens: 4 })).toBe(nullUsage);
    const chunks = [
      { choices: [], usage: null },
      { text: 'a', meta_info: null },
    ];
    const item = Annotated.withWire(
      finish(usage()),
      chunks.map((json) => ({ form: 'event' as const, text: JSON.stringify(json), json })),
    );
    expect(Annotated.wire(withPromptDetails(item, { cached_tokens: 4 }))?.map((chunk) => chunk.json)).toEqual(chunks);
  });

  it("an SGLang chunk's meta_info is patched only when prefill reported cached tokens", () => {
    const meta = { text: 'a', meta_info: { cached_tokens: 0, prompt_tokens: 10 } };
    const withMeta = Annotated.withWire(finish(usage()), [{ form: 'event', text: JSON.stringify(meta), json: meta }]);
    expect(Annotated.wire(withPromptDetails(withMeta, { audio_tokens: 1 }))?.[0]?.json).toEqual(meta);
    expect(Annotated.wire(withPromptDetails(withMeta, { cached_tokens: 6 }))?.[0]?.json).toEqual({
      text: 'a',
      meta_info: { cached_tokens: 6, prompt_tokens: 10 },
    });
  });
});
