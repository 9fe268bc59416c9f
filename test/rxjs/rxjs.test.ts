import { filter, firstValueFrom, map, Observable, of, Subject, take, throwError, toArray } from 'rxjs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { vllmNixl } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { flowEvents, fromObservable, toObservable } from '../../src/rxjs/index.js';
import { collect, flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { client, decodeTokens, prefillWithParams, runFlow } from '../support/flow.js';

const logger = recordingLogger().logger;

describe('toObservable', () => {
  it('emits every item in order, then completes', async () => {
    const source = new ScriptedSource([token(1), token(2)]).end();
    const items = await firstValueFrom(toObservable(source).pipe(toArray()));
    expect(items).toEqual([token(1), token(2)]);
  });

  it('errors with what the iterator threw, after the items before it', async () => {
    const failure = new Error('decode lost');
    const seen: unknown[] = [];
    const error = await new Promise((resolve) => {
      toObservable(new ScriptedSource([token(1)]).fail(failure)).subscribe({
        next: (i) => seen.push(i),
        error: resolve,
      });
    });
    expect(seen).toEqual([token(1)]);
    expect(error).toBe(failure);
  });

  it('unsubscribing closes a stuck stream at once, without waiting for it', async () => {
    const stuck = new ScriptedSource();
    const subscription = toObservable(stuck).subscribe();
    await flush();
    subscription.unsubscribe();
    expect(stuck.returnCalls).toBe(1);
  });

  it('take(n) closes the stream after n items', async () => {
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    expect(await firstValueFrom(toObservable(source).pipe(take(2), toArray()))).toEqual([token(1), token(2)]);
    expect(source.closed).toBe(true);
  });

  it('refuses what is not async iterable', () => {
    expect(() => toObservable([1, 2] as never)).toThrow('toObservable expects an AsyncIterable');
  });

  it('carries a whole disaggregated request', async () => {
    const stream = await disaggregate({
      request: client,
      context: new Controller(),
      prefill: prefillWithParams().run,
      decode: decodeTokens().run,
      connector: vllmNixl,
      logger,
    });
    const ids = await firstValueFrom(
      toObservable(stream).pipe(
        map((item) => item.data?.token_ids),
        toArray(),
      ),
    );
    expect(ids).toEqual([[1], [2], []]);
  });
});

describe('fromObservable', () => {
  it('a ResponseStream on the given context, with the values in order and the end at completion', async () => {
    const context = new Controller();
    const stream = fromObservable(of(1, 2, 3), context);
    expect(stream).toBeInstanceOf(ResponseStream);
    expect(stream.context).toBe(context);
    expect(await collect(stream)).toEqual([1, 2, 3]);
  });

  it('queues values pushed before they are read, and throws an error after them', async () => {
    const subject = new Subject<number>();
    const iterator = fromObservable(subject, new Controller())[Symbol.asyncIterator]();
    subject.next(1);
    subject.next(2);
    const failure = new Error('engine crashed');
    subject.error(failure);
    expect(await iterator.next()).toEqual({ value: 1, done: false });
    expect(await iterator.next()).toEqual({ value: 2, done: false });
    await expect(iterator.next()).rejects.toBe(failure);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    await expect(
      collect(
        fromObservable(
          throwError(() => failure),
          new Controller(),
        ),
      ),
    ).rejects.toBe(failure);
  });

  it('several reads in flight take the values in call order; at completion or an error the rest are done', async () => {
    const subject = new Subject<number>();
    const iterator = fromObservable(subject, new Controller())[Symbol.asyncIterator]();
    const order: number[] = [];
    const calls = Array.from({ length: 5 }, (_, i) => {
      const call = iterator.next();
      call.then(
        () => order.push(i),
        () => order.push(i),
      );
      return call;
    });
    subject.next(1);
    subject.next(2);
    subject.next(3);
    subject.complete();
    expect(await Promise.all(calls)).toEqual([
      { value: 1, done: false },
      { value: 2, done: false },
      { value: 3, done: false },
      { value: undefined, done: true },
      { value: undefined, done: true },
    ]);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    const failing = new Subject<number>();
    const failed = fromObservable(failing, new Controller())[Symbol.asyncIterator]();
    const reads = [failed.next(), failed.next()];
    const failure = new Error('engine lost');
    failing.error(failure);
    await expect(reads[0]).rejects.toBe(failure);
    expect(await reads[1]).toEqual({ value: undefined, done: true });
  });

  it('closing the stream ends every read still waiting', async () => {
    const iterator = fromObservable(new Subject<number>(), new Controller())[Symbol.asyncIterator]();
    const waiting = [iterator.next(), iterator.next()];
    await iterator.return?.();
    expect(await Promise.all(waiting)).toEqual([
      { value: undefined, done: true },
      { value: undefined, done: true },
    ]);
  });

  it('closing the stream unsubscribes, and a waiting read ends', async () => {
    let unsubscribed = 0;
    const never = new Observable<number>(() => () => {
      unsubscribed++;
    });
    const iterator = fromObservable(never, new Controller())[Symbol.asyncIterator]();
    const waiting = iterator.next();
    await iterator.return?.();
    expect(await waiting).toEqual({ value: undefined, done: true });
    expect(unsubscribed).toBe(1);
  });

  it('a stop of the context unsubscribes; the stream ends after what was queued', async () => {
    let unsubscribed = 0;
    const subject = new Subject<number>();
    const tracked = new Observable<number>((subscriber) => {
      const inner = subject.subscribe(subscriber);
      return () => {
        unsubscribed++;
        inner.unsubscribe();
      };
    });
    const context = new Controller();
    const iterator = fromObservable(tracked, context)[Symbol.asyncIterator]();
    subject.next(7);
    context.stopGenerating();
    await flush();
    expect(unsubscribed).toBe(1);
    expect(await iterator.next()).toEqual({ value: 7, done: false });
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('refuses what is not an Observable, or a missing context', () => {
    expect(() => fromObservable([1] as never, new Controller())).toThrow('fromObservable expects an Observable');
    expect(() => fromObservable(of(1), {} as never)).toThrow('AsyncEngineContext');
  });
});

describe('flowEvents', () => {
  it("replays a request's events to a late subscriber and completes after settled", async () => {
    const { onEvent, events } = flowEvents();
    await collect(await runFlow({ onEvent }));
    await flush();
    const types = await firstValueFrom(
      events.pipe(
        map((event) => event.type),
        toArray(),
      ),
    );
    expect(types[0]).toBe('routed');
    expect(types.at(-1)).toBe('settled');
    const finished = await firstValueFrom(events.pipe(filter((event) => event.type === 'finished')));
    expect(finished).toMatchObject({ outcome: 'success' });
  });

  it('is typed by the workers of the pools: routed and finished name them as the pools hold them', async () => {
    type Worker = { url: string; zone: string };
    const { onEvent, events } = flowEvents<Worker, Worker>();
    const workers = new WorkerPool<Worker>([{ url: 'http://p0', zone: 'a' }]);
    const decodeWorkers = new WorkerPool<Worker>([{ url: 'http://d0', zone: 'b' }]);
    await collect(await runFlow<Worker, Worker>({ prefillWorkers: workers, decodeWorkers, onEvent }));
    await flush();
    const routed = await firstValueFrom(events.pipe(filter((event) => event.type === 'routed')));
    // No cast: the zone of the worker is there to read.
    const zone: string | undefined = routed.prefillWorker?.zone;
    expect(zone).toBe('a');
    expectTypeOf(routed.prefillWorker).toEqualTypeOf<Worker | undefined>();
  });
});
