import { describe, expect, it } from 'vitest';
import { type EndpointName, endpointNamed } from '../../../src/endpoints/registry.js';
import { UnsupportedRequestError } from '../../../src/flow/request-shaping.js';
import type { Route } from '../../../src/server/openai-format.js';
import {
  checkPromptTokens,
  checkRequest,
  type ModelLimits,
  validateRequest,
} from '../../../src/server/pipeline/request-schemas.js';

/** What checkRequest says of a body: 'ok', or the field at fault and the message. */
function verdict(route: EndpointName, body: Record<string, unknown>, limits?: ModelLimits): string {
  try {
    checkRequest(route, body, limits);
    return 'ok';
  } catch (error) {
    expect(UnsupportedRequestError.is(error)).toBe(true);
    return `${(error as UnsupportedRequestError).param}: ${(error as Error).message}`;
  }
}

const user = [{ role: 'user', content: 'hi' }];

describe('checkRequest: every checked field names itself and says what was expected', () => {
  // One row per field and bound: the ranges the engines agree on (OpenAI's, vLLM's, SGLang's).
  it.each<[Route, Record<string, unknown>, string]>([
    ['completions', { temperature: -0.1 }, 'temperature: temperature must be at least 0, got -0.1'],
    ['completions', { top_p: 1.5 }, 'top_p: top_p must be at most 1, got 1.5'],
    ['completions', { top_k: -2 }, 'top_k: top_k must be at least -1, got -2'],
    ['completions', { min_p: 1.1 }, 'min_p: min_p must be at most 1, got 1.1'],
    ['completions', { min_p: -0.1 }, 'min_p: min_p must be at least 0, got -0.1'],
    ['completions', { stop: 5 }, 'stop: stop has none of the accepted forms, got 5'],
    ['completions', { stop: ['a', 1] }, 'stop: stop has none of the accepted forms, got ["a",1]'],
    ['completions', { ignore_eos: 'yes' }, 'ignore_eos: ignore_eos must be a boolean, got "yes"'],
    ['completions', { model: '' }, 'model: model must not be empty, got ""'],
    [
      'completions',
      { stream: true, stream_options: { include_usage: 'x' } },
      'stream_options.include_usage: stream_options.include_usage must be a boolean, got "x"',
    ],
    [
      'completions',
      { stream: true, stream_options: { continuous_usage_stats: 1 } },
      'stream_options.continuous_usage_stats: stream_options.continuous_usage_stats must be a boolean, got 1',
    ],
    ['completions', { stream: true, stream_options: 'x' }, 'stream_options: stream_options must be an object, got "x"'],
    ['completions', { min_tokens: -1 }, 'min_tokens: min_tokens must be at least 0, got -1'],
    ['completions', { presence_penalty: 2.5 }, 'presence_penalty: presence_penalty must be at most 2, got 2.5'],
    ['completions', { presence_penalty: -2.5 }, 'presence_penalty: presence_penalty must be at least -2, got -2.5'],
    ['completions', { frequency_penalty: 3 }, 'frequency_penalty: frequency_penalty must be at most 2, got 3'],
    ['completions', { frequency_penalty: -3 }, 'frequency_penalty: frequency_penalty must be at least -2, got -3'],
    ['completions', { repetition_penalty: 0 }, 'repetition_penalty: repetition_penalty must be greater than 0, got 0'],
    ['completions', { seed: 1.5 }, 'seed: seed has none of the accepted forms, got 1.5'],
    ['completions', { best_of: 0 }, 'best_of: best_of must be at least 1, got 0'],
    ['completions', { echo: 'no' }, 'echo: echo must be a boolean, got "no"'],
    ['completions', { logprobs: -1 }, 'logprobs: logprobs must be at least 0, got -1'],
    ['completions', { suffix: 3 }, 'suffix: suffix must be a string, got 3'],
    ['completions', { n: 1.5 }, 'n: n must be an integer, got 1.5'],
    ['completions', { prompt: [[]] }, 'prompt[0]: prompt[0] must not be empty, got []'],
    ['completions', { prompt: [-1] }, 'prompt[0]: prompt[0] must be at least 0, got -1'],
    ['chat', { messages: [] }, 'messages: messages must not be empty, got []'],
    ['chat', { messages: 'x' }, 'messages: messages must be an array, got a string of 1 character'],
    ['chat', { messages: [{ role: '' }] }, 'messages[0].role: messages[0].role must not be empty, got ""'],
    ['chat', { messages: [5] }, 'messages[0]: messages[0] must be an object, got 5'],
    ['chat', { messages: user, logprobs: 1 }, 'logprobs: logprobs must be a boolean, got 1'],
    [
      'chat',
      { messages: user, logprobs: true, top_logprobs: -1 },
      'top_logprobs: top_logprobs must be at least 0, got -1',
    ],
    ['chat', { messages: user, tools: [{}] }, 'tools[0].type: tools[0].type must be a string, got undefined'],
    ['chat', { messages: user, tools: 'x' }, 'tools: tools must be an array, got a string of 1 character'],
    [
      'chat',
      { messages: user, max_completion_tokens: 0 },
      'max_completion_tokens: max_completion_tokens must be at least 1, got 0',
    ],
    ['chat', { messages: user, temperature: 'hot' }, 'temperature: temperature must be a number, got "hot"'],
    ['generate', { text: [] }, 'text: text must not be empty, got []'],
    ['generate', { text: 5 }, 'text: text has none of the accepted forms, got 5'],
    ['generate', { input_ids: [[]] }, 'input_ids[0]: input_ids[0] must not be empty, got []'],
    ['generate', { input_ids: 'x' }, 'input_ids: input_ids has none of the accepted forms, got "x"'],
    ['generate', { text: 'x', stream: 'x' }, 'stream: stream must be a boolean, got "x"'],
    ['generate', { text: 'x', sampling_params: 'x' }, 'sampling_params: sampling_params must be an object, got "x"'],
    [
      'generate',
      { text: 'x', sampling_params: { max_new_tokens: -1 } },
      'sampling_params.max_new_tokens: sampling_params.max_new_tokens must be at least 0, got -1',
    ],
    [
      'generate',
      { text: 'x', sampling_params: { min_new_tokens: -1 } },
      'sampling_params.min_new_tokens: sampling_params.min_new_tokens must be at least 0, got -1',
    ],
    [
      'generate',
      { text: 'x', sampling_params: { n: 0 } },
      'sampling_params.n: sampling_params.n must be at least 1, got 0',
    ],
    [
      'generate',
      { text: 'x', sampling_params: { top_k: -5 } },
      'sampling_params.top_k: sampling_params.top_k must be at least -1, got -5',
    ],
    [
      'generate',
      { text: 'x', sampling_params: { stop: [1] } },
      'sampling_params.stop: sampling_params.stop has none of the accepted forms, got [1]',
    ],
  ])('%s %j is refused', (route, fields, expected) => {
    const base = route === 'completions' ? { prompt: 'x' } : route === 'chat' ? { messages: user } : {};
    expect(verdict(route, { ...base, ...fields })).toBe(expected);
  });

  it('a prompt that is none of the four forms says which forms it may take', () => {
    const forms = 'must be a string, a list of strings, a list of token ids or a list of such lists';
    expect(verdict('completions', {})).toBe(`prompt: prompt ${forms}, got undefined`);
    expect(verdict('completions', { prompt: [1.5] })).toBe(`prompt: prompt ${forms}, got a list of 1`);
    expect(verdict('completions', { prompt: ['a', 1] })).toBe(`prompt: prompt ${forms}, got a list of 2`);
  });

  it("a refused prompt, or anything inside one, is said by its kind, never its text (the refusal is logged); a part's role and type are quoted", () => {
    const secret = 'SECRET-PROMPT-7f3a: the quarterly numbers';
    for (const [route, fields] of [
      ['chat', { messages: secret }],
      ['chat', { messages: [{ role: 'user', content: 'hi' }], tools: secret }],
      ['completions', { prompt: [secret, 1] }],
      ['completions', { prompt: 'x', suffix: [secret] }],
      ['generate', { text: [secret, 2] }],
    ] as const) {
      const said = verdict(route, fields as never);
      expect(said).toMatch(/got (a string of \d+ characters|a list of \d+)$/);
      expect(said).not.toContain('SECRET');
    }
    expect(verdict('chat', { messages: [{ role: 7, content: secret }] })).toBe(
      'messages[0].role: messages[0].role must be a string, got 7',
    );
  });

  it('a body that is not an object is refused as the body', () => {
    expect(verdict('completions', [] as never)).toBe('body: body must be an object, got []');
  });
});

