// The contract of the guard's hooks (GuardHooks), which the flow's decode leg and client
// stream ride on instead of adding promises of their own per item. The flow tests see their
// effect through the whole request; these pin each hook down at the guard itself, in each of
// its three modes: racing (prefill pending), forwarding before the hand-off (prefill has
// just succeeded), and handed off (reads go straight to decode).
import { describe, expect, it } from 'vitest';
import type { FlowGuardHooks } from '../../src/handoff/prefill-task.js';
import { forwardDecodeWith, PrefillTask } from '../../src/handoff/prefill-task.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
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

type Step = IteratorResult<EngineItem, undefined> | undefined;

/** What a step says, for comparing: a token id, 'finish', 'error item', 'end' or 'failed read'. */
function describeStep(step: Step): string | number {
  if (step === undefined) return 'failed read';
  if (step.done === true) return 'end';
  return describeItem(step.value);
}

function describeItem(item: EngineItem): string | number {
  if (Annotated.isError(item)) return 'error item';
  if (item.data?.finish_reason !== undefined && item.data.finish_reason !== null) return 'finish';
  return item.data?.token_ids?.[0] ?? 'empty';
}

function pendingPrefill() {
  const prefill = deferred();
  const task = PrefillTask.spawn(prefill.promise, { logger: recordingLogger().logger });
  return { prefill, task };
}

async function guarded(task: PrefillTask, source: ScriptedSource, hooks: FlowGuardHooks) {
  const context = new Controller();
  const stream = await forwardDecodeWith(task, () => Promise.resolve(decodeStream(source)), context, hooks);
  return { iterator: stream[Symbol.asyncIterator](), context };
}

const ids = (items: EngineItem[]) => items.map(describeItem);

describe('observe: what the flow learns about decode while prefill is pending', () => {
  it('sees every read until it answers false, then only what is not a plain item', async () => {
    const { prefill, task } = pendingPrefill();
    const seen: Array<string | number> = [];
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    const { iterator } = await guarded(task, source, {
      observe(step) {
        seen.push(describeStep(step));
        return seen.length < 2; // wants every read up to the second one
      },
    });
    expect((await iterator.next()).value).toEqual(token(1));
    expect((await iterator.next()).value).toEqual(token(2));
    expect((await iterator.next()).value).toEqual(token(3));
    source.push(lengthItem());
    const held = iterator.next();
    expect(await isPending(held)).toBe(true);
    prefill.resolve();
    expect(describeItem((await held).value as EngineItem)).toBe('finish');
    // Token 3 went by unseen: after the false only the terminal was worth a look.
    expect(seen).toEqual([1, 2, 'finish']);
  });

  it('sees a failed read as undefined, whether it wants every read or not', async () => {
    for (const wantsEvery of [true, false]) {
      const { task } = pendingPrefill();
      const seen: Array<string | number> = [];
      const source = new ScriptedSource([token(1)]).fail(new Error('decode socket reset'));
      const { iterator } = await guarded(task, source, {
        observe(step) {
          seen.push(describeStep(step));
          return wantsEvery;
        },
      });
      expect((await iterator.next()).value).toEqual(token(1));
      await expect(iterator.next()).rejects.toThrow('decode socket reset');
      expect(seen).toEqual([1, 'failed read']);
    }
  });

  it('sees the read that was in flight when prefill won the race, once it answers', async () => {
    const { prefill, task } = pendingPrefill();
    const seen: Array<string | number> = [];
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, {
      observe(step) {
        seen.push(describeStep(step));
        return true;
      },
    });
    const first = iterator.next();
    await flush();
    prefill.resolve();
    await flush();
    expect(seen).toEqual([]);
    source.push(token(7));
    expect((await first).value).toEqual(token(7));
    expect(seen).toEqual([7]);
  });
});

