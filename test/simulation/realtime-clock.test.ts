import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RealtimeClock } from '../../src/simulation/realtime-clock.js';
import { SimEngine } from '../../src/simulation/sim-engine.js';
import { type SimClock, VirtualClock } from '../../src/simulation/virtual-clock.js';
import { ARITHMETIC_PROFILE } from './sim-fixtures.js';

// Fake timers drive the wall: nothing here waits, and every time is the clock's own arithmetic.
beforeEach(() => {
  vi.useFakeTimers({ now: 0 });
});
afterEach(() => {
  vi.useRealTimers();
});

const wallMs = () => Date.now();

describe('a real-time clock runs virtual time `speedup` times faster than the wall', () => {
  it('an event 1,000 virtual ms ahead runs after 10 wall ms at a speed-up of 100, not before', () => {
    const clock = new RealtimeClock({ speedup: 100, wallMs });
    const ran: number[] = [];
    clock.after(1000, () => ran.push(clock.now));
    vi.advanceTimersByTime(9);
    expect(ran).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(ran).toEqual([1000]);
    clock.close();
  });

  it('now is the wall time since it was made times the speed-up', () => {
    vi.advanceTimersByTime(500);
    const clock = new RealtimeClock({ speedup: 4, wallMs });
    vi.advanceTimersByTime(25);
    expect(clock.now).toBe(100);
  });

  it('inside an event now is the time it was due, so a chain of steps keeps its times when timers run late', () => {
    const clock = new RealtimeClock({ speedup: 1000, wallMs });
    const times: number[] = [];
    // Steps of 0.3 virtual ms: far below a timer's resolution at this speed-up.
    const step = (left: number) => {
      times.push(clock.now);
      if (left > 0) clock.after(0.3, () => step(left - 1));
    };
    clock.after(10, () => step(4));
    vi.advanceTimersByTime(1);
    expect(times).toEqual([10, 10.3, 10.6, 10.9, 11.2].map((t) => expect.closeTo(t, 9)));
    clock.close();
  });

  it('events due at the same time run in the order they were scheduled', () => {
    const clock = new RealtimeClock({ speedup: 10, wallMs });
    const order: string[] = [];
    clock.at(50, () => order.push('a'));
    clock.at(20, () => order.push('b'));
    clock.at(50, () => order.push('c'));
    clock.at(20, () => order.push('d'));
    vi.advanceTimersByTime(5);
    expect(order).toEqual(['b', 'd', 'a', 'c']);
    clock.close();
  });

  it('now never goes back: an event due before a time already told runs at that time', () => {
    // A wall that runs ahead of the timers: the event loop was busy past the event's time.
    let wall = 0;
    const clock = new RealtimeClock({ speedup: 1, wallMs: () => wall });
    let seen: number | undefined;
    clock.at(5, () => {
      seen = clock.now;
    });
    wall = 8;
    expect(clock.now).toBe(8);
    vi.advanceTimersByTime(5);
    expect(seen).toBe(8);
    clock.close();
  });

  it('a time past runs as soon as it can, at now', () => {
    const clock = new RealtimeClock({ speedup: 1, wallMs });
    vi.advanceTimersByTime(30);
    let seen: number | undefined;
    clock.at(10, () => {
      seen = clock.now;
    });
    vi.advanceTimersByTime(0);
    expect(seen).toBe(30);
    clock.close();
  });

  it('close clears its timer: nothing pending runs, and nothing scheduled after runs', () => {
    const clock = new RealtimeClock({ speedup: 1, wallMs });
    const ran: string[] = [];
    clock.after(10, () => ran.push('before'));
    clock.close();
    clock.after(10, () => ran.push('after'));
    vi.advanceTimersByTime(100);
    expect(ran).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('its timer is unref’d unless asked to keep the process alive', () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const quiet = new RealtimeClock({ wallMs });
    quiet.after(10, () => {});
    const kept = new RealtimeClock({ wallMs, ref: true });
    kept.after(10, () => {});
    const [first, second] = spy.mock.results.map((result) => result.value as NodeJS.Timeout);
    expect(first?.hasRef()).toBe(false);
    expect(second?.hasRef()).toBe(true);
    quiet.close();
    kept.close();
    spy.mockRestore();
  });

  it('a speed-up that is not a positive number is refused', () => {
    expect(() => new RealtimeClock({ speedup: 0 })).toThrow(RangeError);
    expect(() => new RealtimeClock({ speedup: Number.NaN })).toThrow(RangeError);
    expect(() => new RealtimeClock({ speedup: -2 })).toThrow(RangeError);
  });

  it('a simulated engine on it keeps its profile’s time: a request’s tokens come at the virtual times a virtual clock gives', () => {
    const tokensOn = (clock: SimClock, run: () => void) => {
      const engine = new SimEngine({ profile: ARITHMETIC_PROFILE, clock });
      const tokens: number[] = [];
      engine.submit(
        { blocks: [1, 2], inputTokens: 1024, outputTokens: 4, kind: 'whole' },
        { token: (at) => tokens.push(at) },
      );
      run();
      return tokens;
    };
    const virtual = new VirtualClock();
    const expected = tokensOn(virtual, () => virtual.run());
    const clock = new RealtimeClock({ speedup: 50, wallMs });
    const live = tokensOn(clock, () => vi.advanceTimersByTime(10_000));
    clock.close();
    // 1,024 tokens of prefill (the profile's first point, 50 ms), then three decode steps.
    expect(expected).toHaveLength(4);
    expect(expected[0]).toBe(50);
    expect(live).toEqual(expected.map((at) => expect.closeTo(at, 9)));
  });
});

describe('run: an action handed to the clock sees one instant', () => {
  it('now does not move inside run however the wall does, and what it schedules is timed from that instant', () => {
    let wall = 0;
    const clock = new RealtimeClock({ speedup: 1000, wallMs: () => wall });
    const ran: number[] = [];
    const seen = clock.run(() => {
      const first = clock.now;
      wall += 0.5; // half a wall ms: 500 virtual ms at this speed-up
      clock.after(100, () => ran.push(clock.now));
      return [first, clock.now];
    });
    expect(seen).toEqual([0, 0]);
    wall = 1;
    vi.advanceTimersByTime(1);
    expect(ran).toEqual([100]);
    expect(clock.now).toBe(1000);
    clock.close();
  });
});

describe('a far event', () => {
  it('an event further than a Node timer can wait is armed for the longest wait Node takes, and runs at its time', () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const clock = new RealtimeClock({ speedup: 1, wallMs });
    const ran: number[] = [];
    const far = 2 ** 31 + 1000;
    clock.at(far, () => ran.push(clock.now));
    // Node fires a longer timer at once (TimeoutOverflowWarning): the clock would spin.
    expect(spy.mock.calls.map(([, delay]) => delay)).toEqual([2 ** 31 - 1]);
    vi.advanceTimersByTime(far);
    expect(ran).toEqual([far]);
    clock.close();
    spy.mockRestore();
  });
});
