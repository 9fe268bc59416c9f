import { closeQuietly } from '../handoff/decode-guard.js';
import { type DeadlineError, type DeadlinePhase, startTimer } from './deadlines.js';

type Step<T> = IteratorResult<T, undefined>;

const DONE = Object.freeze({ value: undefined, done: true }) as IteratorResult<never, undefined>;

/** The hooks that make a {@link WatchedIterator} a prefill reader or a decode leg. */
export interface WatchHooks<T> {
  /**
   * Whether a read without a budget can still be interrupted by `expire` (a turn per read);
   * without it such a read hands the source's promise through.
   */
  interruptible: boolean;
  /** The budget of read number `read` (0 for the first), or undefined for none. */
  budget(read: number): { ms: number; phase: DeadlinePhase } | undefined;
  /** Makes the deadline error of a phase (the caller knows the budgets). */
  deadline(phase: DeadlinePhase, ms: number): DeadlineError;
  /** Sees every step read from the source (and a source error), in order, while `observing()`. */
  observe?(step: Step<T> | undefined, read: number): void;
  /** Whether the next read is to be observed (unobserved reads cost one promise less). */
  observing?(): boolean;
  /** What the read that a deadline interrupted answers: a rejection, or a last item. */
  expired(error: DeadlineError): Promise<Step<T>>;
  /**
   * Called once when a deadline stopped the watch, with the source still open: the hook
   * decides what becomes of it. Without the hook the source is closed.
   */
  onExpired?(error: DeadlineError, source: AsyncIterator<T>): void;
  /** Called by `return()`/`throw()` instead of closing the source, when given. */
  onClose?(source: AsyncIterator<T>): void;
}

/**
 * Reads a source under per-read budgets and an external expiry, without ever racing a
 * long-lived promise: each read with a budget gets its own turn promise, settled either by
 * the source's answer or by the timer (or `expire`), and the timer is cleared as soon as the
 * answer comes. A read without a budget, when nothing else can interrupt it, hands the
 * source's promise through.
 *
 * After a deadline the source is closed without waiting for it (it may be stuck; an async
 * generator's `return()` would queue behind the stuck `next()`), the pending read answers
 * with `hooks.expired(error)` and every later read is done.
 *
 * @internal
 */
export class WatchedIterator<T> implements AsyncIterableIterator<T> {
  readonly #source: AsyncIterator<T>;
  readonly #hooks: WatchHooks<T>;
  #reads = 0;
  #stopped = false;
  #expiredWith: DeadlineError | undefined;
  #settleTurn: ((step: Promise<Step<T>> | Step<T>) => void) | undefined;
  #cancelTimer: (() => void) | undefined;
  /** The expiry answer for the next read, when the deadline came between reads. */
  #answerNext: Promise<Step<T>> | undefined;
  /** A read started early by {@link prefetch}, for the next `next()`. */
  #prefetched: Promise<Step<T>> | undefined;
  /** How many steps have been observed (reads settle in order). */
  #observed = 0;
  // Created once per iterator, never per read.
  readonly #observeStep = (step: Step<T>): Step<T> => {
    (this.#hooks.observe as NonNullable<WatchHooks<T>['observe']>)(step, this.#observed++);
    return step;
  };
  readonly #observeError = (error: unknown): never => {
    (this.#hooks.observe as NonNullable<WatchHooks<T>['observe']>)(undefined, this.#observed++);
    throw error;
  };

  constructor(source: AsyncIterator<T>, hooks: WatchHooks<T>) {
    this.#source = source;
    this.#hooks = hooks;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** How many reads have been started (the index of the next one). */
  get reads(): number {
    return this.#reads;
  }

  /** True once a deadline stopped this watch. */
  get expired(): boolean {
    return this.#expiredWith !== undefined;
  }

  next(): Promise<Step<T>> {
    const prefetched = this.#prefetched;
    if (prefetched !== undefined) {
      this.#prefetched = undefined;
      return prefetched;
    }
    if (this.#stopped) {
      const answer = this.#answerNext;
      this.#answerNext = undefined;
      return answer ?? Promise.resolve(DONE);
    }
    const read = this.#reads++;
    const pull = Promise.resolve(this.#source.next() as Promise<Step<T>>);
    const hooks = this.#hooks;
    const observed =
      hooks.observe === undefined || hooks.observing?.() === false
        ? pull
        : pull.then(this.#observeStep, this.#observeError);
    const budget = this.#hooks.budget(read);
    if (budget === undefined && !this.#hooks.interruptible) return observed;
    return new Promise<Step<T>>((resolve, reject) => {
      this.#settleTurn = resolve;
      if (budget !== undefined) {
        this.#cancelTimer = startTimer(budget.ms, () => this.expire(this.#hooks.deadline(budget.phase, budget.ms)));
      }
      observed.then(
        (step) => {
          this.#clearTurn();
          resolve(step);
        },
        (error: unknown) => {
          this.#clearTurn();
          reject(error);
        },
      );
    });
  }

  /**
   * Starts the next read now, before anyone asks: its answer is what the next `next()`
   * returns, so nothing is lost or reordered. For a leg that must be read while its reader
   * is away. Does nothing once stopped or when a prefetched read is waiting.
   */
  prefetch(): void {
    if (this.#stopped || this.#prefetched !== undefined) return;
    const read = this.next();
    // Its rejection belongs to whoever reads it next, if anyone does.
    read.then(undefined, ignore);
    this.#prefetched = read;
  }

  /**
   * Stops the watch with a deadline error: answers a pending read with `hooks.expired(error)`,
   * closes the source (or leaves that to `hooks.onExpired`), and makes every later read done (the first later read gets the
   * expiry answer when no read was pending). Idempotent; does nothing after `return()`.
   */
  expire(error: DeadlineError): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#expiredWith = error;
    const settle = this.#settleTurn;
    this.#clearTurn();
    const answer = this.#hooks.expired(error);
    // A rejection here is the answer of the read (or nobody's): never unhandled.
    answer.then(undefined, ignore);
    if (settle === undefined) this.#answerNext = answer;
    else settle(answer);
    // Only after the turn is settled: a source that answers `done` when closed must not get in first.
    if (this.#hooks.onExpired === undefined) closeQuietly(this.#source);
    else this.#hooks.onExpired(error, this.#source);
  }

  return(): Promise<Step<T>> {
    this.#close();
    return Promise.resolve(DONE);
  }

  throw(): Promise<Step<T>> {
    this.#close();
    return Promise.resolve(DONE);
  }

  #close(): void {
    this.#prefetched = undefined;
    if (this.#stopped) return;
    this.#stopped = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    // A pending read keeps its own answer; the watch no longer interrupts it.
    this.#settleTurn = undefined;
    if (this.#hooks.onClose === undefined) closeQuietly(this.#source);
    else this.#hooks.onClose(this.#source);
  }

  #clearTurn(): void {
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#settleTurn = undefined;
  }
}

function ignore(): void {}
