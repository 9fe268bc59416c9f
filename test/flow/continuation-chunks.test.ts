import { describe, expect, it } from 'vitest';
import { StreamRecord } from '../../src/flow/continuation-chunks.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import type { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';

/** An item as the HTTP engine reads it: its data and the worker's chunk. */
function item(data: Partial<LLMEngineOutput>, json: Record<string, unknown>): EngineItem {
  const wired = Annotated.fromData<LLMEngineOutput>({ token_ids: [], ...data });
  return Annotated.withWire(wired, [{ form: 'event', text: JSON.stringify(json), json }]);
}

const head = { id: 'cmpl-first', object: 'text_completion', created: 100, model: 'm' };
const completionChunk = (text: string, ids: number[], extra: Record<string, unknown> = {}) =>
  item(
    { text, token_ids: ids },
    { ...head, choices: [{ index: 0, text, token_ids: ids, finish_reason: null, ...extra }] },
  );
const continuationChunk = (text: string, ids: number[], finish: string | null = null) =>
  item(
    { text, token_ids: ids, ...(finish === null ? {} : { finish_reason: finish as 'length' }) },
    {
      id: 'cmpl-second',
      object: 'text_completion',
      created: 200,
      model: 'm',
      choices: [{ index: 0, text, token_ids: ids, finish_reason: finish, stop_reason: null }],
    },
  );
const json = (out: EngineItem | undefined) => Annotated.wire(out)?.[0]?.json;