describe('answer: what the consumer gets for an item', () => {
  const plus100 = (item: EngineItem): EngineItem =>
    Annotated.isError(item) || item.data?.token_ids === undefined
      ? item
      : Annotated.fromData({ ...item.data, token_ids: [(item.data.token_ids[0] ?? 0) + 100] });

  it('replaces every item in every mode: racing, forwarding, handed off', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const { iterator } = await guarded(task, source, { answer: plus100 });
    expect((await iterator.next()).value).toEqual(token(101)); // racing
    prefill.resolve();
    source.push(token(2)).push(token(3)).end();
    expect((await iterator.next()).value).toEqual(token(102)); // forwarding
    expect((await iterator.next()).value).toEqual(token(103)); // handed off
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('are not used, and the stream is not guarded, when prefill had already succeeded', async () => {
    const task = PrefillTask.spawn(Promise.resolve(), { logger: recordingLogger().logger });
    await task.wait();
    const source = new ScriptedSource([token(1), lengthItem()]).end();
    const hooks: FlowGuardHooks = { answer: plus100 };
    const { iterator } = await guarded(task, source, hooks);
    expect(hooks.guarded).toBeUndefined();
    expect(ids(await collect({ [Symbol.asyncIterator]: () => iterator }))).toEqual([1, 'finish']);
  });

  /** Each way into an item of the guard, and the item the hook turns into the end. */
  const ends = [
    { mode: 'a racing token', script: (s: ScriptedSource) => s.push(token(1)), before: 'pending' },
    {
      mode: 'a failure from decode',
      script: (s: ScriptedSource) => s.push(Annotated.fromError(new Error('x'))),
      before: 'pending',
    },
    { mode: 'a held terminal', script: (s: ScriptedSource) => s.push(lengthItem()), before: 'pending' },
    { mode: 'the prefill failure', script: (s: ScriptedSource) => s, before: 'failed' },
    { mode: 'a forwarded token', script: (s: ScriptedSource) => s.push(token(1)), before: 'succeeded-late' },
  ] as const;
  it.each(ends)('an answer of undefined for $mode ends the stream there', async ({ script, before }) => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    const answered: Array<string | number> = [];
    const { iterator } = await guarded(task, source, {
      answer(item) {
        answered.push(describeItem(item));
        return undefined;
      },
    });
    const next = iterator.next();
    await flush();
    if (before === 'failed') prefill.reject(new Error('prefill lost'));
    if (before === 'succeeded-late') prefill.resolve();
    await flush();
    script(source);
    await flush();
    if (before === 'pending') prefill.resolve();
    expect(await next).toEqual({ value: undefined, done: true });
    expect(answered).toHaveLength(1);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    expect(source.closed || source.finished).toBe(true);
  });

  it('an answer of undefined for a handed-off token ends the stream there', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const hooks: FlowGuardHooks = { answer: (item) => (describeItem(item) === 3 ? undefined : item) };
    const { iterator } = await guarded(task, source, hooks);
    expect(hooks.guarded).toBe(true);
    expect((await iterator.next()).value).toEqual(token(1)); // racing
    prefill.resolve();
    source.push(token(2)).push(token(3)).push(token(4));
    expect((await iterator.next()).value).toEqual(token(2)); // forwarding
    expect(await iterator.next()).toEqual({ value: undefined, done: true }); // handed off
  });
});

/** Reads one token racing and one forwarded, so that the next read is handed off to decode. */
async function handOff(iterator: AsyncIterator<EngineItem>, source: ScriptedSource, prefill: { resolve(): void }) {
  source.push(token(1));
  expect((await iterator.next()).value).toEqual(token(1));
  prefill.resolve();
  source.push(token(2));
  expect((await iterator.next()).value).toEqual(token(2));
}

describe('end: the stream ends by itself', () => {
  it.each([
    ['while prefill is pending (the end is held for it)', 'pending'],
    ['after prefill succeeded, before the hand-off', 'late'],
    ['handed off to decode', 'early'],
  ] as const)('is called once when decode ends %s', async (_, when) => {
    const { prefill, task } = pendingPrefill();
    let ends = 0;
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, { end: () => ends++ });
    if (when === 'early') await handOff(iterator, source, prefill);
    else {
      source.push(token(1));
      expect((await iterator.next()).value).toEqual(token(1));
    }
    if (when === 'late') prefill.resolve();
    source.end();
    const last = iterator.next();
    await flush();
    if (when === 'pending') {
      expect(await isPending(last)).toBe(true);
      prefill.resolve();
    }
    expect(await last).toEqual({ value: undefined, done: true });
    expect(ends).toBe(1);
  });

  it('is not called when the consumer closes the stream', async () => {
    for (const settled of [false, true]) {
      const { prefill, task } = pendingPrefill();
      if (settled) prefill.resolve();
      await flush();
      let ends = 0;
      const source = new ScriptedSource([token(1)]);
      const { iterator } = await guarded(task, source, { end: () => ends++ });
      await iterator.next();
      await iterator.return?.();
      expect(await iterator.next()).toEqual({ value: undefined, done: true });
      expect(ends).toBe(0);
      expect(source.closed).toBe(true);
    }
  });
});

