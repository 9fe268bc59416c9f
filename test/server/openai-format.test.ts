import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { OpenAIWriter, ResponseWriter } from '../../src/server/openai-format.js';

const text = (value: string) => Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: value });
const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };

describe('OpenAIWriter', () => {
  it('chat chunks: the role on the first, then content deltas, the finish reason in OpenAI terms', () => {
    const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'llama' });
    const first = JSON.parse(writer.chunk(text('Hel')) as string);
    expect(first).toMatchObject({ object: 'chat.completion.chunk', model: 'llama' });
    expect(first.choices).toEqual([
      { index: 0, delta: { role: 'assistant', content: 'Hel' }, logprobs: null, finish_reason: null },
    ]);
    expect(JSON.parse(writer.chunk(text('lo')) as string).choices[0].delta).toEqual({ content: 'lo' });
    const last = JSON.parse(writer.chunk(Annotated.fromData(LLMEngineOutput.eos())) as string);
    expect(last.choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' });
    expect(last.id).toBe(first.id);
  });

  it('completion chunks carry text; an item with neither text nor finish writes nothing', () => {
    const writer = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    expect(JSON.parse(writer.chunk(text('a')) as string).choices[0]).toEqual({
      index: 0,
      text: 'a',
      logprobs: null,
      finish_reason: null,
    });
    expect(writer.chunk(text(''))).toBeUndefined();
    expect(writer.chunk(Annotated.fromData({ token_ids: [] }))).toBeUndefined();
    expect(writer.chunk({ event: 'x' } as never)).toBeUndefined();
    expect(writer.chunk({ data: null, event: 'x' } as never)).toBeUndefined();
    expect(
      JSON.parse(writer.chunk(Annotated.fromData(LLMEngineOutput.length())) as string).choices[0].finish_reason,
    ).toBe('length');
  });

  it('the usage chunk only for a client that asked for it', () => {
    const asked = new OpenAIWriter(endpointNamed('chat'), { model: 'm', stream_options: { include_usage: true } });
    asked.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(JSON.parse(asked.usageChunk() as string)).toMatchObject({ choices: [], usage });
    const silent = new OpenAIWriter(endpointNamed('chat'), { model: 'm' });
    silent.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(silent.usageChunk()).toBeUndefined();
  });

  it('the whole response of a non-streamed request, per choice', () => {
    const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'm' });
    for (const item of [
      text('Hi'),
      text(' there'),
      Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }),
    ]) {
      writer.add(item);
    }
    expect(writer.whole()).toMatchObject({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hi there' }, finish_reason: 'length' }],
      usage,
    });
    const completions = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    completions.add(Annotated.fromData({ token_ids: [], text: 'b', index: 1, finish_reason: 'stop' }));
    expect((completions.whole() as { choices: unknown[] }).choices).toEqual([
      { index: 0, text: '', logprobs: null, finish_reason: 'stop' },
      { index: 1, text: 'b', logprobs: null, finish_reason: 'stop' },
    ]);
  });
});

