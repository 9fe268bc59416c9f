import { describe, expect, it } from 'vitest';
import { endpointOf } from '../../src/endpoints/registry.js';
import {
  type Continuation,
  type PlanInputs,
  migrationPlan as planWith,
  resumeBody as resumeWith,
  stopStrings,
  withTokenIds,
} from '../../src/flow/migration.js';
import type { RequestBody } from '../../src/flow/request-shaping.js';

// The flow names the endpoint; these bodies are each their shape's (a library caller's reading).
const migrationPlan = (request: RequestBody, known: Partial<PlanInputs> = {}) =>
  planWith(request, { endpoint: endpointOf(request), ...known });
const resumeBody = (request: RequestBody, from: Continuation, maxModelLen?: number) =>
  resumeWith(request, from, maxModelLen, endpointOf(request));

const streamed = { model: 'm', prompt: 'Hi', stream: true };
const chat = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true };

describe('which requests migrate, and how', () => {
  it('is told the endpoint: nothing below the server reads it off the body', () => {
    // @ts-expect-error: the plan needs the endpoint the request came in on
    expect(() => planWith(streamed, {})).toThrow(TypeError);
    // @ts-expect-error: so does the body of a resume
    expect(() => resumeWith({ ...streamed, max_tokens: 9 }, { promptIds: [1], generatedIds: [2] })).toThrow(TypeError);
  });

  it('a plain streamed completion or chat resumes from its token ids', () => {
    expect(migrationPlan(streamed)).toEqual({ kind: 'resume' });
    expect(migrationPlan({ ...chat, max_tokens: 10 })).toEqual({ kind: 'resume' });
  });

  it('what cannot be continued faithfully is refused, with why', () => {
    const why = (request: Record<string, unknown>) => {
      const plan = migrationPlan(request);
      return plan.kind === 'refused' ? plan.why : plan.kind;
    };
    expect(why({ ...streamed, stream: false })).toBe('the request is not streamed');
    expect(why({ model: 'm', text: 'Hi', stream: true })).toMatch(/a \/generate stream is not continued/);
    expect(why({ model: 'm', input: 'Hi', stream: true })).toMatch(/a \/v1\/responses stream is not continued/);
    expect(why({ ...streamed, n: 2 })).toMatch(/^n > 1/);
    expect(why({ ...streamed, prompt: ['a', 'b'] })).toMatch(/several prompts/);
    expect(why({ ...streamed, best_of: 3 })).toBe('best_of > 1');
    expect(why({ ...streamed, best_of: 1 })).toBe('resume');
    expect(why({ ...streamed, structured_outputs: { json: {} } })).toMatch(/guided decoding \(structured_outputs\)/);
    expect(why({ ...streamed, guided_regex: 'a+' })).toMatch(/guided_regex/);
    expect(why({ ...streamed, regex: 'a+' })).toMatch(/\(regex\)/);
    expect(why({ ...streamed, ebnf: 'root ::= "a"' })).toMatch(/\(ebnf\)/);
    expect(why({ ...chat, max_tokens: 5, response_format: { type: 'json_schema' } })).toBe(
      'response_format json_schema: guided decoding',
    );
    expect(why({ ...chat, max_tokens: 5, response_format: { type: 'text' } })).toBe('resume');
    expect(why({ ...chat, tools: [{ type: 'function' }] })).toMatch(/^tools/);
    expect(why({ ...chat, max_tokens: 5, tools: [{ type: 'function' }], tool_choice: 'none' })).toBe('resume');
    expect(why({ ...chat, max_tokens: 5, tools: [] })).toBe('resume');
    expect(why({ ...streamed, logprobs: 2 })).toBe('logprobs');
    expect(why({ ...chat, top_logprobs: 2 })).toBe('logprobs');
    expect(why({ ...streamed, logprobs: false })).toBe('resume');
    expect(why({ ...streamed, echo: true })).toBe('echo');
    expect(why({ ...streamed, suffix: 'end' })).toBe('suffix');
    expect(why({ ...streamed, presence_penalty: 0.5 })).toMatch(/^presence_penalty/);
    expect(why({ ...streamed, frequency_penalty: -1 })).toMatch(/^frequency_penalty/);
    expect(why({ ...streamed, frequency_penalty: 0, repetition_penalty: 1.2 })).toBe('resume');
  });

  it('stop strings, a route without token ids, or a chat without a budget or context length are replayed', () => {
    expect(migrationPlan({ ...streamed, stop: ['\n\n'] })).toEqual({ kind: 'replay' });
    expect(migrationPlan({ ...streamed, stop: 'END' })).toEqual({ kind: 'replay' });
    expect(migrationPlan({ ...streamed, stop: '' })).toEqual({ kind: 'resume' });
    expect(migrationPlan({ ...chat, max_tokens: 5 }, { tokenIdRoutes: ['completions'] })).toEqual({ kind: 'replay' });
    expect(migrationPlan(streamed, { tokenIdRoutes: ['completions'] })).toEqual({ kind: 'resume' });
    expect(migrationPlan(streamed, { tokenIdRoutes: [] })).toEqual({ kind: 'replay' });
    expect(migrationPlan(chat)).toEqual({ kind: 'replay' });
    expect(migrationPlan(chat, { maxModelLen: 4096 })).toEqual({ kind: 'resume' });
    expect(migrationPlan({ ...chat, max_completion_tokens: 9 })).toEqual({ kind: 'resume' });
  });

  it('a replay the client asked token ids of is refused: they would repeat', () => {
    expect(migrationPlan({ ...streamed, stop: 'x', return_token_ids: true })).toEqual({
      kind: 'refused',
      why: 'token ids asked of a replayed request would repeat',
    });
  });

  it('stop strings are read from a string or a list, empty ones ignored', () => {
    expect(stopStrings({ stop: 'a' })).toEqual(['a']);
    expect(stopStrings({ stop: ['a', '', 3, 'b'] })).toEqual(['a', 'b']);
    expect(stopStrings({})).toEqual([]);
  });

  it('the decode leg asks for token ids, leaving a body that already does as it is', () => {
    const asked = { ...streamed, return_token_ids: true };
    expect(withTokenIds(streamed)).toEqual(asked);
    expect(withTokenIds(asked)).toBe(asked);
    expect(streamed).not.toHaveProperty('return_token_ids');
  });
});

