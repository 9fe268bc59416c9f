import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { type DecodeStream, outcomeOf, PrefillTask } from '../../src/handoff/prefill-task.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
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

const failure = () => new Error('prefill connection lost');

/** A prefill the test settles by hand. */
function pendingPrefill() {
  const prefill = deferred();
  const task = PrefillTask.spawn(prefill.promise, { logger: recordingLogger().logger });
  return { prefill, task };
}

function settledPrefill(outcome: 'ok' | 'failed') {
  const task = PrefillTask.spawn(outcome === 'ok' ? Promise.resolve() : Promise.reject(failure()), {
    logger: recordingLogger().logger,
  });
  return task;
}

const tokenIds = (items: Item[]) => items.map((item) => item.data?.token_ids ?? Annotated.err(item)?.message);

describe('the reference scenarios', () => {
  it('1. a prefill failure interrupts a pending decode dispatch', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const response = task.forwardDecode(new Promise<DecodeStream>(() => {}), context);
    expect(await isPending(response)).toBe(true);
    prefill.reject(failure());
    await expect(response).rejects.toThrow('prefill connection lost');
    await expect(response).rejects.toBeInstanceOf(PrefillError);
    expect(context.isStopped()).toBe(true);
  });

  it('2. a prefill failure interrupts the wait for decode tokens', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const source = new ScriptedSource();
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, context)), context);
    const iterator = response[Symbol.asyncIterator]();
    const next = iterator.next();
    expect(await isPending(next)).toBe(true);
    prefill.reject(failure());
    const { value } = await next;
    expect(Annotated.err(value)?.message).toContain('prefill connection lost');
    expect(context.isStopped()).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('3. tokens flow while prefill is pending, but the length terminal waits for prefill success', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const source = new ScriptedSource([token(42), lengthItem()]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, context)), context);
    const iterator = response[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.token_ids).toEqual([42]);
    const terminal = iterator.next();
    expect(await isPending(terminal)).toBe(true);
    prefill.resolve();
    expect((await terminal).value?.data?.finish_reason).toBe('length');
    expect((await iterator.next()).done).toBe(true);
    expect(context.isStopped()).toBe(false);
  });

  it('4. a late prefill failure replaces a decode success', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const source = new ScriptedSource([lengthItem()]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source)), context);
    const iterator = response[Symbol.asyncIterator]();
    const terminal = iterator.next();
    expect(await isPending(terminal)).toBe(true);
    prefill.reject(failure());
    expect(Annotated.err((await terminal).value)?.message).toContain('prefill connection lost');
    expect((await iterator.next()).done).toBe(true);
  });

  it('5. a decode failure does not wait for prefill', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const decodeContext = new Controller('decode');
    const source = new ScriptedSource([Annotated.fromError('decode failed')]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, decodeContext)), context);
    const iterator = response[Symbol.asyncIterator]();
    const first = iterator.next();
    expect(await isPending(first)).toBe(false);
    expect(Annotated.err((await first).value)?.message).toBe('decode failed');
    expect((await iterator.next()).done).toBe(true);
    expect(context.isStopped()).toBe(false);
    expect(decodeContext.isStopped()).toBe(false);
    prefill.resolve();
  });

  it('6. a completed prefill leaves the decode stream unchanged', async () => {
    const task = settledPrefill('ok');
    await task.wait();
    const context = new Controller();
    const decode = decodeStream(new ScriptedSource([lengthItem()]).end(), context);
    const response = await task.forwardDecode(Promise.resolve(decode), context);
    expect(response).toBe(decode);
    expect(tokenIds(await collect(response))).toEqual([[]]);
    expect(context.isStopped()).toBe(false);
  });

  it('7. a disconnected client does not drop the prefill transfer', async () => {
    const release = deferred();
    let finished = false;
    const task = PrefillTask.spawn(
      async () => {
        await release.promise;
        finished = true;
      },
      { logger: recordingLogger().logger },
    );
    const context = new Controller();
    const source = new ScriptedSource();
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, context)), context);
    context.stopGenerating();
    await response[Symbol.asyncIterator]().return?.();
    release.resolve();
    await task.wait();
    expect(finished).toBe(true);
  });
});