describe('checkRequest: what passes', () => {
  it('every prompt form the engines take, on its own route', () => {
    for (const prompt of ['x', ['a', 'b'], [0, 1, 2], [[1], [2, 3]]])
      expect(verdict('completions', { prompt })).toBe('ok');
    for (const body of [{ text: 'x' }, { text: ['a'] }, { input_ids: [1] }, { input_ids: [[1], [2]] }, {}]) {
      expect(verdict('generate', body)).toBe('ok');
    }
    expect(verdict('chat', { messages: user, tools: [{ type: 'function' }] })).toBe('ok');
  });

  it('null stands for a field not given, as the engines read it', () => {
    const nulls = Object.fromEntries(
      ['temperature', 'top_p', 'top_k', 'min_p', 'stop', 'ignore_eos', 'model', 'stream', 'stream_options']
        .concat(['max_tokens', 'min_tokens', 'n', 'presence_penalty', 'frequency_penalty', 'repetition_penalty'])
        .concat(['seed', 'best_of', 'echo', 'logprobs', 'suffix'])
        .map((field) => [field, null]),
    );
    expect(verdict('completions', { prompt: 'x', ...nulls })).toBe('ok');
    expect(verdict('chat', { messages: user, max_completion_tokens: null, top_logprobs: null, tools: null })).toBe(
      'ok',
    );
    expect(verdict('generate', { text: null, input_ids: null, stream: null, sampling_params: null })).toBe('ok');
  });

  it('the edges of each range are inside it', () => {
    const edges = {
      temperature: 0,
      top_p: 1,
      top_k: -1,
      min_p: 1,
      presence_penalty: -2,
      frequency_penalty: 2,
      min_tokens: 0,
      max_tokens: 1,
      n: 1,
      best_of: 1,
      logprobs: 0,
      seed: 12345678901234567890n,
    };
    expect(verdict('completions', { prompt: 'x', ...edges })).toBe('ok');
    expect(verdict('generate', { text: 'x', sampling_params: { max_new_tokens: 0, min_p: 0 } })).toBe('ok');
  });

  it('fields an engine adds pass unchecked and unchanged, at the top and inside the checked groups', () => {
    const body = {
      prompt: 'x',
      guided_json: { type: 'object' },
      stream: true,
      stream_options: { include_usage: true, vendor: 1 },
    };
    expect(verdict('completions', body)).toBe('ok');
    expect(verdict('generate', { text: 'x', sampling_params: { regex: '[a-z]+', json_schema: '{}' } })).toBe('ok');
    expect(
      verdict('chat', { messages: [{ role: 'user', content: [{ type: 'image_url' }] }], tools: [{ type: 'f', x: 1 }] }),
    ).toBe('ok');
  });
});

