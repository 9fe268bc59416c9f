import { CallOrder } from '../util/call-order.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { type DeadlineError, type DeadlinePhase, startTimer } from './deadlines.js';

type Step<T> = IteratorResult<T, undefined>;

const DONE = Object.freeze({ value: undefined, done: true }) as IteratorResult<never, undefined>;

/** How long one read may wait, and the phase its overrun is reported as. */
export interface ReadBudget {
  ms: number;
  phase: DeadlinePhase;
}

/** The hooks that make a {@link WatchedIterator} a prefill reader or a decode leg. */
export interface WatchHooks<T> {
  /**
   * Whether a read without a budget can still be interrupted by `expire` (a turn per read);
   * without it such a read hands the source's promise through.
   */
  interruptible: boolean;
  /** The budget of the first read, and of every later one; none by default. */
  budgets?: { first?: ReadBudget | undefined; later?: ReadBudget | undefined } | undefined;
  /** Makes the deadline error of a phase (the caller knows the budgets). */
  deadline(phase: DeadlinePhase, ms: number): DeadlineError;
  /**
   * Sees every step read from the source (and a source error), in order, while the iterator's
   * `observing` is true, and every prefetched one.
   */
  observe?(step: Step<T> | undefined, read: number): void;
  /**
   * Whether reads are observed from the start (unobserved reads cost one promise less);
   * true by default. The owner changes it with {@link WatchedIterator.observing}.
   */
  observing?: boolean | undefined;
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
 * Calls are answered in the order they were made ({@link CallOrder}): a call made while a
 * watched read is in flight reads only after it, so budgets count from the moment a read
 * really starts. `return()` answers a pending read done at once (when it has a turn; a read
 * handed through is the source's own) and every later call done at once.
 *
 * @internal
 */
export class WatchedIterator<T> implements AsyncIterableIterator<T> {
  readonly #source: AsyncIterator<T>;
  readonly #hooks: WatchHooks<T>;
  readonly #first: ReadBudget | undefined;
  readonly #later: ReadBudget | undefined;
  /** Reads are observed (there is an observer, and its owner wants it now). */
  #observing: boolean;
  #reads = 0;
  #stopped = false;
  /** Closed by `return()`/`throw()`. */
  #closed = false;
  #expiredWith: DeadlineError | undefined;
  #settleTurn: ((step: Promise<Step<T>> | Step<T>) => void) | undefined;
  #failTurn: ((error: unknown) => void) | undefined;
  #cancelTimer: (() => void) | undefined;
  /** The expiry answer for the next read, when the deadline came between reads. */
  #answerNext: Promise<Step<T>> | undefined;
  /** The next read starts for {@link prefetch}: it is observed whatever `observing()` says. */
  #observeNext = false;
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
  /** The same, for a read whose answer is the observed promise itself. */
  readonly #observeStepLast = (step: Step<T>): Step<T> => {
    this.#order.settled();
    return this.#observeStep(step);
  };
  readonly #observeErrorLast = (error: unknown): never => {
    this.#order.settled();
    return this.#observeError(error);
  };
  // A read's turn ends with its answer, or with its budget's timer. At most one turn is open
  // at a time (the call order starts the next only once this one has settled, and a turn
  // ended by `expire` or `return()` stops the watch), so these are made once per iterator,
  // not per read: an answer that comes after its turn was ended finds none open.
  readonly #answered = (step: Step<T>): void => {
    const settle = this.#settleTurn;
    if (settle === undefined) return;
    this.#clearTurn(settle);
    settle(step);
  };
  readonly #failed = (error: unknown): void => {
    const settle = this.#settleTurn;
    const fail = this.#failTurn;
    if (settle === undefined || fail === undefined) return;
    this.#clearTurn(settle);
    fail(error);
  };
  readonly #openTurn = (
    resolve: (step: Promise<Step<T>> | Step<T>) => void,
    reject: (error: unknown) => void,
  ): void => {
    this.#settleTurn = resolve;
    this.#failTurn = reject;
  };
  readonly #firstOverrun = (): void => this.#overrun(this.#first as ReadBudget);
  readonly #laterOverrun = (): void => this.#overrun(this.#later as ReadBudget);
  readonly #read = (): Promise<Step<T>> => this.#readNow();
  /** Reads in call order, one at a time where the watch has a say (pipelined readers). */
  readonly #order = new CallOrder<Step<T>>(this.#read);

  constructor(source: AsyncIterator<T>, hooks: WatchHooks<T>) {
    this.#source = source;
    this.#hooks = hooks;
    this.#first = hooks.budgets?.first;
    this.#later = hooks.budgets?.later;
    this.#observing = hooks.observe !== undefined && hooks.observing !== false;
  }

  /** Whether later reads are observed (a read already started keeps what it was). */
  get observing(): boolean {
    return this.#observing;
  }

  set observing(value: boolean) {
    this.#observing = value && this.#hooks.observe !== undefined;
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
    // After return(), at once: never queued behind a read that may be stuck.
    if (this.#closed) return Promise.resolve(DONE);
    // Nothing to watch on this read and nothing before it: the source's own promise, at the
    // cost of a few field reads (the usual case once decode has taken the KV and prefill is over).
    // (Never for a prefetched read: it is observed, whatever `observing` says.)
    if (
      !this.#observing &&
      !this.#observeNext &&
      !this.#stopped &&
      !this.#hooks.interruptible &&
      (this.#reads === 0 ? this.#first : this.#later) === undefined &&
      this.#order.idle
    ) {
      this.#reads++;
      try {
        return this.#source.next() as Promise<Step<T>>;
      } catch (error) {
        return Promise.reject(error);
      }
    }
    return this.#order.call();
  }

  #stoppedAnswer(): Promise<Step<T>> {
    const answer = this.#answerNext;
    this.#answerNext = undefined;
    return answer ?? Promise.resolve(DONE);
  }

  #readNow(): Promise<Step<T>> {
    if (this.#stopped) {
      this.#order.settled();
      return this.#stoppedAnswer();
    }
    const read = this.#reads++;
    let pull: Promise<Step<T>>;
    try {
      pull = Promise.resolve(this.#source.next() as Promise<Step<T>>);
    } catch (error) {
      pull = Promise.reject(error);
    }
    const hooks = this.#hooks;
    // A prefetched read is always observed: it is read for the watch's own sake.
    const observing = this.#observing || (this.#observeNext && hooks.observe !== undefined);
    this.#observeNext = false;
    const budget = read === 0 ? this.#first : this.#later;
    if (budget === undefined && !hooks.interruptible) {
      if (observing) return pull.then(this.#observeStepLast, this.#observeErrorLast);
      // The source's own promise: later reads go to the source, which answers in its order,
      // and whatever the watch adds to an answer only makes it later.
      this.#order.settled();
      return pull;
    }
    const observed = observing ? pull.then(this.#observeStep, this.#observeError) : pull;
    const turn = new Promise<Step<T>>(this.#openTurn);
    if (budget !== undefined) {
      this.#cancelTimer = startTimer(budget.ms, read === 0 ? this.#firstOverrun : this.#laterOverrun);
    }
    observed.then(this.#answered, this.#failed);
    return turn;
  }

  /** A read's budget ran out before its answer came. */
  #overrun(budget: ReadBudget): void {
    this.expire(this.#hooks.deadline(budget.phase, budget.ms));
  }

  /**
   * Starts the next read now, before anyone asks: its answer is what the next `next()`
   * returns, so nothing is lost or reordered. For a leg that must be read while its reader
   * is away. Does nothing once stopped or when a prefetched read is waiting.
   */
  prefetch(): void {
    if (this.#stopped || this.#prefetched !== undefined) return;
    this.#observeNext = this.#order.idle;
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
    this.#clearTurn(settle);
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
    this.#closed = true;
    if (this.#stopped) return;
    this.#stopped = true;
    // A pending read with a turn answers done now: the stream is over for its reader, and the
    // source may be stuck. (A read without a turn is the source's own and answers as it does.)
    const settle = this.#settleTurn;
    this.#clearTurn(settle);
    settle?.(DONE);
    if (this.#hooks.onClose === undefined) closeQuietly(this.#source);
    else this.#hooks.onClose(this.#source);
  }

  /** Ends the turn of `settle`'s read (its timer, and the read in progress for the call order). */
  #clearTurn(settle: ((step: Promise<Step<T>> | Step<T>) => void) | undefined): void {
    // Only the current turn: a late answer to one already settled must not end another's.
    if (settle === undefined || settle !== this.#settleTurn) return;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#settleTurn = undefined;
    this.#failTurn = undefined;
    this.#order.settled();
  }
}