describe('OpenAIWriter, the fields a client reads', () => {
  it('ids name their route: chatcmpl- for chat, cmpl- for completions and /generate, the same for every chunk', () => {
    const chat = new OpenAIWriter(endpointNamed('chat'), { model: 'm' });
    const completions = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    const generate = new OpenAIWriter(endpointNamed('generate'), { model: 'm' });
    const id = (writer: OpenAIWriter) => JSON.parse(writer.chunk(text('a')) as string).id as string;
    expect(id(chat)).toMatch(/^chatcmpl-[0-9a-f-]{36}$/);
    expect(id(completions)).toMatch(/^cmpl-[0-9a-f-]{36}$/);
    expect(id(generate)).toMatch(/^cmpl-[0-9a-f-]{36}$/);
    expect(id(chat)).toBe(id(chat));
    expect(id(completions)).not.toBe(id(new OpenAIWriter(endpointNamed('completions'), { model: 'm' })));
  });

  it('a request without a model string is answered for model "unknown"', () => {
    for (const body of [{}, { model: 7 }]) {
      const writer = new OpenAIWriter(endpointNamed('completions'), body);
      expect(JSON.parse(writer.chunk(text('a')) as string).model).toBe('unknown');
      expect(writer.whole()).toMatchObject({ model: 'unknown' });
    }
  });

  it('created is the time of the request in whole seconds, the same in every chunk and the whole answer', () => {
    const before = Math.floor(Date.now() / 1000);
    const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'm', stream_options: { include_usage: true } });
    const after = Math.floor(Date.now() / 1000);
    const created = JSON.parse(writer.chunk(text('a')) as string).created;
    expect(Number.isInteger(created)).toBe(true);
    expect(created).toBeGreaterThanOrEqual(before);
    expect(created).toBeLessThanOrEqual(after);
    writer.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(JSON.parse(writer.usageChunk() as string).created).toBe(created);
    expect((writer.whole() as { created: number }).created).toBe(created);
  });

  it("a streamed chunk keeps the worker's choice index; text that is not a string counts as none", () => {
    const writer = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    const second = JSON.parse(writer.chunk(Annotated.fromData({ token_ids: [], text: 'b', index: 1 })) as string)
      .choices[0];
    expect(second).toEqual({ index: 1, text: 'b', logprobs: null, finish_reason: null });
    expect(writer.chunk(Annotated.fromData({ token_ids: [], text: 5 } as never))).toBeUndefined();
    const finishOnly = JSON.parse(
      writer.chunk(Annotated.fromData({ token_ids: [], text: 5, finish_reason: 'stop' } as never)) as string,
    );
    expect(finishOnly.choices[0]).toEqual({ index: 0, text: '', logprobs: null, finish_reason: 'stop' });
  });

  it('chat: the role goes once, on the first chunk that is written, even when that chunk only finishes', () => {
    const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'm' });
    expect(writer.chunk(text(''))).toBeUndefined();
    const first = JSON.parse(writer.chunk(Annotated.fromData(LLMEngineOutput.eos())) as string);
    expect(first.choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(JSON.parse(writer.chunk(text('x')) as string).choices[0].delta).toEqual({ content: 'x' });
  });

  it('the usage chunk: only include_usage true asks for it, and only once a usage has come', () => {
    for (const include_usage of ['true', 1, {}]) {
      const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'm', stream_options: { include_usage } });
      writer.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
      expect(writer.usageChunk()).toBeUndefined();
    }
    const waiting = new OpenAIWriter(endpointNamed('completions'), {
      model: 'm',
      stream_options: { include_usage: true },
    });
    waiting.chunk(text('a'));
    expect(waiting.usageChunk()).toBeUndefined();
    waiting.chunk(Annotated.fromData({ token_ids: [], completion_usage: null } as never));
    expect(waiting.usageChunk()).toBeUndefined();
    waiting.chunk(Annotated.fromData({ token_ids: [], completion_usage: usage }));
    expect(JSON.parse(waiting.usageChunk() as string)).toEqual({
      id: expect.stringMatching(/^cmpl-/),
      object: 'text_completion',
      created: expect.any(Number),
      model: 'm',
      choices: [],
      usage,
    });
  });

  it('the whole answer: one empty stopped choice when nothing came, no usage key without a usage', () => {
    const writer = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    writer.add({ event: 'x' } as never);
    writer.add({ data: null, event: 'x' } as never);
    writer.add(Annotated.fromData({ token_ids: [], completion_usage: null } as never));
    const whole = writer.whole() as Record<string, unknown>;
    expect(whole).toEqual({
      id: expect.stringMatching(/^cmpl-/),
      object: 'text_completion',
      created: expect.any(Number),
      model: 'm',
      choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }],
    });
    expect('usage' in whole).toBe(false);
  });

  it("the whole answer keeps the last usage and each choice's last finish; text that is not a string adds nothing", () => {
    const writer = new OpenAIWriter(endpointNamed('chat'), { model: 'm' });
    writer.add(Annotated.fromData({ token_ids: [], text: 'a', completion_usage: { ...usage, completion_tokens: 1 } }));
    writer.add(Annotated.fromData({ token_ids: [], text: 3 } as never));
    writer.add(Annotated.fromData({ token_ids: [], text: 'b', finish_reason: null } as never));
    writer.add(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(writer.whole()).toEqual({
      id: expect.stringMatching(/^chatcmpl-/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'ab' }, logprobs: null, finish_reason: 'length' }],
      usage,
    });
  });
});

