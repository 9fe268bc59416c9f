import type { Logger } from '../runtime/logger.js';
import { PrefillError } from './prefill-error.js';

export const PENDING = 0;
export const SUCCEEDED = 1;
export const FAILED = 2;
export type PrefillState = typeof PENDING | typeof SUCCEEDED | typeof FAILED;

/**
 * The settled state of one prefill, readable synchronously, with wake-ups for whoever is
 * racing it.
 *
 * This is the single subscription to the prefill promise. Streams that race prefill do not
 * subscribe to that long-lived promise (a per-item `Promise.race` against it would leave one
 * reaction per item on it until it settles); they register one listener each here, once, and
 * read `state` synchronously, which is also what makes every race biased toward prefill.
 *
 * @internal
 */
export class PrefillOutcome {
  state: PrefillState = PENDING;
  error: PrefillError | undefined;
  /** Resolves (never rejects) once the state is final and every listener has been woken. */
  readonly settled: Promise<void>;
  #listeners: Set<() => void> | undefined = new Set();

  constructor(work: PromiseLike<unknown>, logger: Logger, level: 'warn' | 'debug' = 'warn') {
    this.settled = Promise.resolve(work).then(
      () => this.#settle(SUCCEEDED),
      (reason: unknown) => {
        const error = PrefillError.from(reason);
        this.error = error;
        // Logged here, once, so a failure nobody awaits any more still leaves evidence.
        try {
          logger[level]({ err: error }, 'Prefill background task failed');
        } catch {
          // A broken logger must not turn a prefill failure into an unhandled rejection.
        }
        this.#settle(FAILED);
      },
    );
  }

  /** Calls `listener` once when prefill settles; does nothing if it has settled already. */
  listen(listener: () => void): void {
    this.#listeners?.add(listener);
  }

  unlisten(listener: () => void): void {
    this.#listeners?.delete(listener);
  }

  /** How many streams are waiting on this prefill (for the leak tests). */
  get listenerCount(): number {
    return this.#listeners?.size ?? 0;
  }

  // Runs once: the prefill promise settles once.
  #settle(state: PrefillState): void {
    this.state = state;
    const listeners = this.#listeners as Set<() => void>;
    // Dropped so that nothing a stream registered stays reachable from a settled task.
    this.#listeners = undefined;
    for (const listener of listeners) listener();
  }
}
