import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import { closeQuietly } from '../util/close-quietly.js';
import { FAILED, type PrefillOutcome, SUCCEEDED } from './prefill-outcome.js';

type Step = IteratorResult<EngineItem, undefined>;

/** How an item read while prefill is pending is treated (rules 11-13). */
const FLOWING = 0;
const FAILURE = 1;
const TERMINAL = 2;

function classify(item: EngineItem): typeof FLOWING | typeof FAILURE | typeof TERMINAL {
  if (Annotated.isError(item)) return FAILURE;
  const reason = item?.data?.finish_reason;
  if (reason === undefined || reason === null) return FLOWING;
  return FinishReason.isFailure(reason) ? FAILURE : TERMINAL;
}

const DONE: Step = Object.freeze({ value: undefined, done: true }) as Step;
const RESOLVED = Promise.resolve();

/**
 * Where a guarded stream stands. `RACING`: prefill pending, decode items flow; `HOLDING`: a
 * terminal waits for prefill (a call is being served all along); `FORWARDING`: prefill has
 * succeeded, decode is forwarded as it is; `ENDED`: every later call answers done.
 */
const RACING = 0;
const HOLDING = 1;
const FORWARDING = 2;
const ENDED = 3;
type Phase = typeof RACING | typeof HOLDING | typeof FORWARDING | typeof ENDED;

/** A call waiting behind the one being served. */
interface Waiting {
  resolve: (step: Step) => void;
  reject: (error: unknown) => void;
}

/**
 * What a layer above can attach to a guarded stream so that its own per-item work rides on
 * the guard's promises instead of adding one of its own per item (the flow's decode leg and
 * client stream). Every hook runs synchronously.
 *
 * @internal
 */
export interface GuardHooks {
  /**
   * Sees the steps the guard reads from decode while prefill is pending (`undefined`: the read
   * failed): every one, when it settles (also a read the guard no longer waits for), until
   * it answers false; from then on only the ones that are not plain items (a terminal, a
   * failure, the end), as the guard meets them.
   */
  observe?(step: Step | undefined): boolean;
  /**
   * What the consumer gets for an item the guard answers with: the item, another one, or
   * `undefined` for done (the consumer's stream has ended above).
   */
  answer?(item: EngineItem): EngineItem | undefined;
  /** The stream ends by itself: the consumer is about to get done (not after its own `return()`). */
  end?(): void;
  /** What the consumer gets thrown for a failure of decode's iterator. */
  fail?(error: unknown): unknown;
}

/**
 * Phase B of `forwardDecode`: the decode iterator, guarded by the prefill outcome.
 *
 * Written as a plain iterator, not an async generator: the racing path costs one promise per
 * item for the consumer's answer, and a generator's own queue, awaits and resumptions cost
 * about twice that (`npm run bench`). What a generator gives for free is kept by hand:
 * - call order: one call is served at a time (the head); calls made meanwhile wait in a queue
 *   and are served in call order, so several `next()` in flight get the items in order;
 * - the hand-off: once prefill has succeeded and no call is waiting, `next()` goes straight to
 *   the decode iterator, so the forward-only path costs one method call per item. Reads sent
 *   to decode are answered in the order decode answers them, which for an async generator, and
 *   every iterator of this library, is call order;
 * - closing: `return()` and `throw()` close decode at once and answer every waiting call, even
 *   while decode is stuck, so a consumer can always end the stream.
 *
 * Every decision about a racing read is made one microtask after decode answers it, so that a
 * prefill outcome settling in the same turn is seen first (the race is biased toward prefill).
 *
 * @internal
 */
