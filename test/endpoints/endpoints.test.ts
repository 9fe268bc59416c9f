import { describe, expect, it } from 'vitest';
import { budgetOf } from '../../src/endpoints/endpoint.js';
import { ENDPOINTS, endpointNamed, endpointOf, isEndpointName } from '../../src/endpoints/registry.js';

describe('the endpoints: each API the router serves, declared once', () => {
  it('one entry per API, each at its own path: the generations disaggregated, the pooling APIs passed through', () => {
    expect(ENDPOINTS.map((each) => [each.name, each.path, each.serving])).toEqual([
      ['completions', '/v1/completions', 'disaggregated'],
      ['chat', '/v1/chat/completions', 'disaggregated'],
      ['generate', '/generate', 'disaggregated'],
      ['responses', '/v1/responses', 'disaggregated'],
      ['messages', '/v1/messages', 'disaggregated'],
      ['embeddings', '/v1/embeddings', 'passthrough'],
      ['rerank', '/v1/rerank', 'passthrough'],
      ['score', '/v1/score', 'passthrough'],
      ['classify', '/v1/classify', 'passthrough'],
      ['pooling', '/pooling', 'passthrough'],
      ['count_tokens', '/v1/messages/count_tokens', 'passthrough'],
      ['tokenize', '/tokenize', 'passthrough'],
      ['detokenize', '/detokenize', 'passthrough'],
    ]);
    expect(new Set(ENDPOINTS.map((each) => each.path)).size).toBe(ENDPOINTS.length);
  });

  it("a name no endpoint has is the program's mistake: a TypeError listing those there are", () => {
    expect(() => endpointNamed('conversations')).toThrow(
      new TypeError(
        "Unknown endpoint 'conversations': expected one of completions, chat, generate, responses, messages, embeddings, rerank, score, classify, pooling, count_tokens, tokenize, detokenize",
      ),
    );
    expect(isEndpointName('rerank')).toBe(true);
    expect(isEndpointName('conversations')).toBe(false);
    expect(isEndpointName(3)).toBe(false);
  });

  it("a body alone says its generation endpoint: messages is chat, a text or ids without a prompt SGLang's /generate, else completions", () => {
    expect(endpointOf({ messages: [] }).name).toBe('chat');
    expect(endpointOf({ text: 'Hi' }).name).toBe('generate');
    expect(endpointOf({ input_ids: [1, 2] }).name).toBe('generate');
    expect(endpointOf({ input_embeds: [[0.1]] }).name).toBe('generate');
    expect(endpointOf({ prompt: 'Hi', text: 'x' }).name).toBe('completions');
    expect(endpointOf({ text: null }).name).toBe('completions');
    expect(endpointOf({}).name).toBe('completions');
  });

  it('the output cap is read as the engines read it: chat max_completion_tokens before max_tokens; /generate nested', () => {
    const chat = endpointNamed('chat');
    expect(budgetOf(chat, { max_tokens: 10, max_completion_tokens: 20 })).toEqual({
      field: 'max_completion_tokens',
      tokens: 20,
    });
    expect(budgetOf(chat, { max_tokens: 10 })).toEqual({ field: 'max_tokens', tokens: 10 });
    expect(budgetOf(endpointNamed('completions'), { max_completion_tokens: 20 })).toBeUndefined();
    const generate = endpointNamed('generate');
    expect(budgetOf(generate, { sampling_params: { max_new_tokens: 8 } })).toEqual({
      field: 'sampling_params.max_new_tokens',
      tokens: 8,
    });
    expect(budgetOf(generate, { sampling_params: null })).toBeUndefined();
    expect(budgetOf(endpointNamed('embeddings'), { max_tokens: 3 })).toBeUndefined();
  });

  it('what a body lacks is named with what to send instead', () => {
    expect(endpointNamed('chat').misfit({ prompt: 'x' })).toEqual({
      param: 'messages',
      message: 'The chat route takes messages, not a prompt: send a prompt to /v1/completions',
    });
    expect(endpointNamed('chat').misfit({ messages: [] })?.param).toBe('messages');
    expect(endpointNamed('completions').misfit({ messages: [{ role: 'user' }] })?.message).toBe(
      'The completions route takes a prompt, not messages: send messages to /v1/chat/completions',
    );
    expect(endpointNamed('generate').misfit({ input_ids: [1] })).toBeUndefined();
    expect(endpointNamed('embeddings').misfit({ messages: [] })).toBeUndefined();
    expect(endpointNamed('rerank').misfit({ query: 'q' })).toEqual({
      param: 'documents',
      message: '/v1/rerank needs query and documents',
    });
    expect(endpointNamed('score').misfit({})).toBeUndefined();
  });

  it('the prompt as routing compares it: clipped, never half a surrogate pair; token ids where the body gives them', () => {
    const chat = endpointNamed('chat');
    expect(chat.routingText({ messages: [{ role: 'user', content: [{ text: 'a' }, { text: 'b' }] }] }, 100)).toBe(
      'user\u0000ab\u0001',
    );
    expect(endpointNamed('completions').routingText({ prompt: 'x😀' }, 2)).toBe('x');
    expect(endpointNamed('generate').routingText({ text: ['first', 'second'] }, 100)).toBe('first');
    expect(endpointNamed('embeddings').routingText({ input: ['a', 'b'] }, 100)).toBe('a');
    expect(endpointNamed('rerank').routingText({ query: 'q', documents: ['d'] }, 100)).toBe('q');
    expect(endpointNamed('completions').promptIds({ prompt: [[1, 2], [3]] })).toEqual([1, 2]);
    expect(endpointNamed('generate').promptIds({ input_ids: [4, 5] })).toEqual([4, 5]);
    expect(endpointNamed('embeddings').promptIds({ input: [7, 8] })).toEqual([7, 8]);
    expect(endpointNamed('chat').promptIds({ messages: [] })).toBeUndefined();
  });

  it('embeddings, classify and pooling read an input or messages alike: a body with neither is told its own path', () => {
    const messages = [{ role: 'user', content: 'hi' }];
    for (const [name, path] of [
      ['embeddings', '/v1/embeddings'],
      ['classify', '/v1/classify'],
      ['pooling', '/pooling'],
    ] as const) {
      const endpoint = endpointNamed(name);
      expect(endpoint.misfit({})).toEqual({ param: 'input', message: `${path} needs an input (or messages)` });
      expect(endpoint.misfit({ input: 'x' })).toBeUndefined();
      expect(endpoint.misfit({ messages })).toBeUndefined();
      expect(endpoint.promptIds({ input: [3, 4] })).toEqual([3, 4]);
      expect(endpoint.routingText({ messages }, 100)).toBe(endpointNamed('chat').routingText({ messages }, 100));
      expect(endpoint.routingText({ input: 'text' }, 2)).toBe('te');
      expect(endpoint.tokenize).toBeUndefined();
    }
  });

  it("the prompt's length is known before any worker only for one prompt of token ids", () => {
    expect(endpointNamed('completions').promptLength({ prompt: [1, 2, 3] })).toBe(3);
    expect(endpointNamed('completions').promptLength({ prompt: [[1, 2], [3]] })).toBeUndefined();
    expect(endpointNamed('completions').promptLength({ prompt: 'text' })).toBeUndefined();
    expect(endpointNamed('generate').promptLength({ input_ids: [1, 2] })).toBe(2);
    expect(endpointNamed('chat').promptLength({ messages: [] })).toBeUndefined();
  });

  it("a one-token prefill caps each API's own output field (both OpenAI names where OpenAI's); only OpenAI's completions and chat resume a broken stream", () => {
    for (const name of ['completions', 'chat', 'generate'] as const) {
      expect(endpointNamed(name).oneToken).toEqual({ max_tokens: 1, max_completion_tokens: 1, n: 1 });
    }
    expect(endpointNamed('responses').oneToken).toEqual({ max_output_tokens: 1, store: false });
    expect(endpointNamed('messages').oneToken).toEqual({ max_tokens: 1 });
    expect(ENDPOINTS.filter((each) => each.resumable).map((each) => each.name)).toEqual(['completions', 'chat']);
  });
});
