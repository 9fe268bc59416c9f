import { getEventListeners } from 'node:events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import {
  type DecodeStream,
  type FlowGuardHooks,
  forwardDecodeWith,
  PrefillTask,
} from '../../src/handoff/prefill-task.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { deferred, flush, type Item, isPending, recordingLogger, ScriptedSource } from '../support/async.js';
import { propertyOptions } from '../support/property.js';
import { type DecodeEvent, type Expectation, expect as model, type Output, type Schedule } from './handoff-model.js';

const EVENTS: DecodeEvent[] = [
  'token',
  'token',
  'token',
  'annotation',
  'no-data',
  'eos',
  'length',
  'stop',
  'content_filter',
  'error-item',
  'finish-error',
  'cancelled',
  'end',
  'throw',
];

/** Schedules with distinct event times in 1..60; null times mean "never". */
const anySchedule: fc.Arbitrary<Schedule> = fc
  .record({
    events: fc.array(fc.constantFrom(...EVENTS), { maxLength: 7 }),
    times: fc.uniqueArray(fc.integer({ min: 1, max: 60 }), { minLength: 9, maxLength: 9 }),
    prefillOk: fc.boolean(),
    prefillNever: fc.boolean(),
    dispatchOk: fc.boolean(),
    dispatchNever: fc.boolean(),
    stopAfter: fc.option(fc.integer({ min: 0, max: 6 }), { nil: null }),
    by: fc.constantFrom<'return' | 'throw'>('return', 'throw'),
    inFlight: fc.constantFrom<1 | 2 | 3>(1, 2, 2, 3, 3),
    plan: fc.array(fc.record({ calls: fc.integer({ min: 0, max: 2 }), depth: fc.integer({ min: 0, max: 5 }) }), {
      minLength: 1,
      maxLength: 8,
    }),
  })
  .map(({ events, times, prefillOk, prefillNever, dispatchOk, dispatchNever, stopAfter, by, inFlight, plan }) => {
    const [prefillAt, dispatchAt, ...itemTimes] = times as [number, number, ...number[]];
    const sorted = itemTimes.slice(0, events.length).sort((a, b) => a - b);
    // Decode says nothing after its end or a throw.
    const cut = events.findIndex((event) => event === 'end' || event === 'throw');
    const decode = (cut === -1 ? events : events.slice(0, cut + 1)).map((event, i) => ({
      event,
      at: sorted[i] as number,
    }));
    return {
      // "Never" for prefill only 1 time in 4, so that most schedules see it settle.
      prefill: { ok: prefillOk, at: prefillNever && !prefillOk ? null : prefillAt },
      dispatch: { ok: dispatchOk, at: dispatchNever && dispatchOk && !prefillNever ? null : dispatchAt },
      decode,
      consumer: { stopAfter, by },
      reader: { inFlight, plan },
    };
  });

/**
 * Where pipelined readers go wrong: decode opens first, then tokens stream while prefill settles
 * among them, read by two or three calls in flight placed a few microtasks after each answer
 * and event.
 */
const pipelinedSchedule: fc.Arbitrary<Schedule> = anySchedule.chain((s) =>
  fc
    .record({
      tokens: fc.integer({ min: 2, max: 6 }),
      last: fc.constantFrom<DecodeEvent>('length', 'end', 'error-item', 'token'),
      prefillAfter: fc.integer({ min: 0, max: 6 }),
      inFlight: fc.constantFrom<2 | 3>(2, 3),
      plan: fc.array(fc.record({ calls: fc.integer({ min: 0, max: 2 }), depth: fc.integer({ min: 0, max: 3 }) }), {
        minLength: 1,
        maxLength: 8,
      }),
    })
    .map(({ tokens, last, prefillAfter, inFlight, plan }) => {
      const events: DecodeEvent[] = [...Array.from({ length: tokens }, () => 'token' as const), last];
      // Time 2i + 2 for item i; prefill in one of the odd gaps between them.
      const decode = events.map((event, i) => ({ event, at: 2 * i + 2 }));
      return {
        ...s,
        prefill: { ok: s.prefill.ok, at: 2 * Math.min(prefillAfter, events.length) + 1 },
        dispatch: { ok: true, at: 0 },
        decode,
        reader: { inFlight, plan },
      };
    }),
);

