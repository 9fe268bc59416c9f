/**
 * Answers an iterator's `next()` calls in the order they were made, for readers with several
 * calls in flight (stream adapters, `Promise.all` batches, read-ahead buffers), at no cost to
 * a reader that waits for each answer before asking again.
 *
 * A call reads at once when no earlier call is still waiting for its answer. Otherwise it reads
 * only after the answer to the call before it has settled, so its own answer can never come
 * first, and no two reads of an iterator that handles one at a time ever overlap. The
 * iterator reports the end of a read it started at once by calling `settled()` from a callback
 * it runs anyway (the `then` that turns the source's answer into its own), so the common path
 * adds no promise; only a queued call adds one `then` to know when it has settled.
 *
 * Calls made after the iterator was closed are not queued: the iterator answers them `done`
 * at once, so that a read stuck below can never hold them.
 *
 * @example
 * readonly #order = new CallOrder(() => this.#read());
 * next() { return this.#closed ? Promise.resolve(DONE) : this.#order.call(); }
 * // ...and in #read's own settle callback: this.#order.settled();
 *
 * @internal
 */
export class CallOrder<S> {
  readonly #read: () => Promise<S>;
  /** A read started at once has not reported its end yet. */
  #reading = false;
  /** Calls that were queued and have not settled yet. */
  #queued = 0;
  /** The answer of the last call made. */
  #last: Promise<S> | undefined;
  readonly #dequeued = (): void => {
    this.#queued -= 1;
  };

  /** `read` does one read; it must not throw (a failure is a rejected promise). */
  constructor(read: () => Promise<S>) {
    this.#read = read;
  }

  /** Whether a call would read at once: no earlier call is waiting for its answer. */
  get idle(): boolean {
    return !this.#reading && this.#queued === 0;
  }

  /** Reads now, or after the last call's answer: the answer to this call. */
  call(): Promise<S> {
    let answer: Promise<S>;
    if (this.idle) {
      this.#reading = true;
      answer = this.#read();
    } else {
      answer = (this.#last as Promise<S>).then(this.#read, this.#read);
      this.#queued += 1;
      answer.then(this.#dequeued, this.#dequeued);
    }
    this.#last = answer;
    return answer;
  }

  /** The read in progress has its answer (also called, harmlessly, by queued reads). */
  settled(): void {
    this.#reading = false;
  }
}
