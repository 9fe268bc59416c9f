import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { type DecodeStream, PrefillTask } from '../../src/handoff/prefill-task.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import {
  collect,
  decodeStream,
  deferred,
  flush,
  type Item,
  isPending,
  lengthItem,
  recordingLogger,
  ScriptedSource,
  token,
} from '../support/async.js';

function pendingPrefill(logger = recordingLogger()) {
  const prefill = deferred();
  const task = PrefillTask.spawn(prefill.promise, { logger: logger.logger });
  return { prefill, task, records: logger.records };
}

describe('prefill faults', () => {
  it('a prefill that fails after decode finished changes nothing for the client, and is logged once', async () => {
    const { prefill, task, records } = pendingPrefill();
    const context = new Controller();
    const source = new ScriptedSource([token(1), lengthItem()]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source)), context);
    const reading = collect(response);
    await flush();
    prefill.resolve();
    const items = await reading;
    expect(items).toHaveLength(2);
    // A second task, failing after its stream ended with a decode failure:
    const late = pendingPrefill();
    const failed = await late.task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([Annotated.fromError('decode lost')]))),
      context,
    );
    expect(Annotated.err((await collect(failed))[0])?.message).toBe('decode lost');
    late.prefill.reject(new Error('late prefill failure'));
    await expect(late.task.wait()).rejects.toThrow('late prefill failure');
    expect(late.records.filter((r) => r.level === 'warn')).toHaveLength(1);
    expect(context.isStopped()).toBe(false);
    expect(records).toEqual([]);
  });

  it('a prefill that never settles: tokens flow, the end is held, the consumer can still close, nothing is stopped', async () => {
    const { task } = pendingPrefill();
    const context = new Controller();
    const decodeContext = new Controller('decode');
    const source = new ScriptedSource([token(1), lengthItem()]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, decodeContext)), context);
    const iterator = response[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    await expect(iterator.return?.()).resolves.toMatchObject({ done: true });
    expect((await held).done).toBe(true);
    expect(source.closed).toBe(true);
    expect(context.isStopped() || decodeContext.isStopped()).toBe(false);
  });

  it.each([
    ['a string', 'out of KV blocks', 'Prefill execution failed: out of KV blocks'],
    ['undefined', undefined, 'Prefill execution failed: undefined'],
    ['an object', { code: 'EPIPE' }, 'Prefill execution failed: {"code":"EPIPE"}'],
  ])('a prefill rejecting with %s reaches the client as one readable error item', async (_, reason, message) => {
    const { prefill, task } = pendingPrefill();
    const response = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([lengthItem()]))),
      new Controller(),
    );
    const reading = collect(response);
    await flush();
    prefill.reject(reason);
    const items = await reading;
    expect(items).toHaveLength(1);
    expect(Annotated.err(items[0])?.message).toBe(message);
    expect(JSON.parse(JSON.stringify(items[0])).error).toBe(message);
  });
});

describe('decode faults', () => {
  it('a decode iterator whose next() answers without a promise is still read', async () => {
    const { prefill, task } = pendingPrefill();
    const results: IteratorResult<Item>[] = [
      { value: token(1), done: false },
      { value: lengthItem(), done: false },
      { value: undefined, done: true },
    ];
    const source = { next: () => results.shift() as IteratorResult<Item> } as unknown as AsyncIterator<Item>;
    const iterable = { [Symbol.asyncIterator]: () => source };
    const response = await task.forwardDecode(
      Promise.resolve(new ResponseStream(iterable, new Controller())),
      new Controller(),
    );
    const reading = collect(response);
    await flush();
    prefill.resolve();
    expect(await reading).toEqual([token(1), lengthItem()]);
  });

  it('an iterator without return() is ended without a crash', async () => {
    const { task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const bare = { next: () => source.next() };
    const response = await task.forwardDecode(
      Promise.resolve(new ResponseStream({ [Symbol.asyncIterator]: () => bare }, new Controller())),
      new Controller(),
    );
    for await (const _ of response) break;
  });

  it.each([
    ['a number', 42],
    ['an object without error', { reason: 'x' }],
  ])('a finish reason that is %s is treated as a terminal: held, then passed on unchanged', async (_, reason) => {
    const { prefill, task } = pendingPrefill();
    const odd = { data: { token_ids: [], finish_reason: reason } } as unknown as Item;
    const response = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([odd]))),
      new Controller(),
    );
    const iterator = response[Symbol.asyncIterator]();
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    prefill.resolve();
    expect((await held).value).toBe(odd);
  });

  it('a dispatch that never settles while prefill fails: the call fails at once and the signal aborts', async () => {
    const { prefill, task } = pendingPrefill();
    let signal: AbortSignal | undefined;
    const call = task.forwardDecode((s) => {
      signal = s;
      return new Promise<DecodeStream>(() => {});
    }, new Controller());
    prefill.reject(new Error('prefill lost'));
    await expect(call).rejects.toBeInstanceOf(PrefillError);
    expect(signal?.aborted).toBe(true);
  });
});

