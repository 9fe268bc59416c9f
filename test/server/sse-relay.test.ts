import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import type { ResponseStream } from '../../src/runtime/response-stream.js';
import { ResponseWriter } from '../../src/server/openai-format.js';
import { errorAnswer } from '../../src/server/pipeline/error-answers.js';
import type { InFlightRequest } from '../../src/server/pipeline/in-flight.js';
import { relaySse } from '../../src/server/sse-relay.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A response that records what was written; `full` makes writes report a full socket. */
class FakeResponse extends EventEmitter {
  statusCode = 0;
  head: Record<string, unknown> | undefined;
  headersSent = false;
  writableEnded = false;
  destroyed = false;
  full = false;
  readonly written: string[] = [];
  writeHead(status: number, head: Record<string, unknown>) {
    this.statusCode = status;
    this.head = head;
    this.headersSent = true;
    return this;
  }
  write(text: string) {
    this.written.push(text);
    return !this.full;
  }
  end(text?: string) {
    if (text !== undefined) this.written.push(text);
    this.writableEnded = true;
    return this;
  }
  destroy() {
    this.destroyed = true;
    this.emit('close');
    return this;
  }
}

const text = (value: string) => Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: value });
const event = (json: Record<string, unknown>) =>
  Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [] }), [
    { form: 'event', text: JSON.stringify(json), json },
  ]);

/** A stream of `items` (then `end`: done, or a thrown error), whose closing is seen. */
function source(items: EngineItem[], end?: Error) {
  const seen = { returned: false, pulls: 0 };
  const iterator: AsyncIterator<EngineItem> = {
    async next() {
      seen.pulls += 1;
      const item = items.shift();
      if (item !== undefined) return { value: item, done: false };
      if (end !== undefined) throw end;
      return { value: undefined, done: true };
    },
    async return() {
      seen.returned = true;
      return { value: undefined, done: true };
    },
  };
  const stream = { [Symbol.asyncIterator]: () => iterator } as unknown as ResponseStream<EngineItem>;
  return { stream, seen };
}

function relay(items: EngineItem[], options: { end?: Error; body?: Record<string, unknown>; res?: FakeResponse } = {}) {
  const res = options.res ?? new FakeResponse();
  const context = new Controller('r');
  const stop = vi.spyOn(context, 'stopGenerating');
  const entry: InFlightRequest = { context, res: res as unknown as ServerResponse, shutdown: () => {} };
  const failures: unknown[] = [];
  const gaps: number[] = [];
  const { stream, seen } = source(items, options.end);
  const done = relaySse(
    stream,
    res as unknown as ServerResponse,
    new ResponseWriter(endpointNamed('completions'), options.body ?? { model: 'm' }),
    entry,
    {
      slowClientTimeoutMs: 1000,
      answerFor: (error) => {
        failures.push(error);
        return errorAnswer(error, 'decode');
      },
      interToken: (seconds) => gaps.push(seconds),
    },
  );
  return { res, done, seen, failures, gaps, entry, stop };
}

