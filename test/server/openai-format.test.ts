import { describe, expect, it } from 'vitest';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { OpenAIWriter } from '../../src/server/openai-format.js';

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