describe('the body of a resume', () => {
  const from = { promptIds: [1, 2, 3], generatedIds: [7, 8] };

  it('the prompt ids then the generated ones, the rest of the budget, the same sampling settings', () => {
    const body = resumeBody(
      {
        ...chat,
        max_tokens: 10,
        temperature: 0.7,
        seed: 3,
        stop_token_ids: [9],
        stream_options: { include_usage: true },
      },
      from,
    );
    expect(body).toEqual({
      model: 'm',
      prompt: [1, 2, 3, 7, 8],
      max_tokens: 8,
      temperature: 0.7,
      seed: 3,
      stop_token_ids: [9],
      stream: true,
      stream_options: { include_usage: true },
      return_token_ids: true,
    });
  });

  it("a completion without a budget keeps OpenAI's 16 in all; a chat one what its context leaves", () => {
    expect(resumeBody(streamed, from).max_tokens).toBe(14);
    expect(resumeBody(chat, from, 100).max_tokens).toBe(100 - 3 - 2);
    expect(() => resumeBody(chat, from)).toThrow(RangeError);
    expect(resumeBody({ ...chat, max_completion_tokens: 6 }, from)).toMatchObject({ max_tokens: 4 });
    expect(resumeBody({ ...chat, max_completion_tokens: 6 }, from)).not.toHaveProperty('max_completion_tokens');
  });

  it('a spent budget is a RangeError; min_tokens counts what was generated', () => {
    expect(() => resumeBody({ ...streamed, max_tokens: 2 }, from)).toThrow(/budget \(2\) is spent/);
    expect(resumeBody({ ...streamed, max_tokens: 3 }, from).max_tokens).toBe(1);
    expect(resumeBody({ ...streamed, min_tokens: 5 }, from).min_tokens).toBe(3);
    expect(resumeBody({ ...streamed, min_tokens: 2 }, from)).not.toHaveProperty('min_tokens');
  });

  it("chat's own fields, the echo and n are not sent; the client's request is not changed", () => {
    const request = {
      ...chat,
      max_tokens: 10,
      tools: [],
      chat_template_kwargs: { enable_thinking: false },
      add_generation_prompt: true,
      echo: false,
      n: 1,
    };
    const copy = structuredClone(request);
    const body = resumeBody(request, from);
    for (const field of ['messages', 'tools', 'chat_template_kwargs', 'add_generation_prompt', 'echo', 'n']) {
      expect(body, field).not.toHaveProperty(field);
    }
    expect(request).toEqual(copy);
  });
});

describe('a resume body, field by field', () => {
  it("takes none of chat's, the prompt's or the sampling-of-many fields of the client's request", () => {
    const dropped = {
      messages: [{ role: 'user', content: 'Hi' }],
      prompt: 'x',
      tools: [],
      tool_choice: 'none',
      parallel_tool_calls: false,
      chat_template: '{{ x }}',
      chat_template_kwargs: {},
      add_generation_prompt: true,
      continue_final_message: false,
      documents: [],
      reasoning_effort: 'low',
      include_reasoning: false,
      echo: false,
      prompt_logprobs: 0,
      max_completion_tokens: 9,
      n: 1,
      best_of: 1,
    };
    const body = resumeBody({ model: 'm', temperature: 0, ...dropped }, { promptIds: [1], generatedIds: [2] });
    expect(Object.keys(body).sort()).toEqual([
      'max_tokens',
      'model',
      'prompt',
      'return_token_ids',
      'stream',
      'temperature',
    ]);
  });

  it('a chat without a budget or context length cannot be resumed, saying why; a min_tokens that is not a number stays as sent', () => {
    expect(() => resumeBody({ messages: [] }, { promptIds: [1], generatedIds: [] })).toThrow(
      new RangeError("a chat request without a budget needs the model's context length"),
    );
    expect(
      resumeBody({ prompt: [1], max_tokens: 5, min_tokens: '3' }, { promptIds: [1], generatedIds: [2] }).min_tokens,
    ).toBe('3');
  });

  it('null fields ask for nothing: logprobs null and a null or typeless response_format do not refuse', () => {
    const base = { prompt: [1, 2], max_tokens: 4, stream: true };
    for (const extra of [{ logprobs: null }, { response_format: null }, { response_format: {} }]) {
      expect(migrationPlan({ ...base, ...extra })).toEqual({ kind: 'resume' });
    }
  });
});