describe('checkRequest: combinations the engines refuse', () => {
  it('stream_options only with stream: true (null or absent are fine without it)', () => {
    const refused = 'stream_options: stream_options can only be given with stream: true';
    expect(verdict('completions', { prompt: 'x', stream_options: {} })).toBe(refused);
    expect(verdict('completions', { prompt: 'x', stream: false, stream_options: { include_usage: true } })).toBe(
      refused,
    );
    expect(verdict('chat', { messages: user, stream_options: {} })).toBe(refused);
    expect(verdict('completions', { prompt: 'x', stream_options: null })).toBe('ok');
    expect(verdict('completions', { prompt: 'x', stream: true, stream_options: {} })).toBe('ok');
  });

  it('chat: top_logprobs needs logprobs: true; completions has no such pairing', () => {
    const refused = 'top_logprobs: top_logprobs needs logprobs: true';
    expect(verdict('chat', { messages: user, top_logprobs: 2 })).toBe(refused);
    expect(verdict('chat', { messages: user, top_logprobs: 0, logprobs: false })).toBe(refused);
    expect(verdict('chat', { messages: user, top_logprobs: 2, logprobs: true })).toBe('ok');
    expect(verdict('chat', { messages: user, top_logprobs: null })).toBe('ok');
    expect(verdict('completions', { prompt: 'x', top_logprobs: 2 })).toBe('ok');
  });
});