const schedules = fc.oneof(anySchedule, pipelinedSchedule);

function itemFor(event: DecodeEvent, index: number): Item {
  switch (event) {
    case 'token':
      return Annotated.fromData({ token_ids: [index] });
    case 'annotation':
      return { event: 'metrics', comment: [`{"index":${index}}`] };
    case 'no-data':
      return {};
    case 'error-item':
      return Annotated.fromError(`decode failed at ${index}`);
    case 'finish-error':
      return Annotated.fromData(LLMEngineOutput.error(`engine failed at ${index}`));
    case 'cancelled':
      return Annotated.fromData(LLMEngineOutput.cancelled());
    default:
      return Annotated.fromData({ token_ids: [], finish_reason: event as 'eos' });
  }
}

interface Observed {
  call: Expectation['call'];
  outputs: Output[];
  end: Expectation['end'];
  callError?: unknown;
  streamError?: unknown;
}

/** One `next()` call of the consumer and what it got. */
interface Call {
  promise: Promise<IteratorResult<Item>>;
  answer?: { step: IteratorResult<Item> } | { error: unknown };
  /** Whether it was answered before the consumer closed the stream. */
  beforeClose?: boolean;
}

/** Runs `work` after `depth` microtasks. */
function after(depth: number, work: () => void): void {
  let turn = Promise.resolve();
  for (let i = 0; i < depth; i++) turn = turn.then();
  turn.then(work);
}

/**
 * The consumer: keeps up to `inFlight` calls of `next()` in flight. Each answer and each event
 * lets the next planned number of calls go (0 to 2, each after its own number of microtasks),
 * and at least one whenever none is left in flight, so that it is always reading when the
 * next event comes. It stops (by `return()` or `throw()`) once it holds `stopAfter` items in
 * call order, and stops calling after `done` or an error. It records every call and the order
 * in which the calls were answered.
 */
class Reader {
  readonly calls: Call[] = [];
  /** Call indexes in the order their answers arrived. */
  readonly answerOrder: number[] = [];
  closed = false;
  closeResult: Promise<unknown> | undefined;
  /** How it closed: `throw` only where the iterator has `throw()` (an unwrapped decode may not). */
  closedBy: 'return' | 'throw' | undefined;
  #unanswered = 0;
  #turn = 0;
  #ended = false;

  constructor(
    readonly iterator: AsyncIterator<Item>,
    readonly s: Schedule,
    readonly consumerError: Error,
  ) {}

  /** Lets the planned calls go (at least one when none is in flight). */
  pump(): void {
    const { plan } = this.s.reader;
    const { calls, depth } = plan[this.#turn++ % plan.length] as { calls: number; depth: number };
    const count = this.#unanswered === 0 ? Math.max(1, calls) : calls;
    for (let i = 0; i < count; i++) after(depth + i, () => this.#issue());
  }

  #issue(): void {
    // At most one call per item decode can send, and one more: enough to see the end.
    const { inFlight } = this.s.reader;
    if (this.closed || this.#ended || this.#unanswered >= inFlight || this.calls.length > this.s.decode.length + 2) {
      return;
    }
    const index = this.calls.length;
    const call: Call = { promise: this.iterator.next() };
    this.calls.push(call);
    this.#unanswered += 1;
    call.promise.then(
      (step) => this.#answered(index, { step }),
      (error: unknown) => this.#answered(index, { error }),
    );
  }

  #answered(index: number, answer: Call['answer']): void {
    const call = this.calls[index] as Call;
    call.answer = answer;
    call.beforeClose = !this.closed;
    this.answerOrder.push(index);
    this.#unanswered -= 1;
    if (this.closed) return;
    if (answer !== undefined && ('error' in answer || answer.step.done === true)) this.#ended = true;
    const stopAfter = this.s.consumer.stopAfter;
    if (stopAfter !== null && this.#itemsInHand() >= stopAfter) {
      this.close();
      return;
    }
    this.pump();
  }

