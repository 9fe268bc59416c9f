// Time in a replay is a number that jumps from one event to the next: nothing waits on a real
// timer, so a trace of an hour replays as fast as its events can be handled. Events at the
// same instant run in the order they were scheduled, which makes a replay the same on every
// run for a seed.

import { MinHeap } from './min-heap.js';

/**
 * The time a simulated engine keeps: a {@link VirtualClock} in a replay, real timers (sped up)
 * for live fake workers. Times in ms.
 */
export interface SimClock {
  /** The current time. */
  readonly now: number;
  /** Runs `run` at `atMs` (now, for a time past). */
  at(atMs: number, run: () => void): void;
  /** Runs `run` `delayMs` from now. */
  after(delayMs: number, run: () => void): void;
}

/** One scheduled action: its time, the order it was scheduled in, and what it does. */
interface Timed {
  readonly at: number;
  readonly seq: number;
  readonly run: () => void;
}

/**
 * A virtual clock and its queue of events (a binary heap on time, then scheduling order).
 * `now` is the time of the event being run; {@link run} runs events until none is left or the
 * clock passes `untilMs`.
 *
 * @example
 * const clock = new VirtualClock();
 * clock.at(5, () => clock.after(10, () => {})); // runs at 5, then schedules for 15
 * clock.run(); // clock.now === 15
 */
export class VirtualClock implements SimClock {
  #now = 0;
  #seq = 0;
  readonly #heap = new MinHeap<Timed>(before);

  /** The current time, in ms from the replay's start. */
  get now(): number {
    return this.#now;
  }

  /** Events not run yet. */
  get pending(): number {
    return this.#heap.size;
  }

  /**
   * Schedules `run` at `atMs` (never before now: a time in the past runs now, after what is
   * already scheduled for now).
   *
   * @throws {RangeError} for a time that is not a finite number.
   */
  at(atMs: number, run: () => void): void {
    if (!Number.isFinite(atMs)) throw new RangeError(`An event's time must be a finite number, got ${atMs}`);
    this.#heap.push({ at: Math.max(atMs, this.#now), seq: this.#seq++, run });
  }

  /** Schedules `run` `delayMs` from now. */
  after(delayMs: number, run: () => void): void {
    this.at(this.#now + delayMs, run);
  }

  /**
   * Runs events in time order until none is left, or until the next is later than `untilMs`
   * (the clock then stands at `untilMs`). Returns the number run.
   */
  run(untilMs = Number.POSITIVE_INFINITY): number {
    let ran = 0;
    for (let next = this.#heap.peek(); next !== undefined; next = this.#heap.peek()) {
      if (next.at > untilMs) {
        this.#now = untilMs;
        return ran;
      }
      this.#heap.pop();
      this.#now = next.at;
      next.run();
      ran++;
    }
    return ran;
  }

  /**
   * Runs the next event, if any: what a driver that must await between events (a router's
   * asynchronous verdict) steps with. False once none is left.
   */
  step(): boolean {
    const next = this.#heap.pop();
    if (next === undefined) return false;
    this.#now = next.at;
    next.run();
    return true;
  }

  /** The time of the next event, or undefined when none is left. */
  get nextAt(): number | undefined {
    return this.#heap.peek()?.at;
  }
}

function before(a: Timed, b: Timed): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