describe("checkRequest: a length budget beyond the model's context", () => {
  const asked: unknown[] = [];
  const limits: ModelLimits = {
    maxModelLen(model) {
      asked.push(model);
      return model === 'small' ? 100 : undefined;
    },
  };
  const beyond = "is more than the model's context of 100 tokens (max_model_len)";

  it("asks for the request's own model, and checks nothing for a model it does not know", () => {
    asked.length = 0;
    expect(verdict('completions', { model: 'big', prompt: 'x', max_tokens: 10_000 }, limits)).toBe('ok');
    expect(verdict('completions', { prompt: 'x', max_tokens: 10_000 }, limits)).toBe('ok');
    expect(asked).toEqual(['big', undefined]);
    expect(verdict('completions', { model: 'small', prompt: 'x', max_tokens: 10_000 })).toBe('ok');
  });

  it('the budget may fill the context exactly, not one token more', () => {
    expect(verdict('completions', { model: 'small', prompt: 'x', max_tokens: 100 }, limits)).toBe('ok');
    expect(verdict('completions', { model: 'small', prompt: 'x', max_tokens: 101 }, limits)).toBe(
      `max_tokens: max_tokens 101 ${beyond}`,
    );
  });

  it('a prompt of token ids counts: prompt and budget together; a text prompt or lists of ids count nothing here', () => {
    const ids = Array.from({ length: 90 }, (_, i) => i);
    expect(verdict('completions', { model: 'small', prompt: ids, max_tokens: 10 }, limits)).toBe('ok');
    expect(verdict('completions', { model: 'small', prompt: ids, max_tokens: 11 }, limits)).toBe(
      `max_tokens: max_tokens 11 with a prompt of 90 tokens ${beyond}`,
    );
    expect(verdict('completions', { model: 'small', prompt: 'x'.repeat(500), max_tokens: 100 }, limits)).toBe('ok');
    expect(verdict('completions', { model: 'small', prompt: [ids, ids], max_tokens: 100 }, limits)).toBe('ok');
    expect(verdict('completions', { model: 'small', prompt: 'x' }, limits)).toBe('ok');
  });

  it('chat: max_completion_tokens is the budget when given, else max_tokens', () => {
    const chat = { model: 'small', messages: user };
    expect(verdict('chat', { ...chat, max_completion_tokens: 101 }, limits)).toBe(
      `max_completion_tokens: max_completion_tokens 101 ${beyond}`,
    );
    expect(verdict('chat', { ...chat, max_tokens: 101 }, limits)).toBe(`max_tokens: max_tokens 101 ${beyond}`);
    expect(verdict('chat', { ...chat, max_completion_tokens: 50, max_tokens: 500 }, limits)).toBe('ok');
    // Completions has no max_completion_tokens: its budget is max_tokens whatever else is sent.
    expect(
      verdict('completions', { model: 'small', prompt: 'x', max_completion_tokens: 500, max_tokens: 10 }, limits),
    ).toBe('ok');
    // A chat prompt is its messages, text: a stray `prompt` field of ids is not counted.
    expect(verdict('chat', { ...chat, prompt: Array.from({ length: 90 }, () => 1), max_tokens: 20 }, limits)).toBe(
      'ok',
    );
  });

  it('/generate: sampling_params.max_new_tokens with input_ids; without sampling_params there is no budget', () => {
    const ids = Array.from({ length: 95 }, () => 7);
    expect(
      verdict('generate', { model: 'small', input_ids: ids, sampling_params: { max_new_tokens: 6 } }, limits),
    ).toBe(`sampling_params.max_new_tokens: sampling_params.max_new_tokens 6 with a prompt of 95 tokens ${beyond}`);
    expect(
      verdict('generate', { model: 'small', input_ids: ids, sampling_params: { max_new_tokens: 5 } }, limits),
    ).toBe('ok');
    expect(verdict('generate', { model: 'small', prompt: ids, sampling_params: { max_new_tokens: 6 } }, limits)).toBe(
      'ok',
    );
    expect(verdict('generate', { model: 'small', text: 'x', sampling_params: null, max_tokens: 500 }, limits)).toBe(
      'ok',
    );
    expect(verdict('generate', { model: 'small', text: 'x' }, limits)).toBe('ok');
  });
});