  /** Items answered so far without a gap, in call order. */
  #itemsInHand(): number {
    let items = 0;
    for (const call of this.calls) {
      if (call.answer === undefined || 'error' in call.answer || call.answer.step.done === true) break;
      items += 1;
    }
    return items;
  }

  close(by = this.s.consumer.by): void {
    if (this.closed) return;
    this.closed = true;
    const it = this.iterator;
    this.closedBy = by === 'throw' && it.throw !== undefined ? 'throw' : 'return';
    this.closeResult =
      this.closedBy === 'throw' && it.throw !== undefined
        ? it.throw(this.consumerError).then(
            () => 'resolved',
            (error: unknown) => error,
          )
        : Promise.resolve(it.return?.()).then((step) => step);
  }
}

/** What identity hooks saw (the flow's way in: the guard does the per-item work above it). */
interface HookLog {
  hooks: FlowGuardHooks;
  observed: Array<IteratorResult<Item> | undefined>;
  answered: Item[];
  ends: number;
  failures: unknown[];
}

/** `every`: the observer wants every read; `first`: only the first, then what is not plain. */
function hookLog(wants: 'every' | 'first'): HookLog {
  const log: HookLog = {
    hooks: {
      observe: (step) => {
        log.observed.push(step);
        return wants === 'every';
      },
      answer: (item) => {
        log.answered.push(item);
        return item;
      },
      end: () => {
        log.ends += 1;
      },
      fail: (error) => {
        log.failures.push(error);
        return error;
      },
    },
    observed: [],
    answered: [],
    ends: 0,
    failures: [],
  };
  return log;
}

/**
 * Drives the real forwardDecode through a schedule, one event per step, and records it all;
 * `hooked`: through the flow's entry with hooks that change nothing, which must change nothing.
 */
async function run(s: Schedule, hooked: 'no' | 'every' | 'first' = 'no') {
  const prefill = deferred();
  const task = PrefillTask.spawn(prefill.promise, { logger: recordingLogger().logger });
  const requestContext = new Controller('request');
  const decodeContext = new Controller('decode');
  const source = new ScriptedSource();
  const dispatch = deferred<DecodeStream>();
  let signal: AbortSignal | undefined;
  const items = s.decode.map(({ event }, i) => itemFor(event, i));
  const prefillError = new Error('prefill worker lost');
  const dispatchError = new Error('decode worker refused');
  const decodeError = new Error('decode socket reset');
  const consumerError = new Error('client went away');

  const observed: Observed = { call: 'pending', outputs: [], end: 'none' };
  let reader: Reader | undefined;
  const hooks = hooked === 'no' ? undefined : hookLog(hooked);
  const decode = (abort: AbortSignal) => {
    signal = abort;
    return dispatch.promise;
  };
  const call = (
    hooks === undefined
      ? task.forwardDecode(decode, requestContext)
      : forwardDecodeWith(task, decode, requestContext, hooks.hooks)
  ).then(
    (stream) => {
      observed.call = 'stream';
      reader = new Reader(stream[Symbol.asyncIterator](), s, consumerError);
      if (s.consumer.stopAfter === 0) reader.close();
      else reader.pump();
    },
    (error: unknown) => {
      observed.call = error === dispatchError ? 'dispatch-error' : 'prefill-error';
      observed.callError = error;
    },
  );

  const steps: Array<{ at: number; fire: () => void }> = s.decode.map(({ event, at }, i) => ({
    at,
    fire: () => {
      if (event === 'end') source.end();
      else if (event === 'throw') source.fail(decodeError);
      else source.push(items[i] as Item);
    },
  }));
  if (s.prefill.at !== null) {
    steps.push({ at: s.prefill.at, fire: () => (s.prefill.ok ? prefill.resolve() : prefill.reject(prefillError)) });
  }
  if (s.dispatch.at !== null) {
    steps.push({
      at: s.dispatch.at,
      fire: () =>
        s.dispatch.ok ? dispatch.resolve(new ResponseStream(source, decodeContext)) : dispatch.reject(dispatchError),
    });
  }
  steps.sort((a, b) => a.at - b.at);
  await flush();
  for (const step of steps) {
    step.fire();
    // A call placed relative to the event, too (the reader keeps its own limit).
    reader?.pump();
    await flush();
  }
  // A call still pending here stays pending (the model says when): its handlers have run if it settled.
  void call;
  return {
    observed,
    hooks,
    reader,
    task,
    source,
    items,
    requestContext,
    decodeContext,
    signal,
    errors: { prefillError, dispatchError, decodeError, consumerError },
  };
}

