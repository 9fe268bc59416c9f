import type { DeadlineError } from './deadlines.js';

/**
 * Interrupts one await at a time with a deadline: `guard(p)` settles like `p` unless
 * `trip(error)` comes first. A promise guarded after the trip rejects at once. Only the
 * current await is reachable from here, never one per item.
 *
 * @internal
 */
export class Tripwire {
  error: DeadlineError | undefined;
  #reject: ((error: unknown) => void) | undefined;

  /** `work`, unless the wire trips first (then the trip's error). */
  guard<T>(work: PromiseLike<T>): Promise<T> {
    const guarded = new Promise<T>((resolve, reject) => {
      if (this.error !== undefined) reject(this.error);
      this.#reject = reject;
      Promise.resolve(work).then(resolve, reject);
    });
    const clear = () => {
      this.#reject = undefined;
    };
    guarded.then(clear, clear);
    return guarded;
  }

  /** Rejects the current guarded await with `error`, and every later one; the first trip wins. */
  trip(error: DeadlineError): void {
    if (this.error !== undefined) return;
    this.error = error;
    this.#reject?.(error);
  }
}
