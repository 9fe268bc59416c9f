import { describe, expect, it } from 'vitest';
import { OPENAI_OBJECTS, openAIShape, streamedChoice, wholeChoice } from '../../src/endpoints/openai-shapes.js';

describe("OpenAI's answer shapes, written once", () => {
  it("chat streams deltas (the role on a choice's first chunk, nothing for an empty text) and answers a message", () => {
    expect(streamedChoice('chat', 0, 'Hi', null, { role: 'assistant' })).toEqual({
      index: 0,
      delta: { role: 'assistant', content: 'Hi' },
      logprobs: null,
      finish_reason: null,
    });
    expect(streamedChoice('chat', 1, '', 'stop')).toEqual({
      index: 1,
      delta: {},
      logprobs: null,
      finish_reason: 'stop',
    });
    expect(wholeChoice('chat', 0, 'Hi', 'length')).toEqual({
      index: 0,
      message: { role: 'assistant', content: 'Hi' },
      logprobs: null,
      finish_reason: 'length',
    });
  });

  it('completions stream and answer texts; what a worker added to a choice goes after', () => {
    expect(streamedChoice('text', 0, 'x', null, { extra: { stop_reason: 7, token_ids: [3] } })).toEqual({
      index: 0,
      text: 'x',
      logprobs: null,
      finish_reason: null,
      stop_reason: 7,
      token_ids: [3],
    });
    expect(wholeChoice('text', 2, 'y', 'stop')).toEqual({ index: 2, text: 'y', logprobs: null, finish_reason: 'stop' });
  });

  it('objects and id prefixes as OpenAI and vLLM name them; every other answer shape writes as completions', () => {
    expect(OPENAI_OBJECTS).toEqual({
      chat: { chunk: 'chat.completion.chunk', whole: 'chat.completion', idPrefix: 'chatcmpl' },
      text: { chunk: 'text_completion', whole: 'text_completion', idPrefix: 'cmpl' },
    });
    expect(openAIShape('chat')).toBe('chat');
    expect(openAIShape('generate')).toBe('text');
  });
});