/**
 * What the reader saw, as the sequential model describes it: the items of the answers in
 * call order, and how the stream ended. Checks on the way that calls were answered in call
 * order and that nothing but `done` follows the end.
 */
function outcomeOf(r: Awaited<ReturnType<typeof run>>, full: Output[]): Observed {
  const { observed, reader, items } = r;
  if (reader === undefined) return observed;
  // Answers arrive in the order the calls were made.
  expect(reader.answerOrder).toEqual([...reader.answerOrder].sort((a, b) => a - b));
  const outputs: Output[] = [];
  let end: Observed['end'] = 'pending';
  for (const call of reader.calls) {
    const answer = call.answer;
    if (answer === undefined) {
      // Unanswered: only a stream still waiting (or closed, checked by the caller) has one.
      expect(end).toBe('pending');
      continue;
    }
    if (end !== 'pending') {
      // After the end, every call answers done.
      expect(answer).toEqual({ step: { value: undefined, done: true } });
      continue;
    }
    if ('error' in answer) {
      end = 'decode-throw';
      observed.streamError = answer.error;
      continue;
    }
    if (answer.step.done === true) {
      end = 'done';
      continue;
    }
    const index = items.indexOf(answer.step.value);
    const output: Output = index === -1 ? 'P' : index;
    if (index === -1) expect(Annotated.err(answer.step.value)).toBeInstanceOf(PrefillError);
    // Every item is the next one of the stream: never one out of order, twice, or invented.
    expect(output).toEqual(full[outputs.length]);
    outputs.push(output);
  }
  return { ...observed, outputs, end };
}

/**
 * Hooks on a guarded stream see what the consumer gets: `answer` each item handed over, in
 * order, `end` when the stream ended without a terminal item, `fail` a decode throw; `observe`
 * each read at most once, in decode's order.
 */
function checkHooks(r: Awaited<ReturnType<typeof run>>, observed: Observed): void {
  const log = r.hooks as HookLog;
  if (log.hooks.guarded !== true) {
    expect([log.answered, log.observed, log.ends, log.failures]).toEqual([[], [], 0, []]);
    return;
  }
  const delivered: Item[] = [];
  for (const call of r.reader?.calls ?? []) {
    const answer = call.answer;
    if (answer !== undefined && !('error' in answer) && answer.step.done !== true) delivered.push(answer.step.value);
  }
  // Answered before the consumer got it; an answer after it closed may never be delivered.
  expect(log.answered.slice(0, delivered.length)).toEqual(delivered);
  if (observed.end === 'done' && r.reader?.closed !== true) {
    const last = delivered.at(-1);
    const terminal = last !== undefined && (Annotated.isError(last) || last.data?.finish_reason != null);
    expect(log.ends > 0 || terminal).toBe(true);
  }
  if (observed.end === 'decode-throw') expect(log.failures).toContain(r.errors.decodeError);
  expect(new Set(log.observed.filter((step) => step !== undefined)).size).toBe(
    log.observed.filter((step) => step !== undefined).length,
  );
  const values = log.observed.flatMap((step) => (step === undefined || step.done === true ? [] : [step.value]));
  expect(values).toEqual(r.items.filter((item) => values.includes(item)));
}