describe('consumer misuse', () => {
  it('return() while a next() waits on a stuck decode after prefill succeeded ends both at once', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    // A source that ignores return() while a next() is pending, like an async generator.
    source.return = () => new Promise(() => {});
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source)), new Controller());
    const iterator = response[Symbol.asyncIterator]();
    const next = iterator.next();
    await flush();
    prefill.resolve();
    await flush();
    const closing = iterator.return?.();
    expect(await next).toEqual({ value: undefined, done: true });
    expect(await closing).toEqual({ value: undefined, done: true });
  });

  it('next() after the end keeps answering done', async () => {
    const { prefill, task } = pendingPrefill();
    const response = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([lengthItem()]).end())),
      new Controller(),
    );
    const iterator = response[Symbol.asyncIterator]();
    const reading = iterator.next();
    prefill.resolve();
    expect((await reading).value).toEqual(lengthItem());
    for (let i = 0; i < 3; i++) expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('throw() before the first next() closes decode and rejects with the given error', async () => {
    const { task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source)), new Controller());
    const error = new Error('client gone');
    await expect(response[Symbol.asyncIterator]().throw?.(error)).rejects.toBe(error);
    expect(source.closed).toBe(true);
  });
});

describe('request contexts', () => {
  it.each(['before', 'during', 'after'] as const)(
    'a client that stops the request %s the dispatch does not cancel prefill, and the stream still follows prefill',
    async (when) => {
      const { prefill, task } = pendingPrefill();
      const client = new Controller('client');
      if (when === 'before') client.stopGenerating();
      const dispatch = deferred<DecodeStream>();
      const call = task.forwardDecode(() => dispatch.promise, client);
      if (when === 'during') client.kill();
      dispatch.resolve(decodeStream(new ScriptedSource([token(1), lengthItem()])));
      const response = await call;
      if (when === 'after') client.kill();
      const reading = collect(response);
      await flush();
      prefill.resolve();
      expect(await reading).toHaveLength(2);
      await expect(task.wait()).resolves.toBeUndefined();
    },
  );

  it('a killed request context stays killed when a prefill failure stops it again', async () => {
    const { prefill, task } = pendingPrefill();
    const client = new Controller('client');
    const response = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([lengthItem()]))),
      client,
    );
    client.kill();
    const reading = collect(response);
    await flush();
    prefill.reject(new Error('prefill lost'));
    await reading;
    expect(client.isKilled()).toBe(true);
    expect(client.isStopped()).toBe(true);
  });
});

describe('the prefill outcome', () => {
  it('holds no listener once prefill has settled', async () => {
    const { prefill, task } = pendingPrefill();
    const { outcomeOf } = await import('../../src/handoff/prefill-task.js');
    const response = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([token(1)]))),
      new Controller(),
    );
    await response[Symbol.asyncIterator]().next();
    expect(outcomeOf(task).listenerCount).toBe(1);
    prefill.resolve();
    await task.wait();
    expect(outcomeOf(task).listenerCount).toBe(0);
  });
});
