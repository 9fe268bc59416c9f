// Time for a simulated engine behind a live server: virtual ms that advance `speedup` times
// faster than the wall's, its events run by real timers. The events wait in a queue of their
// own (a VirtualClock's) under one timer for the earliest, so that events due at the same
// instant run in the order they were scheduled, and those a late timer finds overdue all run
// at once, in order. Inside an event `now` is the time it was due, not the later moment its
// timer fired: a chain of steps (each scheduled `after` the one before) keeps the profile's
// times exactly even where the wall's timers cannot keep up with a large speed-up.

import type { SimClock } from './virtual-clock.js';
import { VirtualClock } from './virtual-clock.js';

/** Options of {@link RealtimeClock}. */
export interface RealtimeClockOptions {
  /** Virtual ms per wall ms; 1 (real time) by default. Must be a positive finite number. */
  readonly speedup?: number | undefined;
  /** The wall clock in ms (`performance.now` by default): a test gives fake timers' `Date.now`. */
  readonly wallMs?: (() => number) | undefined;
  /**
   * Whether its timer keeps the process alive; false by default (a server holds the process
   * alive; a clock with steps pending must not keep a closed one from exiting).
   */
  readonly ref?: boolean | undefined;
}

/** The longest delay a Node timer takes (a longer one fires at once): a far event re-arms on the way. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Events run per timer before the rest wait for the next turn of the event loop (sockets get theirs). */
const EVENTS_PER_TURN = 10_000;

/**
 * A {@link SimClock} on real timers, sped up: `now` is the wall time since it was made times
 * `speedup`, never going back; `at` and `after` run on a timer at the wall time their virtual
 * time falls on. {@link close} clears its timer, and it schedules nothing after.
 *
 * @throws {RangeError} from the constructor for a speed-up that is not a positive finite number.
 * @example
 * const clock = new RealtimeClock({ speedup: 100 });
 * clock.after(1000, () => {}); // runs 10 ms of wall time from now
 * clock.close();
 */
export class RealtimeClock implements SimClock {
  /** Virtual ms per wall ms. */
  readonly speedup: number;
  readonly #queue = new VirtualClock();
  readonly #wallMs: () => number;
  readonly #origin: number;
  readonly #ref: boolean;
  /** The latest time it has told: `now` never goes back. */
  #floor = 0;
  #firing = false;
  #closed = false;
  #timer: NodeJS.Timeout | undefined;
  /** The virtual time the armed timer fires for. */
  #armedFor = Number.POSITIVE_INFINITY;

  constructor(options: RealtimeClockOptions = {}) {
    const speedup = options.speedup ?? 1;
    if (!(Number.isFinite(speedup) && speedup > 0)) {
      throw new RangeError(`A clock's speed-up must be a positive number, got ${speedup}`);
    }
    this.speedup = speedup;
    this.#wallMs = options.wallMs ?? (() => performance.now());
    this.#origin = this.#wallMs();
    this.#ref = options.ref ?? false;
  }

  /** Virtual ms since it was made: inside an event, the time that event was due. */
  get now(): number {
    if (!this.#firing) this.#floor = Math.max(this.#floor, this.#wallNow());
    return this.#floor;
  }

  /** Events not run yet. */
  get pending(): number {
    return this.#queue.pending;
  }

  /**
   * Runs `run` at virtual time `atMs` (as soon as it can for a time past). Ignored once closed.
   *
   * @throws {RangeError} for a time that is not a finite number.
   */
  at(atMs: number, run: () => void): void {
    if (!Number.isFinite(atMs)) throw new RangeError(`An event's time must be a finite number, got ${atMs}`);
    if (this.#closed) return;
    this.#queue.at(Math.max(atMs, this.now), () => {
      // Due before a time already told (an arrival read the wall past it): runs at that time.
      this.#floor = Math.max(this.#floor, this.#queue.now);
      run();
    });
    if (!this.#firing) this.#arm();
  }

  /** Runs `run` `delayMs` virtual ms from now. */
  after(delayMs: number, run: () => void): void {
    this.at(this.now + delayMs, run);
  }

  /**
   * Runs `action` at once with `now` fixed for its duration, as inside an event: a request
   * handed to an engine is timed from one instant, however many times the engine reads the
   * clock (at a large speed-up a microsecond of wall time is a virtual millisecond). Returns
   * what `action` returns.
   */
  run<T>(action: () => T): T {
    if (this.#firing) return action();
    this.#floor = Math.max(this.#floor, this.#wallNow());
    this.#firing = true;
    try {
      return action();
    } finally {
      this.#firing = false;
      this.#arm();
    }
  }

  /** Clears its timer and drops what is pending; it schedules nothing after. */
  close(): void {
    this.#closed = true;
    this.#disarm();
  }

  #wallNow(): number {
    return (this.#wallMs() - this.#origin) * this.speedup;
  }

  /** Its timer set for the earliest event (kept when it is already set for that time or sooner). */
  #arm(): void {
    const next = this.#queue.nextAt;
    if (next === undefined || this.#closed) {
      this.#disarm();
      return;
    }
    if (this.#timer !== undefined && this.#armedFor <= next) return;
    this.#disarm();
    this.#armedFor = next;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, (next - this.#wallNow()) / this.speedup));
    this.#timer = setTimeout(() => this.#fire(), delay);
    if (!this.#ref) this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Number.POSITIVE_INFINITY;
  }

  /** Runs every event due by the wall's time, in order (those they schedule for then too). */
  #fire(): void {
    this.#timer = undefined;
    this.#armedFor = Number.POSITIVE_INFINITY;
    const until = Math.max(this.#wallNow(), this.#floor);
    this.#firing = true;
    try {
      for (let ran = 0; ran < EVENTS_PER_TURN && !this.#closed; ran++) {
        const next = this.#queue.nextAt;
        if (next === undefined || next > until) break;
        this.#queue.step();
      }
    } finally {
      this.#firing = false;
      this.#arm();
    }
  }
}