describe('relaySse', () => {
  it('streams each item as a data event, then [DONE]; the head goes with the first chunk; the source is closed', async () => {
    const { res, done, seen } = relay([event({ a: 1 }), text(''), event({ b: 2 })]);
    await done;
    expect(res.statusCode).toBe(200);
    expect(res.head).toEqual({ 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    expect(res.written).toEqual(['data: {"a":1}\n\n', 'data: {"b":2}\n\n', 'data: [DONE]\n\n']);
    expect(res.writableEnded).toBe(true);
    expect(seen.returned).toBe(true);
  });

  it('a stream that says nothing is still a 200 with [DONE]; an item of several events goes in one write', async () => {
    const empty = relay([text('')]);
    await empty.done;
    expect([empty.res.statusCode, empty.res.written]).toEqual([200, ['data: [DONE]\n\n']]);
    const item = Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [] }), [
      { form: 'event', text: '{"x":1}', json: { x: 1 } },
      { form: 'event', text: '{"x":2}', json: { x: 2 } },
    ]);
    const several = relay([item]);
    await several.done;
    expect(several.res.written).toEqual(['data: {"x":1}\n\ndata: {"x":2}\n\n', 'data: [DONE]\n\n']);
  });

  it('a re-created usage chunk goes last, before [DONE], for a client that asked for it', async () => {
    const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
    const { res, done } = relay([Annotated.fromData({ ...LLMEngineOutput.length(), completion_usage: usage })], {
      body: { model: 'm', stream_options: { include_usage: true } },
    });
    await done;
    // The end is one write: the usage chunk, then [DONE].
    expect(res.written).toHaveLength(2);
    const [usageChunk, last] = (res.written[1] as string).split('\n\n');
    expect(JSON.parse((usageChunk as string).slice('data: '.length))).toMatchObject({ choices: [], usage });
    expect(last).toBe('data: [DONE]');
  });

  it('the gap between chunks written is reported in seconds, from the second chunk on', async () => {
    vi.useFakeTimers();
    const items = [text('a'), text('b'), text('c')];
    const pacing: EngineItem[] = [];
    const res = new FakeResponse();
    const context = new Controller('r');
    const gaps: number[] = [];
    const iterator: AsyncIterator<EngineItem> = {
      async next() {
        const item = items.shift();
        if (item === undefined) return { value: undefined, done: true };
        if (pacing.length > 0) await vi.advanceTimersByTimeAsync(250);
        pacing.push(item);
        return { value: item, done: false };
      },
    };
    await relaySse(
      { [Symbol.asyncIterator]: () => iterator } as unknown as ResponseStream<EngineItem>,
      res as unknown as ServerResponse,
      new ResponseWriter(endpointNamed('completions'), { model: 'm' }),
      { context, res: res as unknown as ServerResponse, shutdown: () => {} },
      { slowClientTimeoutMs: 1000, answerFor: (error) => errorAnswer(error), interToken: (s) => gaps.push(s) },
    );
    expect(gaps).toEqual([0.25, 0.25]);
  });

  it('a failure before the first byte is a real status with the OpenAI body', async () => {
    const { res, done, failures } = relay([], { end: new Error('decode refused') });
    await done;
    expect(failures).toHaveLength(1);
    expect(res.statusCode).toBe(500);
    expect(JSON.parse(res.written.join(''))).toMatchObject({ error: { message: 'decode refused', leg: 'decode' } });
  });

  it('a failure after it is one SSE error event, then the end, no [DONE]; an error item counts as one', async () => {
    for (const [items, end] of [
      [[text('a')], new Error('broke')],
      [[text('a'), Annotated.fromError<LLMEngineOutput>(new Error('broke'))], undefined],
    ] as const) {
      const { res, done, seen } = relay([...items], { end });
      await done;
      expect(seen.pulls).toBe(2);
      expect(res.written).toHaveLength(2);
      expect(res.written[1]).toMatch(/^event: error\ndata: \{"error":\{"message":"broke".*\}\n\n$/);
      expect(res.writableEnded).toBe(true);
      expect(seen.returned).toBe(true);
    }
  });

  it('a client that has left: nothing more is written or read, the source is closed', async () => {
    const res = new FakeResponse();
    const { done, seen, failures } = relay([text('a'), text('b')], { res });
    res.destroyed = true;
    await done;
    expect(res.written).toEqual([]);
    expect(seen.pulls).toBe(1);
    expect(seen.returned).toBe(true);
    expect(failures).toEqual([]);
  });

  it('a failure after the client left mid-stream is noted, not written', async () => {
    const res = new FakeResponse();
    const items = [text('a')];
    const iterator: AsyncIterator<EngineItem> = {
      async next() {
        const item = items.shift();
        if (item !== undefined) return { value: item, done: false };
        res.destroyed = true;
        throw new Error('reset by the client leaving');
      },
    };
    const failures: unknown[] = [];
    await relaySse(
      { [Symbol.asyncIterator]: () => iterator } as unknown as ResponseStream<EngineItem>,
      res as unknown as ServerResponse,
      new ResponseWriter(endpointNamed('completions'), { model: 'm' }),
      { context: new Controller('r'), res: res as unknown as ServerResponse, shutdown: () => {} },
      {
        slowClientTimeoutMs: 1000,
        answerFor: (error) => {
          failures.push(error);
          return errorAnswer(error);
        },
        interToken: () => {},
      },
    );
    expect(failures).toHaveLength(1);
    expect(res.written).toHaveLength(1);
    expect(res.writableEnded).toBe(false);
  });

  it('a failure when the answer has ended already is noted, not written', async () => {
    const res = new FakeResponse();
    res.writableEnded = true;
    const { done, failures } = relay([], { res, end: new Error('late') });
    await done;
    expect(failures).toHaveLength(1);
    expect(res.written).toEqual([]);
  });

  it('shutdown stops the request and ends the stream with a shutdown error event', async () => {
    let release: () => void = () => {};
    const res = new FakeResponse();
    const context = new Controller('r');
    const stop = vi.spyOn(context, 'stopGenerating');
    const entry: InFlightRequest = { context, res: res as unknown as ServerResponse, shutdown: () => {} };
    const items = [text('a')];
    const iterator: AsyncIterator<EngineItem> = {
      async next() {
        const item = items.shift();
        if (item !== undefined) return { value: item, done: false };
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        return { value: undefined, done: true };
      },
    };
    const done = relaySse(
      { [Symbol.asyncIterator]: () => iterator } as unknown as ResponseStream<EngineItem>,
      res as unknown as ServerResponse,
      new ResponseWriter(endpointNamed('completions'), { model: 'm' }),
      entry,
      { slowClientTimeoutMs: 1000, answerFor: (error) => errorAnswer(error), interToken: () => {} },
    );
    await vi.waitFor(() => expect(res.written).toHaveLength(1));
    entry.shutdown();
    expect(stop).toHaveBeenCalledTimes(1);
    expect(res.written[1]).toMatch(/^event: error\ndata: .*"code":503/);
    release();
    await done;
    expect(res.written).toHaveLength(2);
  });

  it('a client that leaves its socket full past slowClientTimeoutMs is given up: the request stopped, the connection closed', async () => {
    vi.useFakeTimers();
    const res = new FakeResponse();
    res.full = true;
    const { done, stop, seen } = relay([text('a'), text('b')], { res });
    await vi.advanceTimersByTimeAsync(999);
    expect(res.destroyed).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await done;
    expect(res.destroyed).toBe(true);
    expect(stop).toHaveBeenCalledTimes(1);
    expect(res.written).toHaveLength(1);
    expect(seen.pulls).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a full socket that drains in time: the stream goes on, and the timer goes with the wait', async () => {
    vi.useFakeTimers();
    const res = new FakeResponse();
    res.full = true;
    const { done, seen } = relay([text('a'), text('b')], { res });
    await vi.advanceTimersByTimeAsync(500);
    expect(vi.getTimerCount()).toBe(1);
    res.full = false;
    res.emit('drain');
    await done;
    expect(res.written.at(-1)).toBe('data: [DONE]\n\n');
    expect(res.written).toHaveLength(3);
    expect(seen.pulls).toBe(3);
    expect(vi.getTimerCount()).toBe(0);
  });
});
