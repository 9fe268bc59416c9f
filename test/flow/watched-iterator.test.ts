import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { WatchedIterator, type WatchHooks } from '../../src/flow/watched-iterator.js';
import { flush, type Item, isPending, ScriptedSource, token } from '../support/async.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

const idle100 = { ms: 100, phase: 'idle' } as const;

const errorItem = (error: DeadlineError): Promise<IteratorResult<Item, undefined>> =>
  Promise.resolve({ value: { event: 'error', error: error.message }, done: false });

function watch(source: ScriptedSource, hooks: Partial<WatchHooks<Item>> = {}) {
  return new WatchedIterator<Item>(source, {
    interruptible: false,
    deadline: (phase, ms) => new DeadlineError(phase, ms),
    expired: errorItem,
    ...hooks,
  });
}

describe('WatchedIterator', () => {
  it("without a budget or interruption, a read is the source's own promise", () => {
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source);
    expect(iterator.next()).toBe(source.answers[0]);
  });

  it('a read over budget answers with the expiry at the deadline, then everything is done', async () => {
    const source = new ScriptedSource();
    const iterator = watch(source, { budgets: { first: idle100, later: idle100 } });
    const read = iterator.next();
    await vi.advanceTimersByTimeAsync(99);
    expect(await isPending(read)).toBe(true);
    await vi.advanceTimersByTimeAsync(1);
    expect((await read).value).toMatchObject({ event: 'error', error: expect.stringContaining('(idle)') });
    expect(iterator.expired).toBe(true);
    expect(source.closed).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('an answer within budget clears the timer', async () => {
    const source = new ScriptedSource();
    const iterator = watch(source, { budgets: { first: idle100, later: idle100 } });
    const read = iterator.next();
    source.push(token(1));
    expect((await read).value).toEqual(token(1));
    expect(vi.getTimerCount()).toBe(0);
  });

  it('the first read gets the first budget, every later read the later one', async () => {
    const source = new ScriptedSource();
    const iterator = watch(source, {
      budgets: { first: { ms: 300, phase: 'decodeFirstToken' }, later: { ms: 100, phase: 'idle' } },
    });
    const first = iterator.next();
    await vi.advanceTimersByTimeAsync(299);
    source.push(token(1));
    expect((await first).value).toEqual(token(1));
    const second = iterator.next();
    await vi.advanceTimersByTimeAsync(100);
    expect((await second).value).toMatchObject({ event: 'error', error: expect.stringContaining('(idle)') });
  });

  it('a read with a budget, and a read queued behind it, are not handed through', () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const iterator = watch(source, { budgets: { first: { ms: 100, phase: 'decodeFirstToken' } } });
    expect(iterator.next()).not.toBe(source.answers[0]); // the first read has a budget
    expect(iterator.next()).not.toBe(source.answers[1]); // queued behind it
  });

  it('an expiry between reads is the answer of the next read', async () => {
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source, { interruptible: true });
    await iterator.next();
    iterator.expire(new DeadlineError('total', 5));
    expect((await iterator.next()).value).toMatchObject({ event: 'error' });
    expect((await iterator.next()).done).toBe(true);
  });

  it('an interruptible read is answered by expire even when the source would answer done on close', async () => {
    const source = new ScriptedSource();
    const iterator = watch(source, { interruptible: true, expired: (error) => Promise.reject(error) });
    const read = iterator.next();
    iterator.expire(new DeadlineError('handoff', 5));
    await expect(read).rejects.toMatchObject({ name: 'DeadlineError', phase: 'handoff' });
  });

  it('onExpired decides what becomes of the source', async () => {
    const source = new ScriptedSource();
    const seen: unknown[] = [];
    const iterator = watch(source, { interruptible: true, onExpired: (error, open) => seen.push(error, open) });
    const read = iterator.next();
    const error = new DeadlineError('decodeFirstToken', 5);
    iterator.expire(error);
    await read;
    expect(seen).toEqual([error, source]);
    expect(source.closed).toBe(false);
  });

  it('prefetch starts the next read now and hands it to the next next(), in order', async () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const iterator = watch(source);
    iterator.prefetch();
    iterator.prefetch(); // one at a time
    expect(source.nextCalls).toBe(1);
    expect((await iterator.next()).value).toEqual(token(1));
    expect((await iterator.next()).value).toEqual(token(2));
  });

  it('observe sees every step while observing is on; a thrown read is observed as undefined', async () => {
    const seen: Array<[unknown, number]> = [];
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    const iterator = watch(source, {
      observe: (step, read) => seen.push([step?.value, read]),
    });
    expect(iterator.observing).toBe(true);
    await iterator.next();
    iterator.observing = false;
    const unobserved = iterator.next();
    expect(unobserved).toBe(source.answers[1]); // the source's own promise
    await unobserved;
    iterator.observing = true;
    await iterator.next();
    source.fail(new Error('reset'));
    await expect(iterator.next()).rejects.toThrow('reset');
    expect(seen).toEqual([
      [token(1), 0],
      [token(3), 1],
      [undefined, 2],
    ]);
  });

  it('return() hands the source to onClose once, or closes it; later reads are done', async () => {
    const closed: unknown[] = [];
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source, { onClose: (open) => closed.push(open) });
    iterator.prefetch();
    expect(await iterator.return()).toEqual({ value: undefined, done: true });
    await iterator.return();
    expect(closed).toEqual([source]);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    const plain = new ScriptedSource();
    await watch(plain).return();
    await flush();
    expect(plain.closed).toBe(true);
  });

  it('throw() closes as return() does; a source whose next() throws fails the read, handed through or budgeted', async () => {
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source);
    expect(await iterator.throw()).toEqual({ value: undefined, done: true });
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    await flush();
    expect(source.closed).toBe(true);
    const broken = {
      next: () => {
        throw new Error('source broke');
      },
    } as unknown as AsyncIterator<Item>;
    const plain = new WatchedIterator<Item>(broken, {
      interruptible: false,
      deadline: (phase, ms) => new DeadlineError(phase, ms),
      expired: errorItem,
    });
    await expect(plain.next()).rejects.toThrow('source broke');
    const budgeted = new WatchedIterator<Item>(broken, {
      interruptible: true,
      deadline: (phase, ms) => new DeadlineError(phase, ms),
      expired: errorItem,
    });
    await expect(budgeted.next()).rejects.toThrow('source broke');
  });

  it('return() during a budgeted read clears its timer and never expires it', async () => {
    const source = new ScriptedSource();
    const iterator = watch(source, { budgets: { first: { ms: 50, phase: 'idle' } } });
    const read = iterator.next();
    await iterator.return();
    expect(vi.getTimerCount()).toBe(0);
    expect((await read).done).toBe(true); // the closed source answered it
    expect(iterator.expired).toBe(false);
  });

  describe('readers with several calls in flight', () => {
    /** The ids of the answers, and the order in which the calls were answered. */
    async function answers(calls: Promise<IteratorResult<Item>>[]) {
      const order: number[] = [];
      for (const [i, call] of calls.entries())
        call.then(
          () => order.push(i),
          () => order.push(i),
        );
      const steps = await Promise.all(calls);
      return { ids: steps.map((step) => (step.done === true ? 'done' : step.value.data?.token_ids[0])), order };
    }

    it('budgeted reads are answered in call order, one read of the source at a time', async () => {
      const source = new ScriptedSource();
      const iterator = watch(source, { budgets: { first: idle100, later: idle100 } });
      const calls = [iterator.next(), iterator.next(), iterator.next()];
      await flush();
      expect(source.nextCalls).toBe(1);
      source.push(token(1)).push(token(2)).push(token(3));
      expect(await answers(calls)).toEqual({ ids: [1, 2, 3], order: [0, 1, 2] });
    });

    it("each queued read's budget starts when its read does", async () => {
      const source = new ScriptedSource();
      const iterator = watch(source, { budgets: { first: idle100, later: idle100 } });
      const first = iterator.next();
      const second = iterator.next();
      await vi.advanceTimersByTimeAsync(90);
      source.push(token(1));
      expect((await first).value).toEqual(token(1));
      // The second read started at 90 ms: it has its whole budget from there.
      await vi.advanceTimersByTimeAsync(99);
      expect(await isPending(second)).toBe(true);
      await vi.advanceTimersByTimeAsync(1);
      expect((await second).value).toMatchObject({ event: 'error', error: expect.stringContaining('(idle)') });
    });

    it('an observed read followed by unobserved ones keeps call order', async () => {
      // The first reads are observed (a then more), later ones are the source's own promises.
      for (let depth = 0; depth <= 4; depth++) {
        const source = new ScriptedSource();
        const iterator: WatchedIterator<Item> = watch(source, {
          observe: () => {
            iterator.observing = false;
          },
        });
        const calls = [iterator.next(), iterator.next()];
        source.push(token(1));
        for (let i = 0; i < depth; i++) await Promise.resolve();
        calls.push(iterator.next());
        source.push(token(2)).push(token(3));
        expect({ depth, ...(await answers(calls)) }).toEqual({ depth, ids: [1, 2, 3], order: [0, 1, 2] });
      }
    });

    it('an expiry answers the pending read, and the calls queued behind it done, in order', async () => {
      const source = new ScriptedSource();
      const iterator = watch(source, { budgets: { first: idle100, later: idle100 } });
      const calls = [iterator.next(), iterator.next(), iterator.next()];
      await vi.advanceTimersByTimeAsync(100);
      const settled = await Promise.all(calls);
      expect(settled[0]?.value).toMatchObject({ event: 'error' });
      expect(settled.slice(1)).toEqual([
        { value: undefined, done: true },
        { value: undefined, done: true },
      ]);
      expect(source.nextCalls).toBe(1);
    });

    it('return() answers a pending interruptible read done at once, even from a stuck source; later calls too', async () => {
      const source = new ScriptedSource();
      source.return = () => new Promise(() => {}); // stuck: never answers, never closes
      const iterator = watch(source, { interruptible: true });
      const calls = [iterator.next(), iterator.next()];
      await iterator.return();
      expect(await answers(calls)).toEqual({ ids: ['done', 'done'], order: [0, 1] });
      // A call after return() is done at once, never queued behind a read that may be stuck.
      const after = iterator.next();
      expect(await isPending(after)).toBe(false);
      expect(await after).toEqual({ value: undefined, done: true });
    });
  });
});