/** The `data:` payloads of SSE text. */
const datas = (text: string) => [...text.matchAll(/^data: (.*)$/gm)].map((match) => match[1] as string);
/** What ends a stream before `[DONE]`: its payloads but the last, which must be `[DONE]`. */
const closings = (text: string) => {
  const all = datas(text);
  expect(all.at(-1)).toBe('[DONE]');
  return all.slice(0, -1);
};

describe('ResponseWriter', () => {
  const relayed = (json: Record<string, unknown>, textOf?: string, form: 'event' | 'body' = 'event') =>
    Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: String(json.t ?? '') }), [
      { form, text: textOf, json },
    ]);

  it('an item from a worker goes on byte for byte; one the flow changed goes on as its JSON', () => {
    const writer = new ResponseWriter(endpointNamed('completions'), { model: 'm' });
    expect(datas(writer.sse(relayed({ t: 'a' }, '{"t":  "a"}')))).toEqual(['{"t":  "a"}']);
    expect(datas(writer.sse(relayed({ t: 'b', extra: [1] })))).toEqual(['{"t":"b","extra":[1]}']);
  });

  it('an item that did not come from a worker is written as OpenAI JSON, one that says nothing as no chunk', () => {
    const writer = new ResponseWriter(endpointNamed('chat'), { model: 'm' });
    const [chunk, ...rest] = datas(writer.sse(text('hi')));
    expect(rest).toEqual([]);
    expect(JSON.parse(chunk as string).choices[0].delta).toEqual({ role: 'assistant', content: 'hi' });
    expect(datas(writer.sse(text('')))).toEqual([]);
  });

  it('a whole body in the wire of a streamed item is not an event: the item is re-created', () => {
    const writer = new ResponseWriter(endpointNamed('completions'), { model: 'm' });
    const [chunk] = datas(writer.sse(relayed({ t: 'z' }, '{"t":"z"}', 'body')));
    expect(JSON.parse(chunk as string)).toMatchObject({ object: 'text_completion', choices: [{ text: 'z' }] });
  });

  it('closing: no usage chunk after a relayed stream (the worker sent its own), a re-created one otherwise', () => {
    const body = { model: 'm', stream_options: { include_usage: true } };
    const relay = new ResponseWriter(endpointNamed('completions'), body);
    datas(
      relay.sse(
        Annotated.withWire(Annotated.fromData({ token_ids: [], completion_usage: usage }), [
          { form: 'event', text: '{"usage":{}}', json: { usage: {} } },
        ]),
      ),
    );
    expect(closings(relay.end())).toEqual([]);
    // An item the flow made after relayed ones (a usage of its own) does not add a second usage chunk.
    datas(relay.sse(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage })));
    expect(closings(relay.end())).toEqual([]);
    const recreate = new ResponseWriter(endpointNamed('completions'), body);
    datas(recreate.sse(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage })));
    const [closing, ...rest] = closings(recreate.end());
    expect(rest).toEqual([]);
    expect(JSON.parse(closing as string)).toMatchObject({ choices: [], usage });
    expect(closings(new ResponseWriter(endpointNamed('completions'), { model: 'm' }).end())).toEqual([]);
  });

  it('an item whose wire mixes an event with a body is re-created whole, not relayed in part', () => {
    const writer = new ResponseWriter(endpointNamed('completions'), { model: 'm' });
    const mixed = Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: 'q' }), [
      { form: 'event', text: '{"e":1}', json: { e: 1 } },
      { form: 'body', text: '{"b":1}', json: { b: 1 } },
    ]);
    const [chunk, ...rest] = datas(writer.sse(mixed));
    expect(rest).toEqual([]);
    expect(JSON.parse(chunk as string)).toMatchObject({ choices: [{ text: 'q' }] });
  });

  it("whole: one item with the worker's body is that body; anything else is re-created", () => {
    const body = { id: 'cmpl-worker', choices: [{ text: 'w' }] };
    expect(
      new ResponseWriter(endpointNamed('completions'), { model: 'm' }).whole([
        relayed(body, JSON.stringify(body), 'body'),
      ]),
    ).toBe(body);
    const events = new ResponseWriter(endpointNamed('completions'), { model: 'm' }).whole([
      relayed({ t: 'e' }, '{"t":"e"}'),
    ]);
    expect(events).toMatchObject({ object: 'text_completion', choices: [{ text: 'e' }] });
    const two = new ResponseWriter(endpointNamed('completions'), { model: 'm' }).whole([
      relayed({ t: 'a' }, '{"t":"a"}', 'body'),
      relayed({ t: 'b' }, '{"t":"b"}', 'body'),
    ]);
    expect(two).toMatchObject({ choices: [{ text: 'ab' }] });
    const split = Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: 'c' }), [
      { form: 'body', text: '{}', json: {} },
      { form: 'body', text: '{}', json: {} },
    ]);
    expect(new ResponseWriter(endpointNamed('completions'), { model: 'm' }).whole([split])).toMatchObject({
      choices: [{ text: 'c' }],
    });
  });

  it('usage: the last one a worker reported, streamed or whole, none before', () => {
    const writer = new ResponseWriter(endpointNamed('chat'), { model: 'm' });
    expect(writer.usage).toBeUndefined();
    datas(
      writer.sse(Annotated.fromData({ token_ids: [], text: 'a', completion_usage: { ...usage, total_tokens: 1 } })),
    );
    datas(writer.sse(Annotated.fromData({ token_ids: [], text: 'b', completion_usage: null } as never)));
    expect(writer.usage).toEqual({ ...usage, total_tokens: 1 });
    const whole = new ResponseWriter(endpointNamed('chat'), { model: 'm' });
    whole.whole([Annotated.fromData({ token_ids: [], text: 'a', completion_usage: usage })]);
    expect(whole.usage).toEqual(usage);
  });
});