export class GuardedDecodeIterator implements AsyncIterableIterator<EngineItem> {
  readonly #outcome: PrefillOutcome;
  readonly #source: AsyncIterator<EngineItem>;
  readonly #requestContext: AsyncEngineContext;
  readonly #streamContext: AsyncEngineContext;
  readonly #hooks: GuardHooks | undefined;
  /** Read once: the plain guard pays one comparison per item for the hooks it does not have. */
  readonly #answer: GuardHooks['answer'];
  readonly #observe: GuardHooks['observe'];
  #phase: Phase;
  /** The call being served (the head); undefined when none is. */
  #resolve: ((step: Step) => void) | undefined;
  #reject: ((error: unknown) => void) | undefined;
  /** Calls made while the head was being served, in call order. */
  #queue: Waiting[] | undefined;
  /** The terminal held for prefill (phase `HOLDING`). */
  #held: Step | undefined;
  /** What the head's read settled with, decided one microtask later. */
  #settled: Step | undefined;
  #failed: { error: unknown } | undefined;
  /** The read in flight was made while `observe` wanted every read: it sees the answer. */
  #readObserved = false;
  /** The `observe` hook still wants every read (see {@link GuardHooks.observe}). */
  #observeEvery = true;
  #sourceOpen = true;
  /**
   * A transition is running: it calls out (hooks, decode's `return()`, the contexts), and a
   * close that those ask for (`return()`, `throw()`) waits for it to finish, as calls of a
   * running generator wait; a `next()` they make waits in the queue.
   */
  #busy = false;
  #later: Array<() => void> | undefined;