describe("the agents' prompts against the model's context: the fewest tokens they can be, without a tokenizer", () => {
  const limits: ModelLimits = { maxModelLen: (model) => (model === 'm' ? 32_768 : undefined) };
  const many = (n: number) => Array.from({ length: n }, () => ({ role: 'user', content: 'Hi' }));
  const beyond = "the model's context of 32768 tokens (max_model_len)";

  it('200,000 input items or messages cannot fit 32,768 tokens: refused naming the prompt, with or without a budget', () => {
    expect(verdict('responses', { model: 'm', input: many(200_000) }, limits)).toBe(
      `input: input is at least 200000 tokens (one per message it becomes under any chat template), more than ${beyond}`,
    );
    expect(verdict('responses', { model: 'm', input: many(200_000), max_output_tokens: 64 }, limits)).toBe(
      `input: input is at least 200000 tokens (one per message it becomes under any chat template), which with max_output_tokens 64 is more than ${beyond}`,
    );
    expect(verdict('messages', { model: 'm', messages: many(200_000), max_tokens: 64 }, limits)).toBe(
      `messages: messages is at least 200000 tokens (one per message it becomes under any chat template), which with max_tokens 64 is more than ${beyond}`,
    );
  });

  it('a floor that fits but leaves too little room for the budget names the budget, with the floor', () => {
    expect(verdict('responses', { model: 'm', input: many(32_000), max_output_tokens: 769 }, limits)).toBe(
      `max_output_tokens: max_output_tokens 769 with a prompt of at least 32000 tokens is more than ${beyond}`,
    );
    expect(verdict('responses', { model: 'm', input: many(32_000), max_output_tokens: 768 }, limits)).toBe('ok');
    // A budget beyond the context alone is said as before, whatever the prompt.
    expect(verdict('responses', { model: 'm', input: 'Hi', max_output_tokens: 40_000 }, limits)).toBe(
      `max_output_tokens: max_output_tokens 40000 is more than ${beyond}`,
    );
  });

  it("an ordinary agent's request is never refused by the floor, nor a model whose context is unknown", () => {
    expect(verdict('responses', { model: 'm', input: many(300), max_output_tokens: 32_000 }, limits)).toBe('ok');
    expect(verdict('messages', { model: 'm', messages: many(300), max_tokens: 32_000 }, limits)).toBe('ok');
    expect(verdict('responses', { model: 'other', input: many(200_000) }, limits)).toBe('ok');
    expect(verdict('responses', { model: 'm', input: many(200_000) })).toBe('ok');
  });

  it('count_tokens generates nothing: it is not held to the context', () => {
    expect(verdict('count_tokens', { model: 'm', messages: many(200_000) }, limits)).toBe('ok');
  });
});

describe("checkPromptTokens: the prompt's exact length, once the router's tokenizer has counted it", () => {
  const limits: ModelLimits = { maxModelLen: () => 4096 };
  const refusal = (route: EndpointName, body: Record<string, unknown>, tokens: number) => {
    try {
      checkPromptTokens(endpointNamed(route), body, limits, tokens);
      return 'ok';
    } catch (error) {
      return `${(error as UnsupportedRequestError).param}: ${(error as Error).message}`;
    }
  };

  it('a prompt longer than the context is refused naming its field; one that leaves too little room, naming the budget', () => {
    expect(refusal('responses', { input: 'Hi' }, 5000)).toBe(
      "input: input is 5000 tokens (by the router's tokenizer), more than the model's context of 4096 tokens (max_model_len)",
    );
    expect(refusal('messages', { messages: [], max_tokens: 64 }, 4090)).toBe(
      "max_tokens: max_tokens 64 with a prompt of 4090 tokens is more than the model's context of 4096 tokens (max_model_len)",
    );
    expect(refusal('chat', { messages: [] }, 5000)).toBe(
      "prompt: prompt is 5000 tokens (by the router's tokenizer), more than the model's context of 4096 tokens (max_model_len)",
    );
  });

  it('a prompt and budget that fill the context exactly pass; an endpoint that generates nothing is not held to it', () => {
    expect(refusal('responses', { input: 'Hi', max_output_tokens: 96 }, 4000)).toBe('ok');
    expect(refusal('count_tokens', { messages: [] }, 10_000)).toBe('ok');
  });
});

describe('validateRequest: the body fits its route before its fields are checked', () => {
  /** What validateRequest says of a body: 'ok', or the field at fault and the message. */
  function verdictOf(route: Route, body: unknown): string {
    try {
      validateRequest(route, body);
      return 'ok';
    } catch (error) {
      expect(UnsupportedRequestError.is(error)).toBe(true);
      return `${(error as UnsupportedRequestError).param}: ${(error as Error).message}`;
    }
  }

  it.each([
    ['a string', 'x', 'a string of 1 character'],
    ['null', null, 'null'],
    ['a list', [{ prompt: 'x' }], 'a list of 1'],
    ['a number', 7, '7'],
  ])('a body that is %s is refused as the body, saying what it got', (_, body, shown) => {
    expect(verdictOf('completions', body)).toBe(`body: The request body must be a JSON object, got ${shown}`);
  });

  it('/generate takes a text, input_ids or input_embeds, each alone; nothing of the three is refused as text', () => {
    for (const body of [{ text: 'x' }, { input_ids: [1, 2] }, { input_embeds: [[0.1, 0.2]] }]) {
      expect(verdictOf('generate', body)).toBe('ok');
    }
    expect(verdictOf('generate', { prompt: 'x' })).toBe('text: /generate needs a text, input_ids or input_embeds');
    expect(verdictOf('generate', { text: null })).toBe('text: /generate needs a text, input_ids or input_embeds');
  });
});