describe('what an item without a field leaves as it was', () => {
  const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };

  it('a later item without usage or finish keeps the usage and finish reported before', () => {
    const chat = new OpenAIWriter(endpointNamed('chat'), { model: 'm', stream_options: { include_usage: true } });
    chat.chunk(Annotated.fromData({ token_ids: [], text: 'a', completion_usage: usage }));
    chat.chunk(Annotated.fromData({ token_ids: [], text: 'b' }));
    chat.chunk(Annotated.fromData({ token_ids: [], text: 'c', finish_reason: null, completion_usage: null } as never));
    const closing = JSON.parse(chat.usageChunk() as string);
    expect(closing).toMatchObject({ object: 'chat.completion.chunk', choices: [], usage });
    const whole = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    whole.add(
      Annotated.fromData({ token_ids: [], text: 'a', finish_reason: 'length', completion_usage: usage } as never),
    );
    whole.add(Annotated.fromData({ token_ids: [], text: 'b' }));
    whole.add(Annotated.fromData({ token_ids: [], text: 'c', finish_reason: null, completion_usage: null } as never));
    expect(whole.whole()).toMatchObject({ choices: [{ text: 'abc', finish_reason: 'length' }], usage });
  });

  it('a null finish reason is no finish', () => {
    const writer = new OpenAIWriter(endpointNamed('completions'), { model: 'm' });
    const chunk = JSON.parse(
      writer.chunk(Annotated.fromData({ token_ids: [], text: 'a', finish_reason: null } as never)) as string,
    );
    expect(chunk.choices[0].finish_reason).toBeNull();
  });

  it('ResponseWriter: an item without data adds nothing and keeps the usage', () => {
    const writer = new ResponseWriter(endpointNamed('chat'), { model: 'm' });
    datas(writer.sse(Annotated.fromData({ token_ids: [], text: 'a', completion_usage: usage })));
    expect(datas(writer.sse({ event: 'ping' } as never))).toEqual([]);
    datas(writer.sse(Annotated.fromData({ token_ids: [], text: 'b' })));
    expect(writer.usage).toEqual(usage);
    const whole = new ResponseWriter(endpointNamed('chat'), { model: 'm' });
    whole.whole([
      Annotated.fromData({ token_ids: [], text: 'a', completion_usage: usage }),
      { event: 'ping' } as never,
    ]);
    expect(whole.usage).toEqual(usage);
  });
});