  // Created once per stream, never per item.
  readonly #start = (resolve: (step: Step) => void, reject: (error: unknown) => void): void => {
    if (this.#resolve !== undefined || this.#busy) {
      if (this.#queue === undefined) this.#queue = [];
      this.#queue.push({ resolve, reject });
      return;
    }
    this.#resolve = resolve;
    this.#reject = reject;
    this.#run(this.#serve);
  };
  /**
   * A read settled. Decided a microtask later, whatever happened meanwhile: a prefill that
   * settles in the same turn is seen first, a close drops it. Only `observe` sees it now.
   */
  readonly #onStep = (step: Step): void => {
    if (this.#readObserved && !this.#see(step)) return;
    this.#settled = step;
    RESOLVED.then(this.#decide);
  };
  readonly #onThrow = (error: unknown): void => {
    if (this.#readObserved && !this.#see(undefined)) return;
    this.#failed = { error };
    RESOLVED.then(this.#decide);
  };
  readonly #decide = (): void => {
    this.#run(this.#decideRead);
  };
  /** Prefill settled: acted on one microtask later, as the flow sees it first (its listener). */
  readonly #wake = (): void => {
    RESOLVED.then(this.#prefillSettled);
  };
  readonly #prefillSettled = (): void => {
    // Nobody waiting: the next call reads the state.
    if (this.#resolve !== undefined) this.#run(this.#afterPrefill);
  };

  constructor(
    outcome: PrefillOutcome,
    source: AsyncIterator<EngineItem>,
    requestContext: AsyncEngineContext,
    streamContext: AsyncEngineContext,
    hooks?: GuardHooks,
  ) {
    this.#outcome = outcome;
    this.#source = source;
    this.#requestContext = requestContext;
    this.#streamContext = streamContext;
    this.#hooks = hooks;
    this.#answer = hooks?.answer;
    this.#observe = hooks?.observe;
    // Rule 10 from the first item: nothing to guard.
    if (outcome.state === SUCCEEDED) {
      this.#phase = FORWARDING;
    } else {
      this.#phase = RACING;
      outcome.listen(this.#wake);
    }
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    // The hand-off: only once no call is waiting, so that a read sent straight to decode can
    // never overtake one still to be answered here.
    if (this.#phase === FORWARDING && this.#resolve === undefined && !this.#busy) {
      const read = this.#source.next() as Promise<Step>;
      return this.#hooks === undefined ? read : read.then(this.#answerStep, this.#failStep);
    }
    return new Promise(this.#start);
  }

  /** Closes decode and answers every waiting call done; then `{ value, done: true }`. */
  return(value?: unknown): Promise<Step> {
    const answer = { value, done: true } as unknown as Step;
    if (this.#busy) return this.#closeLater((resolve) => resolve(answer));
    this.#close();
    return Promise.resolve(answer);
  }

  /** Closes decode and answers every waiting call done; then rejects with `error`. */
  throw(error?: unknown): Promise<Step> {
    if (this.#busy) return this.#closeLater((_, reject) => reject(error));
    this.#close();
    return Promise.reject(error);
  }

  /** A close asked for during a transition: done when it has finished. */
  #closeLater(answer: (resolve: (step: Step) => void, reject: (error: unknown) => void) => void): Promise<Step> {
    return new Promise((resolve, reject) => {
      if (this.#later === undefined) this.#later = [];
      this.#later.push(() => {
        this.#close();
        answer(resolve, reject);
      });
    });
  }

  /**
   * Runs one transition: a hook that throws fails the call being answered and ends the stream
   * (as a generator's body that threw would end); what was asked meanwhile is done after it.
   */
  #run(transition: () => void): void {
    this.#busy = true;
    try {
      transition();
    } catch (error) {
      this.#crash(error);
    }
    this.#busy = false;
    const later = this.#later;
    if (later !== undefined) {
      this.#later = undefined;
      for (const work of later) work();
    }
  }

  /** Serves the head call: reads decode, or answers from the phase and the prefill outcome. */
  readonly #serve = (): void => {
    // Biased: a prefill outcome that is already known wins before decode is read.
    if (this.#prefillDecides()) return;
    if (this.#phase === ENDED) {
      this.#end(DONE);
      return;
    }
    // Observed only while racing, and only while the hook wants every read.
    this.#read(this.#phase === RACING && this.#observe !== undefined && this.#observeEvery);
  };

  #read(observed: boolean): void {
    let read: Promise<Step>;
    try {
      read = Promise.resolve(this.#source.next() as Promise<Step>);
    } catch (error) {
      read = Promise.reject(error);
    }
    this.#readObserved = observed;
    read.then(this.#onStep, this.#onThrow);
  }

  /** A read's answer, a microtask after it came. */
  readonly #decideRead = (): void => {
    const step = this.#settled;
    const failed = this.#failed;
    this.#settled = undefined;
    this.#failed = undefined;
    // Closed, or prefill failed first: nobody waits for this read any more.
    if (this.#phase === ENDED) return;
    // The biased check: every look at the outcome comes before the decode result is used.
    if (this.#prefillDecides()) return;
    if (failed !== undefined) {
      if (this.#phase === RACING && this.#observe !== undefined && !this.#readObserved) this.#observe(undefined);
      this.#decodeThrew(failed.error);
      return;
    }
    if (this.#phase === RACING) {
      this.#race(step as Step);
      return;
    }
    // Rule 10: a read after prefill succeeded, or one in flight when it did.
    if ((step as Step).done === true) {
      this.#sourceOpen = false;
      this.#hooks?.end?.();
      this.#end(DONE);
      return;
    }
    this.#reply(step as Step);
  };

  /** Prefill settled while a call waits: on its read (racing) or with a terminal held. */
  readonly #afterPrefill = (): void => {
    // A read that has settled but is not decided yet is decided by `#decideRead` as it would
    // be here: a failure answers now, a success forwards it.
    if (this.#outcome.state === FAILED) {
      this.#failPrefill();
      return;
    }
    if (this.#phase !== HOLDING) {
      this.#forwarding();
      return;
    }
    // Rule 12: the held terminal is released.
    const held = this.#held as Step;
    this.#closeSource();
    if (held.done === true) {
      this.#hooks?.end?.();
      this.#end(DONE);
      return;
    }
    this.#end(this.#answerOf(held));
  };

  /**
   * While racing, the prefill outcome as it stands now: a failure is answered at once (true:
   * nothing else to do), a success turns the stream to forwarding.
   */
  #prefillDecides(): boolean {
    if (this.#phase !== RACING) return false;
    const state = this.#outcome.state;
    if (state === FAILED) {
      this.#failPrefill();
      return true;
    }
    if (state === SUCCEEDED) this.#forwarding();
    return false;
  }

  /** Rules 11-13 for a read made and decided while prefill is pending. */
  #race(step: Step): void {
    const kind = step.done === true ? TERMINAL : classify(step.value);
    if (kind === FLOWING) {
      this.#reply(step);
      return;
    }
    if (this.#observe !== undefined && !this.#readObserved) this.#observe(step);
    if (kind === FAILURE) {
      // Rule 11: a decode failure is the answer; prefill is not awaited, nothing stopped.
      this.#closeSource();
      this.#end(this.#answerOf(step));
      return;
    }
    // Rule 12: hold the terminal (an item with a finish reason, or the end) for prefill.
    if (step.done === true) this.#sourceOpen = false;
    this.#held = step;
    this.#phase = HOLDING;
  }

  /** Prefill has succeeded: nothing more to race (and nothing to wake for). */
  #forwarding(): void {
    this.#phase = FORWARDING;
    this.#outcome.unlisten(this.#wake);
  }

  /** Rules 9 and 12: one error item replaces whatever decode would have said. */
  #failPrefill(): void {
    this.#closeSource();
    this.#requestContext.stopGenerating();
    this.#streamContext.stopGenerating();
    const error = Annotated.fromError<LLMEngineOutput>(this.#outcome.error as Error);
    this.#end(this.#answerOf({ value: error, done: false }));
  }

  /** Decode's iterator threw: the consumer gets the error (through the `fail` hook). */
  #decodeThrew(error: unknown): void {
    this.#sourceOpen = false;
    throw this.#failure(error);
  }

  /** What the consumer gets for an item: through the `answer` hook; `undefined` from it is done. */
  #answerOf(step: Step): Step {
    const value = step.value as EngineItem;
    const out = this.#answer === undefined ? value : this.#answer(value);
    return out === value ? step : out === undefined ? DONE : { value: out, done: false };
  }

  /** Answers the head with an item, then serves the next call; done from `answer` ends it. */
  #reply(step: Step): void {
    const answer = this.#answerOf(step);
    if (answer === DONE) {
      this.#end(DONE);
      return;
    }
    const resolve = this.#resolve as (step: Step) => void;
    this.#resolve = undefined;
    this.#reject = undefined;
    resolve(answer);
    const waiting = this.#queue?.shift();
    if (waiting === undefined) return;
    this.#resolve = waiting.resolve;
    this.#reject = waiting.reject;
    this.#serve();
  }

