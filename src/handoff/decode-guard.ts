import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { EngineItem, LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import { closeQuietly } from '../util/close-quietly.js';
import { FAILED, PENDING, type PrefillOutcome, type PrefillState, SUCCEEDED } from './prefill-outcome.js';

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
 * The rules live in one async generator (`#guard`). This object is the thin iterator in
 * front of it, for three things a generator cannot do by itself:
 * - close: a generator suspended on an `await` queues `return()` until it yields again, and
 *   one that never started skips its `finally`; closing here closes the decode iterator at
 *   once and wakes the generator, so a consumer can always end the stream;
 * - hand off: once prefill has succeeded, the generator is parked at a yield of its forward
 *   loop and every call made of it has its answer, `next()` goes straight to the decode
 *   iterator (the generator stays parked at that yield until the stream is closed), so the
 *   forward-only path costs one method call per item instead of a second generator. Calls
 *   made of the generator are answered in call order (the language queues them); reads sent
 *   to decode after the hand-off are answered in the order decode answers them, which for an
 *   async generator, and every iterator of this library, is call order;
 * - start lazily: a stream whose prefill has already succeeded never creates the generator.
 *
 * @internal
 */
export class GuardedDecodeIterator implements AsyncIterableIterator<EngineItem> {
  readonly #outcome: PrefillOutcome;
  readonly #source: AsyncIterator<EngineItem>;
  readonly #requestContext: AsyncEngineContext;
  readonly #streamContext: AsyncEngineContext;
  readonly #hooks: GuardHooks | undefined;
  #generator: AsyncGenerator<EngineItem, void, undefined> | undefined;
  /** Settles the turn the generator is awaiting: a decode pull, prefill, or a close. */
  #resolveTurn: ((step: Step | undefined) => void) | undefined;
  #rejectTurn: ((error: unknown) => void) | undefined;
  #pull: Promise<Step> | undefined;
  #sourceOpen = true;
  #closing = false;
  /** Prefill had succeeded before the first read: the generator is never needed. */
  #direct = false;
  /**
   * Prefill has succeeded and the generator is at a yield of its forward loop, after which
   * decode can be read directly. Alone it does not mean the generator is idle: a yield first
   * awaits its value (one microtask), and requests may still be queued behind it.
   */
  #mayHandOff = false;
  /**
   * The last request made of the generator has been answered, so none is outstanding (the
   * generator answers in call order). Known only for requests made once prefill had
   * succeeded, the only ones a hand-off can follow; any request clears it.
   */
  #caughtUp = false;
  #lastRequest: Promise<Step> | undefined;

  // Created once per stream, never per item.
  readonly #raceTurn = (resolve: (step: Step | undefined) => void, reject: (error: unknown) => void): void => {
    this.#resolveTurn = resolve;
    (this.#pull as Promise<Step>).then(resolve, reject);
  };
  /**
   * The turn of a racing read with an `observe` hook: the hook sees the answer whenever it
   * comes, and it settles the turn the generator is awaiting then. That can only be the
   * turn of this same read: the generator starts no other read before this one has answered
   * (after a wake-up it awaits this read again, in the forward loop) or it has ended.
   */
  readonly #observedTurn = (resolve: (step: Step | undefined) => void, reject: (error: unknown) => void): void => {
    this.#resolveTurn = resolve;
    this.#rejectTurn = reject;
    (this.#pull as Promise<Step>).then(this.#observed, this.#observedFailure);
  };
  // Only used with an observe hook. The turn may be gone by the time the read answers (the
  // consumer closed the stream meanwhile): the hook still sees the read, nobody awaits it.
  readonly #observed = (step: Step): void => {
    if ((this.#hooks as Required<GuardHooks>).observe(step) === false) this.#observeEvery = false;
    this.#resolveTurn?.(step);
  };
  readonly #observedFailure = (error: unknown): void => {
    if ((this.#hooks as Required<GuardHooks>).observe(undefined) === false) this.#observeEvery = false;
    this.#rejectTurn?.(error);
  };
  /** The `observe` hook still wants every read (see {@link GuardHooks.observe}). */
  #observeEvery = true;
  /** The hooks on a read handed straight to decode (only used with hooks). */
  readonly #answerStep = (step: Step): Step => {
    if (step.done === true) {
      (this.#hooks as GuardHooks).end?.();
      return step;
    }
    const answer = (this.#hooks as GuardHooks).answer;
    const out = answer === undefined ? step.value : answer(step.value);
    return out === step.value ? step : out === undefined ? DONE : { value: out, done: false };
  };
  readonly #failStep = (error: unknown): never => {
    throw this.#failure(error);
  };
  readonly #waitTurn = (resolve: (step: Step | undefined) => void): void => {
    this.#resolveTurn = resolve;
  };
  readonly #wake = (): void => {
    this.#resolveTurn?.(undefined);
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
    // Rule 10 from the first item: nothing to guard.
    if (outcome.state === SUCCEEDED) this.#direct = true;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    // After return() or throw(), nothing more: not even from a decode iterator that ignored
    // it. The generator, woken by the close, answers done in call order after what it owes.
    if (this.#closing) return (this.#generator?.next() as Promise<Step> | undefined) ?? Promise.resolve(DONE);
    // The hand-off: only once every earlier call has its answer, so that a read sent straight
    // to decode can never overtake one the generator has still to answer.
    if (this.#direct || (this.#mayHandOff && this.#caughtUp)) {
      const read = this.#source.next() as Promise<Step>;
      return this.#hooks === undefined ? read : read.then(this.#answerStep, this.#failStep);
    }
    this.#generator ??= this.#guard();
    const request = this.#generator.next() as Promise<Step>;
    this.#caughtUp = false;
    if (this.#outcome.state === SUCCEEDED) {
      // Watched only here, on the way to the hand-off (usually one item): racing reads pay nothing.
      this.#lastRequest = request;
      const answered = () => {
        if (this.#lastRequest === request) this.#caughtUp = true;
      };
      request.then(answered, answered);
    }
    return request;
  }

  return(value?: unknown): Promise<Step> {
    this.#close();
    return (this.#generator?.return(value as undefined) as Promise<Step> | undefined) ?? Promise.resolve(DONE);
  }

  throw(error?: unknown): Promise<Step> {
    this.#close();
    return (this.#generator?.throw(error) as Promise<Step> | undefined) ?? Promise.reject(error);
  }

  #close(): void {
    this.#closing = true;
    this.#closeSource();
    this.#wake();
  }

  #closeSource(): void {
    if (this.#sourceOpen) {
      this.#sourceOpen = false;
      closeQuietly(this.#source);
    }
  }

  #failure(error: unknown): unknown {
    const fail = this.#hooks?.fail;
    return fail === undefined ? error : fail(error);
  }

  async *#guard(): AsyncGenerator<EngineItem, void, undefined> {
    const outcome = this.#outcome;
    const source = this.#source;
    // Read once: the plain guard pays one comparison per item for the hooks it does not have.
    const answer = this.#hooks?.answer;
    outcome.listen(this.#wake);
    // A pull started while prefill was pending and left unread when prefill won the race.
    let inFlight: Promise<Step> | undefined;
    try {
      // Racing mode. Every check of `outcome.state` comes before the decode result is used:
      // a prefill outcome that is already known wins over a decode item that is also ready.
      const observe = this.#hooks?.observe;
      while (outcome.state === PENDING) {
        const pull = Promise.resolve(source.next() as Promise<Step>);
        this.#pull = pull;
        // Observed in the turn while every read is wanted; otherwise below, only if not plain.
        const observedInTurn = observe !== undefined && this.#observeEvery;
        let step: Step | undefined;
        try {
          step = await new Promise(observedInTurn ? this.#observedTurn : this.#raceTurn);
        } catch {
          if (observe !== undefined && !observedInTurn) observe(undefined);
          // Decode threw. Handled after the loop: a failed prefill still wins (biased), and
          // otherwise the forward path rethrows it.
          inFlight = pull;
          break;
        }
        if (this.#closing) return;
        if (outcome.state !== PENDING) {
          inFlight = pull;
          break;
        }
        const result = step as Step;
        const kind = result.done === true ? TERMINAL : classify(result.value);
        if (kind !== FLOWING && observe !== undefined && !observedInTurn) observe(result);
        if (kind === FLOWING) {
          const item = answer === undefined ? (result.value as EngineItem) : answer(result.value as EngineItem);
          if (item === undefined) return;
          yield item;
          continue;
        }
        if (kind === FAILURE) {
          // Rule 11: a decode failure is the answer; prefill is not awaited, nothing stopped.
          // Done with decode and prefill before the yield, in case the consumer never asks again.
          this.#closeSource();
          outcome.unlisten(this.#wake);
          const item = answer === undefined ? (result.value as EngineItem) : answer(result.value as EngineItem);
          if (item !== undefined) yield item;
          return;
        }
        // Rule 12: hold the terminal (an item with a finish reason, or the end) for prefill.
        if (result.done === true) this.#sourceOpen = false;
        await new Promise(this.#waitTurn);
        if (this.#closing) return;
        // The await above may have changed the state; TypeScript cannot know.
        if ((outcome.state as PrefillState) === FAILED) break;
        this.#closeSource();
        if (result.done !== true) {
          const item = answer === undefined ? (result.value as EngineItem) : answer(result.value as EngineItem);
          if (item !== undefined) yield item;
        } else {
          this.#hooks?.end?.();
        }
        return;
      }

      if (outcome.state === FAILED) {
        // Rules 9 and 12: one error item replaces whatever decode would have said.
        this.#closeSource();
        this.#requestContext.stopGenerating();
        this.#streamContext.stopGenerating();
        const error = Annotated.fromError<LLMEngineOutput>(outcome.error as Error);
        const item = answer === undefined ? error : answer(error);
        if (item !== undefined) yield item;
        return;
      }

      // Rule 10: prefill succeeded; forward the rest unchanged, starting with the pull that
      // was in flight when it did, so that no item is lost or reordered. Each pull is still
      // awaited through a turn, so that closing wakes the generator even if decode is stuck.
      // After each yield with nothing else queued, next() hands off to the decode iterator.
      outcome.unlisten(this.#wake);
      let pull = inFlight ?? Promise.resolve(source.next() as Promise<Step>);
      for (;;) {
        this.#pull = pull;
        let result: Step | undefined;
        try {
          result = await new Promise(this.#raceTurn);
        } catch (error) {
          this.#sourceOpen = false;
          throw this.#failure(error);
        }
        if (this.#closing) return;
        if ((result as Step).done === true) {
          this.#sourceOpen = false;
          this.#hooks?.end?.();
          return;
        }
        const item =
          answer === undefined ? ((result as Step).value as EngineItem) : answer((result as Step).value as EngineItem);
        if (item === undefined) return;
        this.#mayHandOff = true;
        yield item;
        this.#mayHandOff = false;
        pull = Promise.resolve(source.next() as Promise<Step>);
      }
    } finally {
      outcome.unlisten(this.#wake);
      this.#resolveTurn = undefined;
      this.#rejectTurn = undefined;
      this.#pull = undefined;
      this.#mayHandOff = false;
      this.#lastRequest = undefined;
      // Rule 14 and early exits: close decode, never touch prefill.
      this.#closeSource();
    }
  }
}
