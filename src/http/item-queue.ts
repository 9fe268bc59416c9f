/**
 * The pull side of a response body: items queued as they are parsed, taken by readers in call
 * order (a reader with several calls in flight gets them in the order it asked). The queue
 * knows nothing of HTTP or OpenAI: it says how far readers are behind ({@link backlog}) and
 * asks for more when a reader waits ({@link ItemQueueOptions.demand}), so that its owner can
 * pause and resume the socket.
 *
 * @internal
 */
export class ItemQueue<T> {
  #items: T[] = [];
  #at = 0;
  /** Calls waiting for an item, first asked first: there are some only while no item is delivered. */
  readonly #waiting: Array<(step: IteratorResult<T, undefined>) => void> = [];
  /** No item will be added. */
  #finished = false;
  /** Closed by its reader: later calls are done at once. */
  #closed = false;
  readonly #demand: () => void;
  readonly #lowWater: number;

  /**
   * `demand` is called when a reader takes an item and at most `lowWater` are left, or waits
   * for one: the owner may read more.
   */
  constructor(options: { demand: () => void; lowWater: number }) {
    this.#demand = options.demand;
    this.#lowWater = options.lowWater;
  }

  /** Items queued and not yet taken. */
  get backlog(): number {
    return this.#items.length - this.#at;
  }

  /** Whether no item will be added any more (finished, or closed). */
  get finished(): boolean {
    return this.#finished;
  }

  /** Queues an item; readers waiting get it at the next {@link deliver}. */
  push(item: T): void {
    this.#items.push(item);
  }

  /** No item will be added: readers get done once the queue is empty. */
  finish(): void {
    this.#finished = true;
  }

  /**
   * The next item, in call order; done once finished and empty, or closed. A call made while
   * earlier ones still wait (items pushed and not yet delivered) waits behind them.
   */
  next(): Promise<IteratorResult<T, undefined>> {
    if (this.#closed) return Promise.resolve(DONE as IteratorResult<T, undefined>);
    if (this.#waiting.length === 0) {
      if (this.#at < this.#items.length) {
        const value = this.#take();
        // Half way down, so that a reader just behind does not pause and resume on every item.
        if (this.#items.length - this.#at <= this.#lowWater) this.#demand();
        return Promise.resolve({ value, done: false });
      }
      if (this.#finished) return Promise.resolve(DONE as IteratorResult<T, undefined>);
    }
    const read = new Promise<IteratorResult<T, undefined>>((resolve) => {
      this.#waiting.push(resolve);
    });
    this.#demand();
    if (this.#at < this.#items.length || this.#finished) this.deliver();
    return read;
  }

  /** Answers waiting calls with what is queued, and with done once nothing more will come. */
  deliver(): void {
    const waiting = this.#waiting;
    while (waiting.length > 0 && this.#at < this.#items.length) {
      (waiting.shift() as (step: IteratorResult<T, undefined>) => void)({ value: this.#take(), done: false });
    }
    if (this.#finished && this.#at === this.#items.length) {
      for (const resolve of waiting.splice(0)) resolve(DONE as IteratorResult<T, undefined>);
    }
  }

  /** The reader is done: what is queued is dropped, reads in flight answer done in call order. */
  close(): void {
    this.#closed = true;
    this.#finished = true;
    this.#items = [];
    this.#at = 0;
    for (const resolve of this.#waiting.splice(0)) resolve(DONE as IteratorResult<T, undefined>);
  }

  #take(): T {
    const value = this.#items[this.#at++] as T;
    if (this.#at === this.#items.length) {
      this.#items = [];
      this.#at = 0;
    }
    return value;
  }
}

const DONE: IteratorResult<never, undefined> = Object.freeze({ value: undefined, done: true });