describe('forwardDecode against the executable model of rules 1-14', () => {
  it('every generated schedule, for readers with up to three calls in flight: same items in call order, same end, same stopped contexts, decode closed, prefill untouched', async () => {
    await fc.assert(
      fc.asyncProperty(
        schedules,
        fc.constantFrom<'no' | 'every' | 'first'>('no', 'every', 'first'),
        async (s, hooked) => {
          const expected = model(s);
          // The whole stream, for items a pipelined reader had asked for before it stopped.
          const full = model({ ...s, consumer: { stopAfter: null, by: s.consumer.by } }).outputs;
          const r = await run(s, hooked);
          const observed = outcomeOf(r, full);
          if (r.hooks !== undefined) checkHooks(r, observed);
          const pipelined = s.reader.inFlight > 1;

          expect(observed.call).toBe(expected.call);
          if (expected.call === 'prefill-error') {
            expect(observed.callError).toBeInstanceOf(PrefillError);
            expect((observed.callError as PrefillError).cause).toBe(r.errors.prefillError);
          }
          if (expected.call === 'dispatch-error') expect(observed.callError).toBe(r.errors.dispatchError);
          const reader = r.reader;
          if (expected.call === 'stream') {
            if (reader === undefined) throw new Error('the stream was returned but never read');
            if (expected.end === 'consumer') {
              expect(reader.closed).toBe(true);
              // What the consumer held when it stopped; a pipelined one may have more, checked above.
              expect(observed.outputs.slice(0, expected.outputs.length)).toEqual(expected.outputs);
              if (!pipelined) expect(observed.outputs).toEqual(expected.outputs);
              if (reader.closedBy === 'throw') expect(await reader.closeResult).toBe(r.errors.consumerError);
              else expect(await reader.closeResult).toMatchObject({ done: true });
            } else {
              expect(reader.closed).toBe(false);
              expect(observed.outputs).toEqual(expected.outputs);
              expect(observed.end).toBe(expected.end);
              if (expected.end === 'decode-throw') expect(observed.streamError).toBe(r.errors.decodeError);
            }
            if (expected.end === 'pending') {
              // The stream waits (unless the model says it ends); the consumer can still close it.
              const alreadyEnded = r.source.finished; // a held end: nothing left to close
              reader.close('return');
              expect(await reader.closeResult).toMatchObject({ done: true });
              await flush();
              expect(r.source.closed).toBe(!alreadyEnded);
            } else if (expected.decodeClosed) {
              // A pipelined reader may have read decode's end before it stopped: then nothing is left to close.
              expect(r.source.closed || (pipelined && r.source.finished)).toBe(true);
            } else {
              expect(r.source.closed).toBe(false);
            }
            // No call is left hanging once the stream has ended or was closed.
            await flush();
            expect(reader.calls.every((call) => call.answer !== undefined)).toBe(true);
            // After the end: nothing more, ever.
            expect(await reader.iterator.next()).toMatchObject({ done: true });
          } else {
            expect(reader).toBeUndefined();
            if (expected.call !== 'pending') expect(r.source.closed).toBe(expected.decodeClosed);
          }

          expect(r.requestContext.isStopped()).toBe(expected.requestStopped);
          expect(r.decodeContext.isStopped()).toBe(expected.decodeStopped);
          expect(r.requestContext.isKilled() || r.decodeContext.isKilled()).toBe(false);
          expect(r.signal?.aborted ?? false).toBe(expected.dispatchAborted);
          // No listener left behind on any signal the library handed out or touched.
          for (const target of [r.signal, r.requestContext.signal, r.decodeContext.signal]) {
            if (target !== undefined) expect(getEventListeners(target, 'abort')).toHaveLength(0);
          }
          // Prefill is never cancelled: its outcome is the one it settled with.
          if (s.prefill.at === null) expect(await isPending(r.task.wait())).toBe(true);
          else if (s.prefill.ok) await expect(r.task.wait()).resolves.toBeUndefined();
          else await expect(r.task.wait()).rejects.toBeInstanceOf(PrefillError);
        },
      ),
      propertyOptions(3000, 42, 2000),
    );
  }, 180_000);
});