describe("a migrating stream's record", () => {
  it("strips the token ids the router asked for from the first worker's chunks, and keeps them for a resume", () => {
    const record = new StreamRecord('completions', false);
    const out = record.original(completionChunk('Hello', [7], { prompt_token_ids: [1, 2] }));
    expect(json(out)).toEqual({ ...head, choices: [{ index: 0, text: 'Hello', finish_reason: null }] });
    expect(Annotated.wire(out)?.[0]?.text).toBeUndefined();
    expect(record.promptIds).toEqual([1, 2]);
    expect(record.generatedIds).toEqual([7]);
    expect(record.delivered).toBe('Hello');
  });

  it("takes the engine's prompt ids over the router's tokenizer's: they are what it computed", () => {
    const record = new StreamRecord('completions', false, [9, 9]);
    expect(record.promptIds).toEqual([9, 9]);
    record.original(completionChunk('Hi', [7], { prompt_token_ids: [1, 2, 3] }));
    expect(record.promptIds).toEqual([1, 2, 3]);
  });

  it('leaves the chunks as the worker sent them when the client asked for token ids itself', () => {
    const record = new StreamRecord('completions', true);
    const original = completionChunk('Hi', [7], { prompt_token_ids: [1] });
    expect(record.original(original)).toBe(original);
  });

  it("learns chat's prompt ids from the top of its first chunk, and a delta the chat server parses", () => {
    const record = new StreamRecord('chat', false);
    record.original(
      item(
        { text: '' },
        { id: 'c', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }], prompt_token_ids: [5, 6] },
      ),
    );
    expect(record.promptIds).toEqual([5, 6]);
    record.original(item({ text: '' }, { id: 'c', choices: [{ index: 0, delta: { reasoning_content: 'hmm' } }] }));
    expect(record.parsed).toBe('reasoning');
    record.original(item({ text: 'ok' }, { id: 'c', choices: [{ index: 0, delta: { content: 'ok' } }] }));
    expect(record.parsed).toBeUndefined();
    record.original(item({ text: '' }, { id: 'c', choices: [{ index: 0, delta: { tool_calls: [{ index: 0 }] } }] }));
    expect(record.parsed).toBe('a tool call');
  });

  it('ids of chunks that said nothing yet (part of a character) are left out of a resume', () => {
    const record = new StreamRecord('completions', false);
    record.original(completionChunk('a', [1]));
    record.original(completionChunk('', [2]));
    expect(record.generatedIds).toEqual([1]);
    record.original(completionChunk('é', [3]));
    expect(record.generatedIds).toEqual([1, 2, 3]);
    record.original(completionChunk('', [4]));
    expect(record.generatedIds).toEqual([1, 2, 3]);
  });

  it('notes a chunk with text but no ids: the worker does not return them', () => {
    const record = new StreamRecord('completions', false);
    record.original(item({ text: 'x' }, { ...head, choices: [{ index: 0, text: 'x' }] }));
    expect(record.missingIds).toBe(true);
  });

  it("a resumed completion's chunks take the first id, creation time and model, without the ids", () => {
    const record = new StreamRecord('completions', false, [1, 2, 3]);
    record.original(completionChunk('tok0 ', [2000]));
    record.continueAs('resume');
    const out = record.continued(continuationChunk('tok1 ', [2001]));
    expect(json(out)).toEqual({
      id: 'cmpl-first',
      object: 'text_completion',
      created: 100,
      model: 'm',
      choices: [{ index: 0, text: 'tok1 ', logprobs: null, finish_reason: null, stop_reason: null }],
    });
    expect(record.generatedIds).toEqual([2000, 2001]);
  });

  it("a resumed chat's chunks are chat deltas of the first stream, its role chunk dropped", () => {
    const record = new StreamRecord('chat', false, [1]);
    record.original(
      item(
        { text: 'a' },
        {
          id: 'chatcmpl-1',
          object: 'chat.completion.chunk',
          created: 5,
          model: 'm',
          system_fingerprint: 'fp',
          choices: [{ index: 0, delta: { content: 'a' }, token_ids: [9] }],
        },
      ),
    );
    record.continueAs('resume');
    expect(record.continued(continuationChunk('', []))).toBeUndefined();
    expect(json(record.continued(continuationChunk('b', [10])))).toEqual({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 5,
      model: 'm',
      system_fingerprint: 'fp',
      choices: [{ index: 0, delta: { content: 'b' }, logprobs: null, finish_reason: null, stop_reason: null }],
    });
    const end = record.continued(continuationChunk('', [], 'length'));
    expect(json(end)).toMatchObject({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }] });
    expect(record.finished).toBe(true);
  });

  it("a resume's usage counts the client's prompt and every generated token once", () => {
    const record = new StreamRecord('completions', false, [1, 2, 3]);
    record.original(completionChunk('a', [7]));
    record.original(completionChunk('b', [8]));
    record.continueAs('resume');
    const usage = {
      prompt_tokens: 5,
      completion_tokens: 4,
      total_tokens: 9,
      prompt_tokens_details: { cached_tokens: 5 },
    };
    const out = record.continued(
      Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], completion_usage: usage }), [
        { form: 'event', text: undefined, json: { id: 'x', choices: [], usage } },
      ]),
    );
    const expected = { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 };
    expect(out?.data?.completion_usage).toEqual(expected);
    expect(json(out)).toEqual({
      id: 'cmpl-first',
      object: 'text_completion',
      created: 100,
      model: 'm',
      choices: [],
      usage: expected,
    });
  });

  it('a replay skips what the client has, and fails when it does not repeat it', () => {
    const record = new StreamRecord('completions', false);
    record.original(completionChunk('Hello ', [1]));
    record.original(completionChunk('wor', [2]));
    record.continueAs('replay');
    expect(record.continued(continuationChunk('Hello ', [1]))).toBeUndefined();
    expect(record.continued(continuationChunk('world', [2]))?.data?.text).toBe('ld');
    expect(record.delivered).toBe('Hello world');
    const other = new StreamRecord('completions', false);
    other.original(completionChunk('Hello', [1]));
    other.continueAs('replay');
    expect(() => other.continued(continuationChunk('Help', [1]))).toThrow(/does not repeat/);
    const short = new StreamRecord('completions', false);
    short.original(completionChunk('Hello', [1]));
    short.continueAs('replay');
    expect(() => short.continued(continuationChunk('He', [1], 'stop'))).toThrow(/does not repeat/);
  });
});