describe('fail: what the consumer gets thrown when decode breaks', () => {
  it.each([
    ['after prefill succeeded, before the hand-off', false],
    ['handed off to decode', true],
  ])('replaces the error %s', async (_, early) => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, {
      fail: (error) => new Error(`wrapped: ${(error as Error).message}`),
    });
    if (early) await handOff(iterator, source, prefill);
    else {
      source.push(token(1));
      expect((await iterator.next()).value).toEqual(token(1));
      prefill.resolve();
    }
    source.fail(new Error('decode reset'));
    await expect(iterator.next()).rejects.toThrow('wrapped: decode reset');
  });
});

describe('nothing after the end, even from a decode iterator that does not stop', () => {
  /** A decode iterator that ignores return() and keeps answering items after its finish. */
  function unstoppable(first: Item[]): AsyncIterator<Item> {
    let i = 0;
    return {
      next: async () => ({ value: first[i++] ?? token(99), done: false }),
      return: async () => ({ value: undefined, done: true }),
    };
  }

  it('after a held terminal, every later call is done', async () => {
    const { prefill, task } = pendingPrefill();
    const context = new Controller();
    const source = unstoppable([token(1), lengthItem()]);
    const stream = await forwardDecodeWith(task, () => Promise.resolve(decodeStreamOf(source)), context, {});
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const held = iterator.next();
    await flush();
    prefill.resolve();
    expect(describeItem((await held).value as EngineItem)).toBe('finish');
    // Several calls, each after the last answered: none may reach decode again.
    for (let i = 0; i < 3; i++) expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });
});

function decodeStreamOf(iterator: AsyncIterator<Item>) {
  return new ResponseStream<Item>({ [Symbol.asyncIterator]: () => iterator }, new Controller('decode'));
}

