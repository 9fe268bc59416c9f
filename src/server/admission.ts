import { branded, DisaggError } from '../util/disagg-error.js';

/**
 * A request the proxy would not take on: every slot busy and the queue full, or a wait in the
 * queue past its limit. Answered 429 with `Retry-After` (`retryAfterS`). `code`:
 * `DISAGG_OVERLOADED`.
 */
export class OverloadedError extends DisaggError {
  static override readonly is = branded<OverloadedError>('OverloadedError');
  declare readonly code: 'DISAGG_OVERLOADED';
  /** When the client may try again, in whole seconds. */
  readonly retryAfterS: number;

  constructor(message: string, retryAfterS: number) {
    super('DISAGG_OVERLOADED', message);
    this.retryAfterS = retryAfterS;
  }
}

/** A place taken in {@link Admission}: `release()` once the request is over (idempotent). */
export interface Ticket {
  release(): void;
}

interface Waiter {
  admit(ticket: Ticket): void;
  timer: NodeJS.Timeout | undefined;
  queuedAt: number;
}

/**
 * Bounded admission: at most `maxConcurrent` requests served at once, at most `queueSize`
 * waiting for a slot (first come, first served), each for at most `queueTimeoutMs`. Beyond
 * that a request is refused at once with an {@link OverloadedError}. A waiter that gives up
 * (its client left) leaves the queue at once, so it neither takes a place nor a slot later.
 * Written here rather than with cockatiel 3's bulkhead: that one keeps a cancelled waiter in
 * its queue until its turn, has no wait limit, and stalls its queue when a cancelled waiter
 * comes up.
 *
 * @internal
 */
export class Admission {
  readonly #max: number;
  readonly #queueSize: number;
  readonly #timeoutMs: number;
  readonly #onWait: ((seconds: number) => void) | undefined;
  #active = 0;
  readonly #queue: Waiter[] = [];

  constructor(options: {
    maxConcurrent: number;
    queueSize: number;
    queueTimeoutMs: number;
    /** How long each admitted request waited in the queue (0 for none). */
    onWait?: (seconds: number) => void;
  }) {
    this.#max = options.maxConcurrent;
    this.#queueSize = options.queueSize;
    this.#timeoutMs = options.queueTimeoutMs;
    this.#onWait = options.onWait;
  }

  /** Requests being served. */
  get active(): number {
    return this.#active;
  }

  /** The limits it admits by. */
  get limits(): { maxConcurrent: number; queueSize: number } {
    return { maxConcurrent: this.#max, queueSize: this.#queueSize };
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * A slot for one request: at once if one is free, else after a wait in the queue.
   * `gaveUp` resolving (the client left) takes the request out of the queue; the promise then
   * never settles, as nobody waits for it.
   *
   * @throws {OverloadedError} (rejects) when the queue is full or the wait runs past its limit.
   */
  enter(gaveUp: Promise<unknown>): Promise<Ticket> {
    if (this.#active < this.#max) {
      this.#active += 1;
      this.#onWait?.(0);
      return Promise.resolve(this.#ticket());
    }
    if (this.#queue.length >= this.#queueSize) {
      return Promise.reject(
        new OverloadedError(
          `The proxy is at capacity: ${this.#max} requests under way and ${this.#queueSize} waiting; try again later`,
          1,
        ),
      );
    }
    return new Promise<Ticket>((resolve, reject) => {
      const waiter: Waiter = {
        admit: resolve,
        timer: undefined,
        queuedAt: performance.now(),
      };
      waiter.timer = setTimeout(() => {
        if (!this.#leave(waiter)) return;
        reject(
          new OverloadedError(
            `The request waited ${this.#timeoutMs} ms for one of ${this.#max} slots; try again later`,
            Math.max(1, Math.ceil(this.#timeoutMs / 1000)),
          ),
        );
      }, this.#timeoutMs);
      this.#queue.push(waiter);
      gaveUp.then(
        () => this.#leave(waiter),
        () => this.#leave(waiter),
      );
    });
  }

  /** Takes `waiter` out of the queue; false if it was not there any more (admitted or gone). */
  #leave(waiter: Waiter): boolean {
    const at = this.#queue.indexOf(waiter);
    if (at === -1) return false;
    this.#queue.splice(at, 1);
    clearTimeout(waiter.timer);
    return true;
  }

  #ticket(): Ticket {
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#active -= 1;
        this.#next();
      },
    };
  }

  /** A slot came free: the first waiter takes it. */
  #next(): void {
    const waiter = this.#queue.shift();
    if (waiter === undefined) return;
    clearTimeout(waiter.timer);
    this.#active += 1;
    this.#onWait?.((performance.now() - waiter.queuedAt) / 1000);
    waiter.admit(this.#ticket());
  }
}