describe("a spent budget's length finish", () => {
  it('a completion: the first chunk’s id, creation time and model, an empty text, finish length; usage when asked', () => {
    // A completion of the prompt [1, 2, 3] that had two tokens when it broke.
    const twoTokensIn = () => {
      const record = new StreamRecord('completions', false, [1, 2, 3]);
      record.original(completionChunk('Hi', [7]));
      record.original(completionChunk(' there', [8]));
      return record;
    };
    const record = twoTokensIn();
    const plain = record.lengthFinish(false);
    expect(Annotated.wire(plain)?.map((chunk) => chunk.json)).toEqual([
      { ...head, choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'length' }] },
    ]);
    expect(plain.data).toMatchObject({ finish_reason: 'length', token_ids: [] });
    expect(plain.data?.completion_usage).toBeUndefined();
    expect(record.finished).toBe(true);
    const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
    const counted = twoTokensIn().lengthFinish(true);
    expect(Annotated.wire(counted)?.map((chunk) => chunk.json)).toEqual([
      { ...head, choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'length' }] },
      { ...head, choices: [], usage },
    ]);
    expect(counted.data?.completion_usage).toEqual(usage);
  });

  it('a chat: chat chunks with an empty delta, the system fingerprint kept; no prompt ids known counts none', () => {
    const record = new StreamRecord('chat', false);
    const chatHead = {
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 5,
      model: 'm',
      system_fingerprint: 'fp',
    };
    record.original(
      item(
        { text: 'Hi', token_ids: [7] },
        { ...chatHead, choices: [{ index: 0, delta: { content: 'Hi' }, token_ids: [7] }] },
      ),
    );
    const out = record.lengthFinish(true);
    expect(Annotated.wire(out)?.map((chunk) => chunk.json)).toEqual([
      { ...chatHead, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'length' }] },
      { ...chatHead, choices: [], usage: { prompt_tokens: 0, completion_tokens: 1, total_tokens: 1 } },
    ]);
  });
});