describe('every hook is optional', () => {
  const subsets: Array<[string, FlowGuardHooks]> = [
    ['none', {}],
    ['observe wanting every read', { observe: () => true }],
    ['observe wanting none', { observe: () => false }],
    ['answer passing items on', { answer: (item) => item }],
    ['end', { end: () => {} }],
    ['fail passing errors on', { fail: (error) => error }],
  ];

  /** Racing reads, a held terminal released by prefill, then the end. */
  async function racing(hooks: FlowGuardHooks) {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1), token(2)]);
    const { iterator } = await guarded(task, source, hooks);
    const seen = [describeStep(await iterator.next()), describeStep(await iterator.next())];
    source.push(lengthItem()).end();
    const held = iterator.next();
    await flush();
    prefill.resolve();
    seen.push(describeStep(await held), describeStep(await iterator.next()));
    return seen;
  }

  /** Tokens read racing, forwarded and handed off, then decode's end by itself. */
  async function handedOff(hooks: FlowGuardHooks) {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, hooks);
    await handOff(iterator, source, prefill);
    source.push(token(3)).push(lengthItem()).end();
    return [
      describeStep(await iterator.next()),
      describeStep(await iterator.next()),
      describeStep(await iterator.next()),
    ];
  }

  /** A read of decode that fails, racing or handed off: what the consumer is thrown. */
  async function failing(hooks: FlowGuardHooks, when: 'racing' | 'handed off') {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, hooks);
    if (when === 'handed off') await handOff(iterator, source, prefill);
    source.fail(new Error('decode broke'));
    return iterator.next().then(describeStep, (error: Error) => `thrown: ${error.message}`);
  }

  it.each(subsets)('with %s, racing reads and a held terminal are what they are without hooks', async (_, hooks) => {
    expect(await racing(hooks)).toEqual(await racing({}));
    expect(await racing({})).toEqual([1, 2, 'finish', 'end']);
  });

  /** Decode's end while prefill is pending (held for it), or while a read was forwarded. */
  async function endsBy(hooks: FlowGuardHooks, when: 'held' | 'forwarded') {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const { iterator } = await guarded(task, source, hooks);
    const seen = [describeStep(await iterator.next())];
    if (when === 'forwarded') prefill.resolve();
    source.end();
    const last = iterator.next();
    await flush();
    if (when === 'held') prefill.resolve();
    seen.push(describeStep(await last), describeStep(await iterator.next()));
    return seen;
  }

  it.each(subsets)('with %s, handed-off reads and the end are what they are without hooks', async (_, hooks) => {
    expect(await handedOff(hooks)).toEqual([3, 'finish', 'end']);
    for (const when of ['held', 'forwarded'] as const) expect(await endsBy(hooks, when)).toEqual([1, 'end', 'end']);
  });

  it('a handed-off read is answered with what answer makes of it: another item, or the end', async () => {
    /** Token 1 racing, 2 forwarded, then 3 and what follows handed off, through `answer`. */
    async function run(answer: (item: EngineItem) => EngineItem | undefined) {
      const { prefill, task } = pendingPrefill();
      const source = new ScriptedSource([token(1)]);
      const { iterator } = await guarded(task, source, { answer });
      const seen = [describeStep(await iterator.next())];
      prefill.resolve();
      source.push(token(2));
      seen.push(describeStep(await iterator.next()));
      source.push(token(3)).push(lengthItem()).end();
      for (let i = 0; i < 3; i++) {
        const step = await iterator.next();
        // The finish item's own token ids too: an answer may change any item.
        seen.push(
          step.done !== true && step.value.data?.finish_reason
            ? `finish ${step.value.data.token_ids}`
            : describeStep(step),
        );
      }
      return seen;
    }
    const plus100 = (item: EngineItem): EngineItem =>
      item.data?.token_ids === undefined
        ? item
        : Annotated.fromData({ ...item.data, token_ids: [(item.data.token_ids[0] ?? 0) + 100] });
    expect(await run(plus100)).toEqual([101, 102, 103, 'finish 100', 'end']);
    expect(await run((item) => (describeItem(item) === 3 ? undefined : item))).toEqual([1, 2, 'end', 'end', 'end']);
    expect(await run((item) => (describeItem(item) === 'finish' ? undefined : item))).toEqual([1, 2, 3, 'end', 'end']);
  });

  it.each(subsets)('with %s, a failed read of decode is what it is without hooks', async (_, hooks) => {
    for (const when of ['racing', 'handed off'] as const) {
      expect(await failing(hooks, when)).toEqual(await failing({}, when));
    }
  });
});

describe('observe after the end', () => {
  it.each([
    ['answers', 'answer'],
    ['fails', 'fail'],
  ] as const)(
    'a read in flight when the consumer closed is still observed when it %s, and nothing is thrown',
    async (_, how) => {
      const { task } = pendingPrefill();
      const seen: Array<string | number> = [];
      // A decode whose read in flight outlives return() (a stuck engine answers when it will).
      const read = deferred<IteratorResult<EngineItem>>();
      const stuck: AsyncIterator<EngineItem> = {
        next: () => read.promise,
        return: () => Promise.resolve({ value: undefined, done: true }),
      };
      const context = new Controller();
      const stream = await forwardDecodeWith(
        task,
        () => Promise.resolve(new ResponseStream({ [Symbol.asyncIterator]: () => stuck }, context)),
        context,
        {
          observe(step) {
            seen.push(describeStep(step));
            return true;
          },
        },
      );
      const iterator = stream[Symbol.asyncIterator]();
      const pending = iterator.next();
      await flush();
      expect(await iterator.return?.()).toEqual({ value: undefined, done: true });
      expect(await pending).toEqual({ value: undefined, done: true });
      if (how === 'answer') read.resolve({ value: token(1), done: false });
      else read.reject(new Error('late'));
      await flush();
      expect(seen).toEqual([how === 'answer' ? 1 : 'failed read']);
    },
  );
});

