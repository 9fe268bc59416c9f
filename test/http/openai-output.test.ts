import { describe, expect, it } from 'vitest';
import { generateReader, outputFromOpenAI } from '../../src/http/openai-output.js';
import { Annotated } from '../../src/protocol/annotated.js';

describe('outputFromOpenAI', () => {
  it('a completions chunk: text, index, finish reason', () => {
    expect(outputFromOpenAI({ choices: [{ index: 0, text: 'Hi', finish_reason: null }] }).data).toEqual({
      token_ids: [],
      text: 'Hi',
      index: 0,
    });
    expect(outputFromOpenAI({ choices: [{ text: '', finish_reason: 'length' }] }).data?.finish_reason).toBe('length');
  });

  it('a chat chunk (delta) and a whole chat response (message)', () => {
    expect(outputFromOpenAI({ choices: [{ delta: { content: 'Hel' } }] }).data?.text).toBe('Hel');
    expect(
      outputFromOpenAI({ choices: [{ message: { content: 'Hello' }, finish_reason: 'stop' }] }).data,
    ).toMatchObject({
      text: 'Hello',
      finish_reason: 'stop',
    });
  });

  it("vLLM's abort is a cancellation; tool calls finish as stop; an unknown reason as stop", () => {
    expect(outputFromOpenAI({ choices: [{ finish_reason: 'abort' }] }).data?.finish_reason).toBe('cancelled');
    expect(outputFromOpenAI({ choices: [{ finish_reason: 'tool_calls' }] }).data?.finish_reason).toBe('stop');
    expect(outputFromOpenAI({ choices: [{ finish_reason: 'weird' }] }).data?.finish_reason).toBe('stop');
  });

  it("a prefill answer's kv_transfer_params (or disaggregated_params) and usage are kept", () => {
    const usage = {
      prompt_tokens: 9,
      completion_tokens: 1,
      total_tokens: 10,
      prompt_tokens_details: { cached_tokens: 4 },
    };
    const params = { remote_engine_id: 'e', remote_block_ids: [1] };
    expect(
      outputFromOpenAI({ choices: [{ text: 'x', finish_reason: 'length' }], usage, kv_transfer_params: params }).data,
    ).toMatchObject({
      completion_usage: usage,
      disaggregated_params: params,
    });
    expect(
      outputFromOpenAI({ choices: [], disaggregated_params: { ctx_request_id: 5 } }).data?.disaggregated_params,
    ).toEqual({
      ctx_request_id: 5,
    });
  });

  it("an error body is an error item with the worker's text", () => {
    expect(Annotated.err(outputFromOpenAI({ object: 'error', message: 'bad', code: 400 }))?.message).toBe('bad');
    expect(Annotated.err(outputFromOpenAI({ error: { message: 'overloaded' } }))?.message).toBe('overloaded');
    expect(Annotated.err(outputFromOpenAI({ error: 'plain' }))?.message).toBe('plain');
  });
});

describe('generateReader (SGLang /generate)', () => {
  it('gives the new part of each cumulative chunk, and usage at the end', () => {
    const read = generateReader();
    expect(read({ text: 'Hel', meta_info: { finish_reason: null } }).data?.text).toBe('Hel');
    expect(read({ text: 'Hello', meta_info: { finish_reason: null } }).data?.text).toBe('lo');
    const last = read({
      text: 'Hello!',
      meta_info: { finish_reason: { type: 'length' }, prompt_tokens: 3, completion_tokens: 4, cached_tokens: 2 },
    });
    expect(last.data).toEqual({
      token_ids: [],
      text: '!',
      finish_reason: 'length',
      completion_usage: {
        prompt_tokens: 3,
        completion_tokens: 4,
        total_tokens: 7,
        prompt_tokens_details: { cached_tokens: 2 },
      },
    });
    expect(generateReader()({ text: '', meta_info: { finish_reason: { type: 'abort' } } }).data?.finish_reason).toBe(
      'cancelled',
    );
  });
});

describe('outputFromOpenAI, field by field', () => {
  it('finish reasons: none for null, missing or not_finished; an error finish with the worker words or a default', () => {
    const reason = (choice: Record<string, unknown>) => outputFromOpenAI({ choices: [choice] }).data?.finish_reason;
    expect(reason({ finish_reason: null })).toBeUndefined();
    expect(reason({})).toBeUndefined();
    expect(reason({ finish_reason: 'not_finished' })).toBeUndefined();
    expect(reason({ finish_reason: 'function_call' })).toBe('stop');
    expect(reason({ finish_reason: 'length' })).toBe('length');
    expect(reason({ finish_reason: 'error', stop_reason: 'CUDA OOM' })).toEqual({ error: 'CUDA OOM' });
    expect(reason({ finish_reason: 'error', stop_reason: '' })).toEqual({ error: 'the worker reported an error' });
    expect(reason({ finish_reason: 'error', stop_reason: 7 })).toEqual({ error: 'the worker reported an error' });
  });

  it("error bodies in each shape the engines use, with the worker's words; anything else is no error", () => {
    const text = (json: unknown) => Annotated.err(outputFromOpenAI(json))?.message;
    expect(text({ error: { code: 500 } })).toBe('{"code":500}');
    expect(text({ object: 'error' })).toBe('error');
    expect(text({ object: 'error', message: 'bad' })).toBe('bad');
    for (const json of ['a string', null, 42, { object: 'text_completion', choices: [] }, { error: null }]) {
      expect(Annotated.isError(outputFromOpenAI(json)), JSON.stringify(json)).toBe(false);
    }
  });

  it('takes only well-typed fields: text, token ids, index, usage and handoff parameters', () => {
    expect(
      outputFromOpenAI({ choices: [{ text: 5, token_ids: 'x', index: '0' }], usage: null, kv_transfer_params: null })
        .data,
    ).toEqual({ token_ids: [] });
    expect(outputFromOpenAI({ choices: [{ text: 'a', token_ids: [7, 8], index: 2 }], usage: 'many' }).data).toEqual({
      token_ids: [7, 8],
      text: 'a',
      index: 2,
    });
    expect(outputFromOpenAI({ choices: 'none' }).data).toEqual({ token_ids: [] });
  });
});

describe('generateReader, field by field', () => {
  it("SGLang's abort is a cancellation, an error finish keeps its message, and an error body is an error item", () => {
    expect(generateReader()({ text: 'x', meta_info: { finish_reason: { type: 'abort' } } }).data?.finish_reason).toBe(
      'cancelled',
    );
    expect(
      generateReader()({ meta_info: { finish_reason: { type: 'error', message: 'boom' } } }).data?.finish_reason,
    ).toEqual({ error: 'boom' });
    expect(Annotated.err(generateReader()({ error: 'overloaded' }))?.message).toBe('overloaded');
    const read = generateReader();
    expect(read({ text: 7, meta_info: { finish_reason: 'stop' } }).data).toEqual({ token_ids: [] });
  });
});