describe('phase A: while the decode dispatch is pending (rules 5-8)', () => {
  it('5. abandoning the dispatch aborts its signal and releases a stream that arrives later', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const dispatch = deferred<DecodeStream>();
    let signal: AbortSignal | undefined;
    const response = task.forwardDecode((s) => {
      signal = s;
      return dispatch.promise;
    }, context);
    expect(signal?.aborted).toBe(false);
    prefill.reject(failure());
    await expect(response).rejects.toThrow('prefill connection lost');
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toBeInstanceOf(PrefillError);

    const lateContext = new Controller('late decode');
    const lateSource = new ScriptedSource([token(1)]);
    dispatch.resolve(decodeStream(lateSource, lateContext));
    await flush();
    expect(lateContext.isStopped()).toBe(true);
    expect(lateSource.closed).toBe(true);
  });

  it('5. a prefill that has already failed releases a decode stream that was already dispatched', async () => {
    const task = settledPrefill('failed');
    await task.wait().catch(() => {});
    const decodeContext = new Controller('decode');
    const source = new ScriptedSource([token(1)]);
    await expect(
      task.forwardDecode(Promise.resolve(decodeStream(source, decodeContext)), new Controller()),
    ).rejects.toBeInstanceOf(PrefillError);
    await flush();
    expect(decodeContext.isStopped()).toBe(true);
    expect(source.closed).toBe(true);
  });

  it('5. a late dispatch without a context of its own is still closed', async () => {
    const { prefill, task } = pendingPrefill();
    const dispatch = deferred<DecodeStream>();
    const call = task.forwardDecode(dispatch.promise, new Controller());
    prefill.reject(failure());
    await expect(call).rejects.toBeInstanceOf(PrefillError);
    const source = new ScriptedSource([token(1)]);
    dispatch.resolve(source as unknown as DecodeStream);
    await flush();
    expect(source.closed).toBe(true);
  });

  it('5. a prefill that has already failed wins before decode is even dispatched', async () => {
    const task = settledPrefill('failed');
    await task.wait().catch(() => {});
    const context = new Controller();
    let dispatched = false;
    const response = task.forwardDecode(() => {
      dispatched = true;
      return new Promise<DecodeStream>(() => {});
    }, context);
    await expect(response).rejects.toThrow('prefill connection lost');
    expect(dispatched).toBe(false);
    expect(context.isStopped()).toBe(true);
  });

  it('5. biased: a prefill failure settling in the same turn as the dispatch wins', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const dispatch = deferred<DecodeStream>();
    const decodeContext = new Controller('decode');
    const source = new ScriptedSource([token(1)]);
    const response = task.forwardDecode(dispatch.promise, context);
    dispatch.resolve(decodeStream(source, decodeContext));
    prefill.reject(failure());
    await expect(response).rejects.toThrow('prefill connection lost');
    await flush();
    expect(decodeContext.isStopped()).toBe(true);
    expect(source.closed).toBe(true);
  });

  it('5. a dispatch that rejects after being abandoned is not an unhandled rejection', async () => {
    const { prefill, task } = pendingPrefill();
    const dispatch = deferred<DecodeStream>();
    const response = task.forwardDecode(dispatch.promise, new Controller());
    prefill.reject(failure());
    await expect(response).rejects.toThrow('prefill connection lost');
    dispatch.reject(new Error('decode worker also failed'));
    await flush();
  });

  it('6. a prefill success first returns the decode response itself, unwrapped', async () => {
    const { prefill, task } = pendingPrefill();
    const dispatch = deferred<DecodeStream>();
    const response = task.forwardDecode(dispatch.promise, new Controller());
    prefill.resolve();
    await flush();
    const decode = decodeStream(new ScriptedSource([lengthItem()]));
    dispatch.resolve(decode);
    expect(await response).toBe(decode);
  });

  it('7. a failed dispatch fails the call with its own error, stops nothing, and prefill runs on', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const dispatchError = new Error('decode worker refused');
    await expect(task.forwardDecode(Promise.reject(dispatchError), context)).rejects.toBe(dispatchError);
    expect(context.isStopped()).toBe(false);
    prefill.resolve();
    await expect(task.wait()).resolves.toBeUndefined();
  });

  it('7. a dispatch function that throws synchronously is a failed dispatch', async () => {
    const { task } = pendingPrefill();
    await expect(
      task.forwardDecode(() => {
        throw new Error('no decode worker');
      }, new Controller()),
    ).rejects.toThrow('no decode worker');
  });

  it('8. a dispatch that succeeds first is wrapped, carrying the decode context', async () => {
    const { prefill, task } = pendingPrefill();
    const decodeContext = new Controller('decode');
    const decode = decodeStream(new ScriptedSource([token(1), lengthItem()]).end(), decodeContext);
    const response = await task.forwardDecode(Promise.resolve(decode), new Controller());
    expect(response).not.toBe(decode);
    expect(response).toBeInstanceOf(ResponseStream);
    expect(response.context).toBe(decodeContext);
    prefill.resolve();
    expect(tokenIds(await collect(response))).toEqual([[1], []]);
  });

  it('8. a dispatch that resolves to a bare async iterable gets the request context', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const response = await task.forwardDecode(
      Promise.resolve(new ScriptedSource([lengthItem()]).end() as unknown as DecodeStream),
      context,
    );
    expect(response.context).toBe(context);
    prefill.resolve();
    expect(await collect(response)).toHaveLength(1);
  });
});

