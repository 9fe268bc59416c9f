import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { HandoffFieldError } from '../../src/flow/handoff-fields.js';
import { NoWorkerError } from '../../src/flow/worker-pool.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { errorAnswer, OpenAIWriter } from '../../src/server/openai-format.js';

const text = (value: string) => Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: value });
const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };

describe('OpenAIWriter', () => {
  it('chat chunks: the role on the first, then content deltas, the finish reason in OpenAI terms', () => {
    const writer = new OpenAIWriter('chat', { model: 'llama' });
    const first = JSON.parse(writer.chunk(text('Hel')) as string);
    expect(first).toMatchObject({ object: 'chat.completion.chunk', model: 'llama' });
    expect(first.choices).toEqual([
      { index: 0, delta: { role: 'assistant', content: 'Hel' }, logprobs: null, finish_reason: null },
    ]);
    expect(JSON.parse(writer.chunk(text('lo')) as string).choices[0].delta).toEqual({ content: 'lo' });
    const last = JSON.parse(writer.chunk(Annotated.fromData(LLMEngineOutput.eos())) as string);
    expect(last.choices[0]).toMatchObject({ delta: {}, finish_reason: 'stop' });
    expect(last.id).toBe(first.id);
  });

  it('completion chunks carry text; an item with neither text nor finish writes nothing', () => {
    const writer = new OpenAIWriter('completions', { model: 'm' });
    expect(JSON.parse(writer.chunk(text('a')) as string).choices[0]).toEqual({
      index: 0,
      text: 'a',
      logprobs: null,
      finish_reason: null,
    });
    expect(writer.chunk(text(''))).toBeUndefined();
    expect(writer.chunk(Annotated.fromData({ token_ids: [] }))).toBeUndefined();
    expect(writer.chunk({ event: 'x' } as never)).toBeUndefined();
    expect(
      JSON.parse(writer.chunk(Annotated.fromData(LLMEngineOutput.length())) as string).choices[0].finish_reason,
    ).toBe('length');
  });

  it('the usage chunk only for a client that asked for it', () => {
    const asked = new OpenAIWriter('chat', { model: 'm', stream_options: { include_usage: true } });
    asked.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(JSON.parse(asked.usageChunk() as string)).toMatchObject({ choices: [], usage });
    const silent = new OpenAIWriter('chat', { model: 'm' });
    silent.chunk(Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage }));
    expect(silent.usageChunk()).toBeUndefined();
  });

  it('the whole response of a non-streamed request, per choice', () => {
    const writer = new OpenAIWriter('chat', { model: 'm' });
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
    const completions = new OpenAIWriter('completions', { model: 'm' });
    completions.add(Annotated.fromData({ token_ids: [], text: 'b', index: 1, finish_reason: 'stop' }));
    expect((completions.whole() as { choices: unknown[] }).choices).toEqual([
      { index: 0, text: '', logprobs: null, finish_reason: 'stop' },
      { index: 1, text: 'b', logprobs: null, finish_reason: 'stop' },
    ]);
  });
});

describe('errorAnswer: the status before the first byte', () => {
  const url = 'http://w:8000/v1/completions';
  it.each([
    [
      "a worker's 4xx passes through",
      UpstreamError.fromStatus(url, 422, '{"error":{"message":"bad top_p"}}'),
      422,
      'invalid_request_error',
      undefined,
    ],
    [
      "a worker's 4xx on prefill, through the PrefillError",
      PrefillError.from(UpstreamError.fromStatus(url, 400, 'too long')),
      400,
      'invalid_request_error',
      'prefill',
    ],
    ["a worker's 5xx", UpstreamError.fromStatus(url, 500, 'boom'), 502, 'upstream_error', undefined],
    [
      'a connection failure',
      UpstreamError.fromFailure(url, Object.assign(new Error('refused'), { code: 'ECONNREFUSED' })),
      502,
      'upstream_error',
      undefined,
    ],
    ['a prefill failure', new PrefillError('prefill', 'KV transfer aborted'), 502, 'upstream_error', 'prefill'],
    ['a deadline', new DeadlineError('decodeFirstToken', 100), 504, 'timeout', 'decode'],
    ['no worker in rotation', new NoWorkerError(2), 503, 'service_unavailable', undefined],
    [
      'client handoff fields refused',
      new HandoffFieldError(['kv_transfer_params']),
      400,
      'invalid_request_error',
      undefined,
    ],
    ['anything else', new Error('bug'), 500, 'internal_error', undefined],
  ])('%s', (_, error, status, type, leg) => {
    const answer = errorAnswer(error);
    expect(answer.status).toBe(status);
    expect(answer.body.error).toMatchObject({ type, code: status, message: (error as Error).message, param: null });
    expect(answer.body.error.leg).toBe(leg);
  });

  it('the leg given by the caller wins', () => {
    expect(errorAnswer(new Error('x'), 'decode').body.error.leg).toBe('decode');
  });
});