describe('WatchedIterator: what it observes and counts', () => {
  it('observing off from the start: no read is observed, not even the first', async () => {
    const seen: unknown[] = [];
    const source = new ScriptedSource([token(1), token(2)]);
    const iterator = watch(source, { observe: (step) => seen.push(step?.value), observing: false });
    expect(iterator.observing).toBe(false);
    await iterator.next();
    await iterator.next();
    expect(seen).toEqual([]);
  });

  it('without an observe hook, turning observing on changes nothing: reads are the source\u2019s own', () => {
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source);
    iterator.observing = true;
    expect(iterator.observing).toBe(false);
    expect(iterator.next()).toBe(source.answers[0]);
  });

  it('a prefetched read is observed though observing is off; the reads after it are not', async () => {
    const seen: unknown[] = [];
    const source = new ScriptedSource([token(1), token(2)]);
    const iterator = watch(source, { observe: (step) => seen.push(step?.value), observing: false });
    iterator.prefetch();
    expect((await iterator.next()).value).toEqual(token(1));
    expect((await iterator.next()).value).toEqual(token(2));
    expect(seen).toEqual([token(1)]);
  });

  it('observed read indexes go on after a failed read', async () => {
    const seen: Array<[unknown, number]> = [];
    const source = new ScriptedSource().fail(new Error('reset'));
    const iterator = watch(source, { observe: (step, read) => seen.push([step?.done, read]) });
    await expect(iterator.next()).rejects.toThrow('reset');
    await iterator.next();
    expect(seen).toEqual([
      [undefined, 0],
      [true, 1],
    ]);
  });

  it('reads counts every read started, handed through or budgeted', async () => {
    const through = watch(new ScriptedSource([token(1), token(2)]));
    await through.next();
    await through.next();
    expect(through.reads).toBe(2);
    const budgeted = watch(new ScriptedSource([token(1), token(2)]), { budgets: { first: idle100, later: idle100 } });
    await budgeted.next();
    await budgeted.next();
    expect(budgeted.reads).toBe(2);
  });

  it('a budget for later reads only: the first is handed through, a later one over budget expires', async () => {
    const source = new ScriptedSource([token(1)]);
    const iterator = watch(source, { budgets: { later: idle100 } });
    expect(iterator.next()).toBe(source.answers[0]);
    const second = iterator.next();
    await vi.advanceTimersByTimeAsync(100);
    expect((await second).value).toMatchObject({ event: 'error' });
  });

  it('a budgeted first read with observing off: the read queued behind it is not observed either', async () => {
    const seen: unknown[] = [];
    const source = new ScriptedSource([token(1), token(2)]);
    const iterator = watch(source, {
      observe: (step) => seen.push(step?.value),
      observing: false,
      budgets: { first: idle100 },
    });
    const [first, second] = [iterator.next(), iterator.next()];
    expect([(await first).value, (await second).value]).toEqual([token(1), token(2)]);
    expect(seen).toEqual([]);
  });

  it('after an expiry nothing reads the source again: not a next(), not a prefetch; a second expiry does nothing', async () => {
    const source = new ScriptedSource([token(1), token(2)]);
    const expired: unknown[] = [];
    const iterator = watch(source, { onExpired: (error) => expired.push(error) }); // the source stays open
    await iterator.next();
    const error = new DeadlineError('total', 5, 'decode');
    iterator.expire(error);
    iterator.expire(new DeadlineError('handoff', 5, 'decode'));
    expect(expired).toEqual([error]);
    iterator.prefetch();
    expect((await iterator.next()).value).toMatchObject({ event: 'error' });
    expect((await iterator.next()).done).toBe(true);
    expect(source.nextCalls).toBe(1);
  });
});