describe('phase B: the wrapped stream (rules 9-14)', () => {
  async function wrapped(source: ScriptedSource) {
    const { prefill, task } = pendingPrefill();
    const context = new Controller('client');
    const decodeContext = new Controller('decode');
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source, decodeContext)), context);
    return {
      prefill,
      task,
      context,
      decodeContext,
      response,
      // A getter: only the tests that destructure it start an iteration.
      get iterator() {
        return response[Symbol.asyncIterator]();
      },
    };
  }

  it('9. a prefill failure stops both contexts, yields exactly one error item, ends, and closes decode', async () => {
    const source = new ScriptedSource([token(1)]);
    const { prefill, context, decodeContext, iterator } = await wrapped(source);
    expect((await iterator.next()).value?.data?.token_ids).toEqual([1]);
    prefill.reject(failure());
    await flush();
    source.push(token(2)).push(lengthItem());
    const error = await iterator.next();
    expect(Annotated.isError(error.value)).toBe(true);
    const carried = Annotated.err(error.value);
    expect(carried).toBeInstanceOf(PrefillError);
    expect(carried?.message).toBe('Prefill execution failed: prefill connection lost');
    expect(context.isStopped()).toBe(true);
    expect(decodeContext.isStopped()).toBe(true);
    expect(source.closed).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('9. biased: a known prefill failure wins over a decode item that is already available', async () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const { prefill, iterator } = await wrapped(source);
    prefill.reject(failure());
    await flush();
    const first = await iterator.next();
    expect(Annotated.isError(first.value)).toBe(true);
    expect(source.nextCalls).toBe(0);
  });

  it('9. biased: a prefill failure settling in the same turn as a decode item wins', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    const next = iterator.next();
    await flush();
    source.push(token(1));
    prefill.reject(failure());
    expect(Annotated.isError((await next).value)).toBe(true);
  });

  it('9. the error item survives JSON and is still recognised with its message', async () => {
    const { prefill, iterator } = await wrapped(new ScriptedSource());
    prefill.reject(failure());
    const { value } = await iterator.next();
    const wire = JSON.parse(JSON.stringify(value));
    expect(Annotated.isError(wire)).toBe(true);
    expect(Annotated.err(wire)?.message).toBe('Prefill execution failed: prefill connection lost');
  });

  it('10. after prefill succeeds the remaining items are forwarded unchanged, even past a terminal', async () => {
    const items = [token(1), token(2), lengthItem(), token(3)];
    const source = new ScriptedSource(items);
    const { prefill, iterator, context } = await wrapped(source);
    prefill.resolve();
    await flush();
    const seen: Item[] = [];
    source.end();
    for (let r = await iterator.next(); r.done !== true; r = await iterator.next()) seen.push(r.value);
    expect(seen).toEqual(items);
    expect(seen[0]).toBe(items[0]);
    expect(context.isStopped()).toBe(false);
  });

  it('10. no item is lost when prefill succeeds while a decode pull is in flight', async () => {
    const source = new ScriptedSource([token(1)]);
    const { prefill, iterator } = await wrapped(source);
    expect((await iterator.next()).value?.data?.token_ids).toEqual([1]);
    const inFlight = iterator.next();
    await flush();
    expect(source.nextCalls).toBe(2);
    prefill.resolve();
    await flush();
    source.push(token(2)).push(token(3)).push(lengthItem()).end();
    expect((await inFlight).value?.data?.token_ids).toEqual([2]);
    const rest = [];
    for (let r = await iterator.next(); r.done !== true; r = await iterator.next()) rest.push(r.value);
    expect(tokenIds(rest)).toEqual([[3], []]);
    // The pull that was in flight was read once, not repeated.
    expect(source.nextCalls).toBe(5);
  });

  it.each([
    ['an error item', Annotated.fromError('decode worker lost')],
    ['finish reason {error}', Annotated.fromData(LLMEngineOutput.error('decode OOM'))],
    ['finish reason cancelled', Annotated.fromData(LLMEngineOutput.cancelled())],
  ])('11. while prefill is pending, %s is yielded at once and ends the stream; nothing stopped', async (_, failed) => {
    const source = new ScriptedSource([token(1), failed, token(2)]);
    const { iterator, context, decodeContext, task } = await wrapped(source);
    expect((await iterator.next()).value).toEqual(token(1));
    const second = iterator.next();
    expect(await isPending(second)).toBe(false);
    expect((await second).value).toBe(failed);
    expect(source.closed).toBe(true);
    expect((await iterator.next()).done).toBe(true);
    expect(context.isStopped()).toBe(false);
    expect(decodeContext.isStopped()).toBe(false);
    expect(await isPending(task.wait())).toBe(true);
  });

  it.each([
    ['eos', LLMEngineOutput.eos()],
    ['length', LLMEngineOutput.length()],
    ['stop', LLMEngineOutput.stop()],
    ['content_filter', { token_ids: [], finish_reason: 'content_filter' as const }],
  ])('12. a %s terminal is held until prefill succeeds, then yielded, then the stream ends', async (_, data) => {
    const terminal = Annotated.fromData(data);
    const source = new ScriptedSource([terminal, token(99)]);
    const { prefill, iterator } = await wrapped(source);
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    prefill.resolve();
    expect((await held).value).toBe(terminal);
    expect((await iterator.next()).done).toBe(true);
    expect(source.closed).toBe(true);
  });

  it('12. the end of the decode stream is held until prefill succeeds', async () => {
    const source = new ScriptedSource([token(1)]).end();
    const { prefill, iterator } = await wrapped(source);
    await iterator.next();
    const end = iterator.next();
    expect(await isPending(end)).toBe(true);
    prefill.resolve();
    expect(await end).toEqual({ value: undefined, done: true });
  });

  it('12. a prefill failure replaces the held end of the decode stream', async () => {
    const source = new ScriptedSource().end();
    const { prefill, iterator, context, decodeContext } = await wrapped(source);
    const end = iterator.next();
    expect(await isPending(end)).toBe(true);
    prefill.reject(failure());
    expect(Annotated.err((await end).value)?.message).toContain('prefill connection lost');
    expect(context.isStopped()).toBe(true);
    expect(decodeContext.isStopped()).toBe(true);
    expect((await iterator.next()).done).toBe(true);
  });

  it('12. a held terminal with an unknown finish reason string is still held, not crashed on', async () => {
    const odd = { data: { token_ids: [], finish_reason: 'tool_calls' } } as unknown as Item;
    const source = new ScriptedSource([odd]);
    const { prefill, iterator } = await wrapped(source);
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    prefill.resolve();
    expect((await held).value).toBe(odd);
  });

  it('13. while prefill is pending, tokens, annotations and items without data flow at once', async () => {
    const annotation: Item = { event: 'metrics', comment: ['{"ttft_ms":3}'] };
    const malformed = [null, {}, { data: null }] as unknown as Item[];
    const items = [token(1), annotation, ...malformed, token(2)];
    const source = new ScriptedSource(items);
    const { iterator, task } = await wrapped(source);
    for (const expected of items) {
      const next = iterator.next();
      expect(await isPending(next)).toBe(false);
      expect((await next).value).toBe(expected);
    }
    expect(await isPending(task.wait())).toBe(true);
  });

  it('14. closing the stream early closes decode and never cancels prefill', async () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const { prefill, response, context, decodeContext, task } = await wrapped(source);
    for await (const item of response) {
      expect(item).toEqual(token(1));
      break;
    }
    expect(source.closed).toBe(true);
    expect(context.isStopped()).toBe(false);
    expect(decodeContext.isStopped()).toBe(false);
    prefill.resolve();
    await expect(task.wait()).resolves.toBeUndefined();
  });

  it('14. return() before the first next() still closes decode', async () => {
    const source = new ScriptedSource([token(1)]);
    const { iterator } = await wrapped(source);
    expect(await iterator.return?.()).toEqual({ value: undefined, done: true });
    expect(source.closed).toBe(true);
    expect((await iterator.next()).done).toBe(true);
  });

  it('14. return() while a next() waits on a stuck decode and a pending prefill ends both at once', async () => {
    const source = new ScriptedSource();
    const { iterator, context, task } = await wrapped(source);
    const next = iterator.next();
    expect(await isPending(next)).toBe(true);
    const closing = iterator.return?.();
    expect(await next).toEqual({ value: undefined, done: true });
    expect(await closing).toEqual({ value: undefined, done: true });
    expect(source.closed).toBe(true);
    expect(context.isStopped()).toBe(false);
    expect(await isPending(task.wait())).toBe(true);
  });

  it('14. return() while a terminal is held for prefill ends the stream without waiting', async () => {
    const source = new ScriptedSource([lengthItem()]);
    const { iterator } = await wrapped(source);
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    await iterator.return?.();
    expect((await held).done).toBe(true);
  });

  it('14. throw() closes decode and rethrows to the consumer', async () => {
    const source = new ScriptedSource([token(1)]);
    const { iterator } = await wrapped(source);
    await iterator.next();
    const consumerError = new Error('client went away');
    await expect(iterator.throw?.(consumerError)).rejects.toBe(consumerError);
    expect(source.closed).toBe(true);
  });

  it('a decode iterator that throws while prefill is pending fails the stream with that error; nothing stopped', async () => {
    const source = new ScriptedSource([token(1)]);
    const { iterator, context, decodeContext } = await wrapped(source);
    await iterator.next();
    const broken = new Error('socket reset');
    source.fail(broken);
    await expect(iterator.next()).rejects.toBe(broken);
    expect(context.isStopped()).toBe(false);
    expect(decodeContext.isStopped()).toBe(false);
    expect((await iterator.next()).done).toBe(true);
  });

  it('a decode iterator that throws after prefill succeeded fails the stream with that error', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    prefill.resolve();
    await flush();
    const broken = new Error('socket reset');
    source.fail(broken);
    await expect(iterator.next()).rejects.toBe(broken);
  });

  it('a prefill failure ends the stream even when the decode source is an async generator stuck in next()', async () => {
    let returned = false;
    async function* stuck(): AsyncGenerator<Item> {
      try {
        yield token(1);
        await new Promise(() => {});
      } finally {
        returned = true;
      }
    }
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const response = await task.forwardDecode(Promise.resolve(new ResponseStream(stuck(), context)), context);
    const iterator = response[Symbol.asyncIterator]();
    await iterator.next();
    const next = iterator.next();
    prefill.reject(failure());
    expect(Annotated.isError((await next).value)).toBe(true);
    expect((await iterator.next()).done).toBe(true);
    // The generator's return() is queued behind its stuck next(): requested, never awaited.
    expect(returned).toBe(false);
  });

  it('a decode source whose return() throws or never settles does not hold the stream', async () => {
    const throwing = new ScriptedSource([token(1)]);
    throwing.return = () => {
      throw new Error('cannot close');
    };
    const hanging = new ScriptedSource([token(1)]);
    hanging.return = () => new Promise(() => {});
    for (const source of [throwing, hanging]) {
      const { iterator } = await wrapped(source);
      await iterator.next();
      await expect(iterator.return?.()).resolves.toEqual({ value: undefined, done: true });
    }
  });

  it('a forwarded stream can be iterated only once', async () => {
    const { response } = await wrapped(new ScriptedSource());
    response[Symbol.asyncIterator]();
    expect(() => response[Symbol.asyncIterator]()).toThrow(
      'This decode stream is already being iterated; a forwarded decode stream can be iterated only once',
    );
  });

  it("after prefill succeeds and the guard is idle, next() hands the decode iterator's own promise through", async () => {
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    const { prefill, iterator } = await wrapped(source);
    expect((await iterator.next()).value).toEqual(token(1));
    prefill.resolve();
    await flush();
    expect((await iterator.next()).value).toEqual(token(2)); // read by the guard, then idle
    const third = iterator.next();
    expect(third).toBe(source.answers[source.answers.length - 1]); // straight from the source
    expect((await third).value).toEqual(token(3));
    await iterator.return?.();
    expect(source.closed).toBe(true);
  });

  it('a stream whose prefill succeeded before the first read is the decode iterator, guarded only for return()', async () => {
    const source = new ScriptedSource([token(1)]).end();
    const { prefill, task, response } = await wrapped(source);
    prefill.resolve();
    await task.wait();
    const iterator = response[Symbol.asyncIterator]();
    const first = iterator.next();
    expect(first).toBe(source.answers[0]);
    expect((await first).value).toEqual(token(1));
    expect((await iterator.next()).done).toBe(true);
    expect(source.nextCalls).toBe(2);
  });

  it('concurrent next() calls keep their order across the hand-off to the decode iterator', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    const reads = [iterator.next(), iterator.next(), iterator.next()];
    await flush();
    prefill.resolve();
    await flush();
    const more = [iterator.next(), iterator.next()];
    for (let id = 1; id <= 5; id++) source.push(token(id));
    source.end();
    const ids = (await Promise.all([...reads, ...more])).map((r) => r.value?.data?.token_ids[0]);
    expect(ids).toEqual([1, 2, 3, 4, 5]);
    expect((await iterator.next()).done).toBe(true);
  });

  it('13. tokens whose finish_reason is null (as engines send them in JSON) flow at once', async () => {
    const item = { data: { token_ids: [5], finish_reason: null } } as Item;
    const { iterator } = await wrapped(new ScriptedSource([item]));
    const next = iterator.next();
    expect(await isPending(next)).toBe(false);
    expect((await next).value).toBe(item);
  });

  it('a decode throw after prefill succeeded mid-pull reaches the consumer, and decode is not closed again', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    const next = iterator.next();
    await flush();
    prefill.resolve();
    await flush();
    const broken = new Error('socket reset');
    source.fail(broken);
    await expect(next).rejects.toBe(broken);
    expect(source.returnCalls).toBe(0);
  });

  it('after return(), next() answers done even from a decode iterator that ignores return()', async () => {
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    source.return = async () => ({ value: undefined, done: true }); // keeps its items
    const { prefill, iterator } = await wrapped(source);
    prefill.resolve();
    await flush();
    await iterator.next(); // read by the guard, then parked: reads go straight to decode
    await iterator.next();
    await iterator.return?.();
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    // The same for a stream whose prefill had succeeded before its first read.
    const late = new ScriptedSource([token(1), token(2)]);
    late.return = async () => ({ value: undefined, done: true });
    const second = await wrapped(late);
    second.prefill.resolve();
    await second.task.wait();
    const direct = second.response[Symbol.asyncIterator]();
    await direct.next();
    await direct.return?.();
    expect(await direct.next()).toEqual({ value: undefined, done: true });
  });

  it('the iterator is its own async iterable', async () => {
    const { iterator } = await wrapped(new ScriptedSource());
    expect((iterator as AsyncIterableIterator<Item>)[Symbol.asyncIterator]()).toBe(iterator);
  });

  it("closing early calls the decode iterator's return() exactly once", async () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const { iterator } = await wrapped(source);
    await iterator.next();
    await iterator.return?.();
    await iterator.return?.();
    expect(source.returnCalls).toBe(1);
  });

  it('biased: a prefill failure in the same turn as a rejected decode pull wins', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    const next = iterator.next();
    await flush();
    source.fail(new Error('socket reset'));
    prefill.reject(failure());
    const { value } = await next;
    expect(Annotated.err(value)).toBeInstanceOf(PrefillError);
  });

  it('a pull queued behind others is never overtaken by a read after the hand-off', async () => {
    const source = new ScriptedSource();
    const { prefill, iterator } = await wrapped(source);
    const [a, b, c] = [iterator.next(), iterator.next(), iterator.next()];
    await flush();
    prefill.resolve();
    await flush();
    source.push(token(1));
    await a; // the guard now waits on b's pull, with c still queued behind it
    const d = iterator.next();
    for (const id of [2, 3, 4]) source.push(token(id));
    const ids = (await Promise.all([a, b, c, d])).map((r) => r.value?.data?.token_ids[0]);
    expect(ids).toEqual([1, 2, 3, 4]);
  });

  it('pipelined reads: a call made while the guard yields with another call queued does not overtake it', async () => {
    // After prefill has succeeded: two calls at once, a third some microtasks later. The third
    // used to go straight to decode while the second still waited in the guard: [1, 3, 2].
    for (let depth = 0; depth <= 6; depth++) {
      const source = new ScriptedSource([token(1), token(2), token(3), token(4)]);
      const { prefill, iterator } = await wrapped(source);
      prefill.resolve();
      await flush();
      const calls = [iterator.next(), iterator.next()];
      let turn = Promise.resolve();
      for (let i = 0; i < depth; i++) turn = turn.then();
      await turn;
      calls.push(iterator.next());
      const ids = (await Promise.all(calls)).map((r) => r.value?.data?.token_ids[0]);
      expect({ depth, ids }).toEqual({ depth, ids: [1, 2, 3] });
    }
  });

  it('pipelined reads: a call made as a token arrives for two queued calls keeps its place', async () => {
    for (let depth = 0; depth <= 6; depth++) {
      const source = new ScriptedSource();
      const { prefill, iterator } = await wrapped(source);
      prefill.resolve();
      await flush();
      const calls = [iterator.next(), iterator.next()];
      await flush();
      source.push(token(1));
      let turn = Promise.resolve();
      for (let i = 0; i < depth; i++) turn = turn.then();
      turn.then(() => calls.push(iterator.next()));
      await flush();
      source.push(token(2));
      source.push(token(3));
      const ids = (await Promise.all(calls)).map((r) => r.value?.data?.token_ids[0]);
      expect({ depth, ids }).toEqual({ depth, ids: [1, 2, 3] });
      // Answers settle in call order too.
      const order: number[] = [];
      const more = [iterator.next(), iterator.next()];
      for (const [i, call] of more.entries()) call.then(() => order.push(i));
      source.push(token(4)).end();
      await Promise.all(more);
      expect(order).toEqual([0, 1]);
    }
  });

  it('streams unregister from the prefill when they end, so a long prefill holds nothing of them', async () => {
    const { prefill, task } = pendingPrefill();
    const outcome = outcomeOf(task);
    const source = new ScriptedSource([token(1), Annotated.fromError('decode lost')]);
    const response = await task.forwardDecode(Promise.resolve(decodeStream(source)), new Controller());
    expect(outcome.listenerCount).toBe(0); // phase A's own listener is gone
    const iterator = response[Symbol.asyncIterator]();
    await iterator.next();
    expect(outcome.listenerCount).toBe(1);
    await iterator.next(); // the decode failure ends the stream
    expect(outcome.listenerCount).toBe(0);
    const closed = await task.forwardDecode(
      Promise.resolve(decodeStream(new ScriptedSource([token(1)]))),
      new Controller(),
    );
    const early = closed[Symbol.asyncIterator]();
    await early.next();
    await early.return?.();
    expect(outcome.listenerCount).toBe(0);
    prefill.resolve();
  });

  it('one prefill can guard several decode streams, and wakes each of them', async () => {
    const { prefill, task } = pendingPrefill();
    const sources = [new ScriptedSource([lengthItem()]), new ScriptedSource([lengthItem()])];
    const responses = await Promise.all(
      sources.map((source) => task.forwardDecode(Promise.resolve(decodeStream(source)), new Controller())),
    );
    const reads = responses.map((response) => collect(response));
    prefill.reject(failure());
    for (const items of await Promise.all(reads)) {
      expect(items).toHaveLength(1);
      expect(Annotated.isError(items[0])).toBe(true);
    }
  });
});
