import { describe, expect, it } from 'vitest';
import { ItemQueue } from '../../src/http/item-queue.js';
import { OpenAIAnswer } from '../../src/http/openai-answer.js';
import { outputFromOpenAI } from '../../src/http/openai-output.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { Controller } from '../../src/runtime/controller.js';

function answer(choices = 1, context = new Controller('r')) {
  const queue = new ItemQueue<EngineItem>({ demand: () => {}, lowWater: 1 });
  let aborted = 0;
  const reader = new OpenAIAnswer({
    url: 'http://w',
    convert: outputFromOpenAI,
    context,
    choices,
    queue,
    abort: () => aborted++,
  });
  const items = async () => {
    queue.deliver();
    const out: EngineItem[] = [];
    for (let step = await queue.next(); step.done !== true; step = await queue.next()) out.push(step.value);
    return out;
  };
  return { reader, queue, items, aborted: () => aborted };
}

const chunk = (fields: Record<string, unknown>) =>
  JSON.stringify({ choices: [{ index: 0, text: '', finish_reason: null, ...fields }] });

describe('OpenAIAnswer: frames to items', () => {
  it("vLLM's usage chunk after the finish is folded into the terminal item, both chunks on the wire", async () => {
    const { reader, items } = answer();
    reader.frame(chunk({ text: 'a' }), 'event');
    reader.frame(chunk({ text: 'b', finish_reason: 'stop' }), 'event');
    reader.frame(
      JSON.stringify({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }),
      'event',
    );
    reader.done();
    const out = await items();
    expect(out.map((item) => item.data?.text)).toEqual(['a', 'b']);
    expect(out[1]?.data?.finish_reason).toBe('stop');
    expect(out[1]?.data?.completion_usage?.total_tokens).toBe(3);
    expect(Annotated.wire(out[1] as EngineItem)).toHaveLength(2);
  });

  it('[DONE] before any finish is a protocol failure, not an empty success; the call is ended', async () => {
    const { reader, items, aborted } = answer();
    reader.frame(chunk({ text: 'a' }), 'event');
    reader.done();
    const out = await items();
    expect(out).toHaveLength(2);
    expect(Annotated.err(out[1] as EngineItem)).toBeInstanceOf(UpstreamError);
    expect(Annotated.errorMessage(out[1] as EngineItem)).toContain('sent [DONE] before its answer finished');
    expect(aborted()).toBe(1);
  });

  it('an event stream that ends without [DONE] and unfinished is a broken connection; a whole body ends as it is', async () => {
    const sse = answer();
    sse.reader.frame(chunk({ text: 'a' }), 'event');
    sse.reader.bodyEnded('sse');
    expect(Annotated.errorMessage((await sse.items())[1] as EngineItem)).toContain(
      'ended its event stream before [DONE]',
    );
    const whole = answer();
    whole.reader.frame(chunk({ text: 'all', finish_reason: 'length' }), 'body');
    whole.reader.bodyEnded('json');
    const out = await whole.items();
    expect(out.map((item) => item.data?.finish_reason)).toEqual(['length']);
    expect(whole.aborted()).toBe(0);
  });

  it("an error chunk or event carries the worker's words and status; an abort finish is a failure", async () => {
    const chunkError = answer();
    chunkError.reader.frame(JSON.stringify({ object: 'error', message: 'too long', code: 400 }), 'event');
    const failure = Annotated.err((await chunkError.items())[0] as EngineItem) as UpstreamError;
    expect(failure.message).toBe('http://w failed: too long');
    expect(failure.status).toBe(400);
    const event = answer();
    event.reader.errorEvent(JSON.stringify({ error: { message: 'oom', code: 503 } }));
    const eventFailure = Annotated.err((await event.items())[0] as EngineItem) as UpstreamError;
    expect(eventFailure.message).toBe('http://w sent an error event: oom');
    expect(eventFailure.status).toBe(503);
    const aborted = answer();
    aborted.reader.frame(chunk({ finish_reason: 'abort' }), 'event');
    expect(Annotated.errorMessage((await aborted.items())[0] as EngineItem)).toBe('http://w aborted the request');
  });

  it('with several choices the answer ends at the last finish; earlier finishes go on as chunks', async () => {
    const { reader, items } = answer(2);
    reader.frame(chunk({ index: 0, text: 'x', finish_reason: 'stop' }), 'event');
    reader.frame(chunk({ index: 1, text: 'y', finish_reason: 'stop' }), 'event');
    reader.done();
    const out = await items();
    expect(out.map((item) => item.data?.finish_reason ?? null)).toEqual([null, 'stop']);
  });

  it('a read that breaks after a stop of ours ends as cancelled; otherwise it is the worker failing', async () => {
    const context = new Controller('r');
    const ours = answer(1, context);
    context.stopGenerating();
    ours.reader.broke(new Error('socket closed'), false);
    expect((await ours.items())[0]?.data?.finish_reason).toBe('cancelled');
    const theirs = answer();
    theirs.reader.broke(Object.assign(new Error('reset'), { code: 'ECONNRESET' }), false);
    expect(Annotated.err((await theirs.items())[0] as EngineItem)).toBeInstanceOf(UpstreamError);
  });

  it('nothing is added once it has finished', async () => {
    const { reader, items, aborted } = answer();
    reader.emptyBody();
    reader.frame(chunk({ text: 'late' }), 'event');
    reader.broke(new Error('later'), false);
    const out = await items();
    expect(out).toHaveLength(1);
    expect(Annotated.errorMessage(out[0] as EngineItem)).toBe('http://w answered an empty body');
    expect(aborted()).toBe(1);
  });
});