  /** The stream ends: the head gets `step`, every call waiting behind it done. */
  #end(step: Step): void {
    const resolve = this.#resolve;
    this.#finish();
    resolve?.(step);
    this.#drain();
  }

  /** A transition threw: the head fails with that error, every call behind it gets done. */
  #crash(error: unknown): void {
    const reject = this.#reject;
    this.#finish();
    reject?.(error);
    this.#drain();
  }

  #drain(): void {
    const queue = this.#queue;
    this.#queue = undefined;
    for (const waiting of queue ?? []) waiting.resolve(DONE);
  }

  /** Rule 14 and early exits: close decode, never touch prefill. */
  #finish(): void {
    this.#phase = ENDED;
    this.#resolve = undefined;
    this.#reject = undefined;
    this.#held = undefined;
    this.#outcome.unlisten(this.#wake);
    this.#closeSource();
  }

  #close(): void {
    this.#end(DONE);
  }

  #closeSource(): void {
    if (this.#sourceOpen) {
      this.#sourceOpen = false;
      closeQuietly(this.#source);
    }
  }

  /**
   * The `observe` hook on a read made while it wanted every read. False when the hook threw:
   * the call waiting for the read fails with that error and the stream ends.
   */
  #see(step: Step | undefined): boolean {
    try {
      if ((this.#observe as NonNullable<GuardHooks['observe']>)(step) === false) this.#observeEvery = false;
      return true;
    } catch (error) {
      this.#crash(error);
      return false;
    }
  }

  #failure(error: unknown): unknown {
    const fail = this.#hooks?.fail;
    return fail === undefined ? error : fail(error);
  }

  /**
   * The hooks on a read handed straight to decode (only used with hooks). Its end, or an
   * answer of `undefined`, ends the stream here too: later calls answer done.
   */
  readonly #answerStep = (step: Step): Step => {
    if (step.done === true) {
      this.#sourceOpen = false;
      if (this.#phase !== ENDED) {
        this.#phase = ENDED;
        (this.#hooks as GuardHooks).end?.();
      }
      return step;
    }
    const answer = this.#answerOf(step);
    if (answer === DONE) {
      this.#phase = ENDED;
      this.#closeSource();
    }
    return answer;
  };
  readonly #failStep = (error: unknown): never => {
    throw this.#failure(error);
  };
}