describe('what a hook or decode calls back in while the guard answers waits for that answer', () => {
  /** Decode whose `return()` runs `onReturn` first (as a flow closing its client stream does). */
  function closingSource(items: Item[], onReturn: () => void): ScriptedSource {
    const source = new ScriptedSource(items);
    const close = source.return.bind(source);
    source.return = () => {
      onReturn();
      return close();
    };
    return source;
  }

  it("decode's return() closing the stream as a held terminal is released: the terminal arrives first, then done", async () => {
    const { prefill, task } = pendingPrefill();
    let closed: Promise<IteratorResult<EngineItem>> | undefined;
    const source = closingSource([token(1), lengthItem()], () => {
      closed = iterator.return?.();
    });
    const { iterator } = await guarded(task, source, {});
    expect(describeStep(await iterator.next())).toBe(1);
    const held = iterator.next();
    await flush();
    prefill.resolve();
    expect(describeStep(await held)).toBe('finish');
    expect(await closed).toEqual({ value: undefined, done: true });
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it("a throw() from decode's return() as a decode failure is answered: the failure arrives, then the throw", async () => {
    const { task } = pendingPrefill();
    const consumerError = new Error('client went away');
    let thrown: Promise<unknown> | undefined;
    const failure = Annotated.fromError<EngineItem['data']>('decode OOM') as EngineItem;
    const source = closingSource([failure], () => {
      thrown = iterator.throw?.(consumerError).catch((error: unknown) => error);
    });
    const { iterator } = await guarded(task, source, {});
    expect(describeStep(await iterator.next())).toBe('error item');
    expect(await thrown).toBe(consumerError);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('a next() made by the answer hook is answered after the item being answered, with the next one', async () => {
    const { task } = pendingPrefill();
    const source = new ScriptedSource([token(1), token(2)]);
    let inner: Promise<IteratorResult<EngineItem>> | undefined;
    const order: string[] = [];
    const { iterator } = await guarded(task, source, {
      answer: (item) => {
        inner ??= iterator.next();
        return item;
      },
    });
    const outer = iterator.next().then((step) => {
      order.push(`outer ${describeStep(step)}`);
    });
    await flush();
    await (inner as Promise<IteratorResult<EngineItem>>).then((step) => {
      order.push(`inner ${describeStep(step)}`);
    });
    await outer;
    expect(order).toEqual(['outer 1', 'inner 2']);
  });
});

describe('a hook that throws', () => {
  it.each([
    ['answer', 'racing'],
    ['answer', 'forwarding'],
    ['observe', 'racing'],
  ] as const)(
    '(%s, %s) fails the call it was answering with its error, closes decode, and every later call is done',
    async (hook, mode) => {
      const { prefill, task } = pendingPrefill();
      const broken = new Error(`${hook} hook broke`);
      const source = new ScriptedSource([token(1)]);
      const throwOn2 = (value: EngineItem | undefined) => {
        if (value !== undefined && describeItem(value) === 2) throw broken;
      };
      const hooks: FlowGuardHooks =
        hook === 'answer'
          ? {
              answer: (item) => {
                throwOn2(item);
                return item;
              },
            }
          : {
              observe: (step) => {
                throwOn2(step?.done === false ? step.value : undefined);
                return true;
              },
            };
      const { iterator } = await guarded(task, source, hooks);
      expect(describeStep(await iterator.next())).toBe(1);
      if (mode === 'forwarding') prefill.resolve();
      await flush();
      const second = iterator.next();
      source.push(token(2));
      await expect(second).rejects.toBe(broken);
      expect(source.closed).toBe(true);
      expect(await iterator.next()).toEqual({ value: undefined, done: true });
    },
  );
});

describe('a hook that throws, wherever the guard calls one', () => {
  const broken = new Error('hook broke');
  const throwing = () => {
    throw broken;
  };

  it('answer, on the item held for prefill as prefill succeeds: that call fails, decode is closed', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([lengthItem()]);
    const { iterator } = await guarded(task, source, { answer: throwing });
    const held = iterator.next();
    await flush();
    prefill.resolve();
    await expect(held).rejects.toBe(broken);
    expect(source.closed).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('answer, on the error item of a prefill that fails while a read waits: that call fails', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, { answer: throwing });
    const waiting = iterator.next();
    await flush();
    prefill.reject(new Error('prefill lost'));
    await expect(waiting).rejects.toBe(broken);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it('answer, on the error item of a prefill that had failed before the call: that call fails', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1)]);
    const { iterator } = await guarded(task, source, {
      answer: (item) => (describeItem(item) === 1 ? item : throwing()),
    });
    expect(describeStep(await iterator.next())).toBe(1);
    prefill.reject(new Error('prefill lost'));
    await flush();
    await expect(iterator.next()).rejects.toBe(broken);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it.each([
    ['fail', 'a decode throw', (source: ScriptedSource) => source.fail(new Error('socket reset'))],
    ['end', 'decode ending', (source: ScriptedSource) => source.end()],
  ] as const)(
    '%s, on %s after prefill succeeded: the call fails with what the hook threw, later calls are done',
    async (hook, _, decodeDoes) => {
      const { prefill, task } = pendingPrefill();
      const source = new ScriptedSource([token(1)]);
      const { iterator } = await guarded(task, source, { [hook]: throwing });
      expect(describeStep(await iterator.next())).toBe(1);
      prefill.resolve();
      await flush();
      const next = iterator.next();
      decodeDoes(source);
      await expect(next).rejects.toBe(broken);
      expect(await iterator.next()).toEqual({ value: undefined, done: true });
    },
  );

  it('answer, for a call queued behind another: the first gets its item, the queued one fails', async () => {
    const { task } = pendingPrefill();
    const source = new ScriptedSource();
    const { iterator } = await guarded(task, source, {
      answer: (item) => (describeItem(item) === 1 ? item : throwing()),
    });
    const [first, second] = [iterator.next(), iterator.next()];
    await flush();
    source.push(token(1)).push(token(2));
    expect(describeStep(await first)).toBe(1);
    await expect(second).rejects.toBe(broken);
    expect(source.closed).toBe(true);
  });
});

describe('the guard as an iterator: what it hands through and how it closes', () => {
  /** A decode whose one read stays in flight until `read` settles, past a return(). */
  function stuckSource() {
    const read = deferred<IteratorResult<EngineItem>>();
    let returns = 0;
    const iterator: AsyncIterator<EngineItem> = {
      next: () => read.promise,
      return: () => {
        returns += 1;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
    return { read, iterator, returns: () => returns };
  }

  async function guardedOver(task: PrefillTask, iterator: AsyncIterator<EngineItem>, hooks: FlowGuardHooks) {
    const context = new Controller();
    const stream = await forwardDecodeWith(
      task,
      () => Promise.resolve(new ResponseStream({ [Symbol.asyncIterator]: () => iterator }, context)),
      context,
      hooks,
    );
    return stream[Symbol.asyncIterator]();
  }

  it('return(value) answers that value, as a generator does', async () => {
    const { task } = pendingPrefill();
    const { iterator } = await guarded(task, new ScriptedSource([token(1)]), {});
    await iterator.next();
    expect(await iterator.return?.('bye')).toEqual({ value: 'bye', done: true });
  });

  it("a return() and a throw() from decode's return() in one transition are both answered, in order", async () => {
    const { task } = pendingPrefill();
    const order: string[] = [];
    const failure = Annotated.fromError<EngineItem['data']>('decode OOM') as EngineItem;
    const source = new ScriptedSource([failure]);
    const close = source.return.bind(source);
    source.return = () => {
      void iterator.return?.().then(() => order.push('return'));
      void iterator.throw?.(new Error('gone')).catch(() => order.push('throw'));
      return close();
    };
    const { iterator } = await guarded(task, source, {});
    expect(describeStep(await iterator.next())).toBe('error item');
    await flush();
    expect(order).toEqual(['return', 'throw']);
  });

  it('a read made after prefill succeeded is not observed, even by a hook that wants every read', async () => {
    const { prefill, task } = pendingPrefill();
    const seen: Step[] = [];
    const source = new ScriptedSource([token(1), token(2)]);
    const { iterator } = await guarded(task, source, {
      observe: (step) => {
        seen.push(step);
        return true;
      },
    });
    expect(describeStep(await iterator.next())).toBe(1);
    prefill.resolve();
    await flush();
    expect(describeStep(await iterator.next())).toBe(2);
    expect(seen.map(describeStep)).toEqual([1]);
  });

  it('a read that answers after the consumer closed is observed once and never answered; a throwing observer is contained', async () => {
    for (const throws of [false, true]) {
      const { task } = pendingPrefill();
      const { read, iterator: stuck } = stuckSource();
      const seen: Step[] = [];
      const answered: EngineItem[] = [];
      const iterator = await guardedOver(task, stuck, {
        observe: (step) => {
          seen.push(step);
          if (throws) throw new Error('observer broke');
          return true;
        },
        answer: (item) => {
          answered.push(item);
          return item;
        },
      });
      const pending = iterator.next();
      await flush();
      await iterator.return?.();
      expect(await pending).toEqual({ value: undefined, done: true });
      read.resolve({ value: Annotated.fromData(LLMEngineOutput.error('late')), done: false });
      await flush();
      expect(seen).toHaveLength(1);
      expect(answered).toEqual([]);
      expect(await iterator.next()).toEqual({ value: undefined, done: true });
    }
  });

  it("while racing, the consumer gets decode's own result object: nothing is made per item but the answer's promise", async () => {
    for (const hooks of [{}, { answer: (item: EngineItem) => item }]) {
      const { task } = pendingPrefill();
      const source = new ScriptedSource([token(1)]);
      const { iterator } = await guarded(task, source, hooks);
      expect(await iterator.next()).toBe(await source.answers[0]);
    }
  });

  it("after the hand-off with an answer hook that keeps the item, the consumer gets decode's own result object", async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1), token(2), token(3)]);
    const { iterator } = await guarded(task, source, { answer: (item) => item });
    expect(describeStep(await iterator.next())).toBe(1);
    prefill.resolve();
    await flush();
    expect(describeStep(await iterator.next())).toBe(2); // read by the guard, then idle
    expect(await iterator.next()).toBe(await source.answers[2]); // handed off
  });

  it('with hooks, decode ending after the hand-off is the end: end is called once, decode is not closed again', async () => {
    const { prefill, task } = pendingPrefill();
    const source = new ScriptedSource([token(1), token(2)]);
    let ends = 0;
    const { iterator } = await guarded(task, source, { end: () => ends++ });
    expect(describeStep(await iterator.next())).toBe(1);
    prefill.resolve();
    await flush();
    expect(describeStep(await iterator.next())).toBe(2);
    const [a, b] = [iterator.next(), iterator.next()]; // both handed off
    source.end();
    expect([await a, await b]).toEqual([
      { value: undefined, done: true },
      { value: undefined, done: true },
    ]);
    await iterator.return?.();
    expect(ends).toBe(1);
    expect(source.returnCalls).toBe(0);
  });

  it('a decode iterator whose next() throws at once fails the call with that error (through fail), and the stream ends', async () => {
    const { task } = pendingPrefill();
    const broken = new Error('next() threw');
    let returns = 0;
    const source: AsyncIterator<EngineItem> = {
      next: () => {
        throw broken;
      },
      return: async () => {
        returns += 1;
        return { value: undefined, done: true };
      },
    };
    const iterator = await guardedOver(task, source, {
      fail: (error) => new Error(`wrapped: ${(error as Error).message}`),
    });
    await expect(iterator.next()).rejects.toThrow('wrapped: next() threw');
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    expect(returns).toBe(0);
  });

  it('a read that fails after prefill succeeded is not observed, and decode is not closed after its throw', async () => {
    for (const when of ['racing', 'forwarding'] as const) {
      const { prefill, task } = pendingPrefill();
      const seen: Step[] = [];
      const source = new ScriptedSource([token(1)]);
      const { iterator } = await guarded(task, source, {
        observe: (step) => {
          seen.push(step);
          return false; // only what is not a plain item from now on
        },
      });
      expect(describeStep(await iterator.next())).toBe(1);
      if (when === 'forwarding') prefill.resolve();
      await flush();
      const next = iterator.next();
      source.fail(new Error('socket reset'));
      await expect(next).rejects.toThrow('socket reset');
      expect(seen.map(describeStep)).toEqual(when === 'racing' ? [1, 'failed read'] : [1]);
      expect(source.returnCalls).toBe(0);
    }
  });
});