describe("a migrating stream's record, at the edges of what workers send", () => {
  it('a chunk with no token ids in it stays as the worker wrote it; one that has some loses every one', () => {
    const record = new StreamRecord('completions', false);
    const untouched = item({ text: 'Hi', token_ids: [7] }, { ...head, choices: [{ index: 0, text: 'Hi' }] });
    const written = Annotated.wire(untouched)?.[0]; // withWire sets the item's chunks in place
    expect(Annotated.wire(record.original(untouched))?.[0]).toBe(written);
    const two = item(
      { text: 'a', token_ids: [3] },
      {
        ...head,
        choices: [
          { index: 0, text: 'a' },
          { index: 1, text: 'b', token_ids: [3], prompt_token_ids: [1] },
        ],
      },
    );
    expect(json(record.original(two))).toEqual({
      ...head,
      choices: [
        { index: 0, text: 'a' },
        { index: 1, text: 'b' },
      ],
    });
    const inChoice = item(
      { text: 'c', token_ids: [4] },
      { ...head, choices: [{ index: 0, text: 'c', prompt_token_ids: [1] }] },
    );
    expect(json(record.original(inChoice))).toEqual({ ...head, choices: [{ index: 0, text: 'c' }] });
    const top = item({ text: '' }, { ...head, prompt_token_ids: [1, 2] });
    expect(json(record.original(top))).toEqual(head); // no choices added where there were none
  });

  it('the template is the first chunk that has an id; a chunk without choices is read too', () => {
    const record = new StreamRecord('completions', false, [1]);
    record.original(item({ text: '' }, { choices: [] }));
    record.original(item({ text: 'a', token_ids: [5] }, { ...head, choices: [{ index: 0, text: 'a' }] }));
    record.original(
      item({ text: 'b', token_ids: [6] }, { ...head, id: 'cmpl-later', choices: [{ index: 0, text: 'b' }] }),
    );
    record.continueAs('resume');
    expect(json(record.continued(continuationChunk('c', [7])))).toMatchObject({ id: 'cmpl-first', created: 100 });
  });

  it("without a template, a continuation's chunk keeps its own id, creation time and model", () => {
    const record = new StreamRecord('completions', false, [1]);
    record.original(Annotated.fromData<LLMEngineOutput>({ token_ids: [5], text: 'a' })); // an engine of your own: no wire
    record.continueAs('resume');
    expect(json(record.continued(continuationChunk('b', [6])))).toMatchObject({
      id: 'cmpl-second',
      created: 200,
      model: 'm',
    });
  });

  it('what the chat server parses: a tool call stays one once content follows; empty lists and texts are nothing', () => {
    const chat = (delta: Record<string, unknown>) => item({ text: '' }, { id: 'c', choices: [{ index: 0, delta }] });
    const record = new StreamRecord('chat', false);
    record.original(chat({ tool_calls: [] }));
    record.original(chat({ reasoning_content: '' }));
    expect(record.parsed).toBeUndefined();
    record.original(chat({ tool_calls: [{ index: 0 }] }));
    record.original(chat({ content: 'ok' }));
    expect(record.parsed).toBe('a tool call');
  });

  it("what the record notes of the first worker's items: a finish, and no missing ids for a chunk that said nothing", () => {
    const record = new StreamRecord('chat', false);
    record.original(item({ text: '' }, { id: 'c', choices: [{ index: 0, delta: { role: 'assistant' } }] }));
    expect(record.missingIds).toBe(false);
    record.original(item({ text: 'a', token_ids: [1], finish_reason: null }, { id: 'c', choices: [] }));
    expect(record.finished).toBe(false);
    record.original(item({ text: '', finish_reason: 'stop' }, { id: 'c', choices: [] }));
    expect(record.finished).toBe(true);
    const comment = { comment: ['keep-alive'] } as EngineItem; // no data at all
    expect(record.original(comment)).toBe(comment);
  });

  it('a replay counts what it generates once, from the start; a finish that completes the repeat is no mismatch', () => {
    const record = new StreamRecord('completions', false, [1, 2]);
    record.original(completionChunk('Hello', [7]));
    record.continueAs('replay');
    expect(record.continued(continuationChunk('Hel', [7]))).toBeUndefined();
    expect(record.continued(continuationChunk('lo world', [8]))?.data?.text).toBe(' world');
    expect(record.generatedIds).toEqual([7, 8]);
    const exact = new StreamRecord('completions', false);
    exact.original(completionChunk('Hello', [7]));
    exact.continueAs('replay');
    expect(exact.continued(continuationChunk('Hello', [7], 'stop'))?.data).toMatchObject({
      text: '',
      finish_reason: 'stop',
    });
    const usage = { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 };
    const counted = record.continued(
      Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], completion_usage: usage }), [
        { form: 'event', text: undefined, json: { id: 'x', choices: [], usage } },
      ]),
    );
    expect(counted?.data?.completion_usage).toEqual(usage); // nothing carried over from the first worker
  });

  it("a resume's usage without known prompt ids: the continuation's prompt less what it carried", () => {
    const record = new StreamRecord('completions', false);
    record.original(completionChunk('a', [7]));
    record.original(completionChunk('b', [8]));
    record.continueAs('resume');
    const usage = { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 };
    const out = record.continued(
      Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], completion_usage: usage }), [
        { form: 'event', text: undefined, json: { id: 'x', choices: [], usage } },
      ]),
    );
    expect(out?.data?.completion_usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
  });

  it("a continuation's chunks: token ids when the client asked for them, no null usage, a finish is noted only when there is one", () => {
    const kept = new StreamRecord('completions', true, [1]);
    kept.original(completionChunk('a', [7]));
    kept.continueAs('resume');
    expect(json(kept.continued(continuationChunk('b', [8])))).toMatchObject({ choices: [{ token_ids: [8] }] });
    expect(kept.finished).toBe(false);
    const withNull = item(
      { text: 'c', token_ids: [9], finish_reason: null },
      { id: 'y', choices: [{ index: 0, text: 'c' }], usage: null },
    );
    expect(json(kept.continued(withNull))).not.toHaveProperty('usage');
    expect(kept.finished).toBe(false);
    const noText = Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [10] }), [
      { form: 'event', text: undefined, json: { id: 'y', choices: [{ index: 0 }] } },
    ]);
    expect(kept.continued(noText)).toBeUndefined(); // no text yet: nothing new for the client
    const comment = { comment: ['keep-alive'] } as EngineItem;
    expect(kept.continued(comment)).toBe(comment);
  });

  it("a spent budget's chunks are events", () => {
    const record = new StreamRecord('completions', false, [1]);
    record.original(completionChunk('a', [7]));
    expect(Annotated.wire(record.lengthFinish(true))?.map((chunk) => chunk.form)).toEqual(['event', 'event']);
  });
});
