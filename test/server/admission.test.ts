import { afterEach, describe, expect, it, vi } from 'vitest';
import { Admission, OverloadedError, type Ticket } from '../../src/server/admission.js';

afterEach(() => {
  vi.useRealTimers();
});

const never = new Promise<never>(() => {});

/** A promise's state after the microtasks queued so far. */
async function state<T>(promise: Promise<T>): Promise<'pending' | 'fulfilled' | 'rejected'> {
  let seen: 'pending' | 'fulfilled' | 'rejected' = 'pending';
  promise.then(
    () => {
      seen = 'fulfilled';
    },
    () => {
      seen = 'rejected';
    },
  );
  await vi.advanceTimersByTimeAsync(0);
  return seen;
}

describe('Admission', () => {
  it('within maxConcurrent a request is admitted at once, having waited 0 s', async () => {
    vi.useFakeTimers();
    const waits: number[] = [];
    const admission = new Admission({
      maxConcurrent: 2,
      queueSize: 0,
      queueTimeoutMs: 1000,
      onWait: (s) => waits.push(s),
    });
    await admission.enter(never);
    await admission.enter(never);
    expect([admission.active, admission.queued, waits]).toEqual([2, 0, [0, 0]]);
    await expect(admission.enter(never)).rejects.toThrow(OverloadedError);
  });

  it('beyond the slots requests wait first come, first served; beyond the queue they are refused at once with Retry-After 1', async () => {
    vi.useFakeTimers();
    const waits: number[] = [];
    const admission = new Admission({
      maxConcurrent: 1,
      queueSize: 2,
      queueTimeoutMs: 10_000,
      onWait: (s) => waits.push(s),
    });
    await vi.advanceTimersByTimeAsync(1000); // the clock has run before: waits are measured from each entry
    const first = await admission.enter(never);
    const second = admission.enter(never);
    const third = admission.enter(never);
    expect([admission.active, admission.queued]).toEqual([1, 2]);
    const refused = await admission.enter(never).catch((error: unknown) => error);
    expect(OverloadedError.is(refused)).toBe(true);
    expect(refused).toMatchObject({
      code: 'DISAGG_OVERLOADED',
      retryAfterS: 1,
      message: 'The proxy is at capacity: 1 requests under way and 2 waiting; try again later',
    });
    await vi.advanceTimersByTimeAsync(1500);
    first.release();
    expect(await state(second)).toBe('fulfilled');
    expect(await state(third)).toBe('pending');
    expect([admission.active, admission.queued]).toEqual([1, 1]);
    expect(waits).toEqual([0, 1.5]);
    // A second release of the same ticket frees nothing more.
    first.release();
    expect(await state(third)).toBe('pending');
    expect(admission.active).toBe(1);
    (await second).release();
    expect(await state(third)).toBe('fulfilled');
    (await third).release();
    expect([admission.active, admission.queued]).toEqual([0, 0]);
    // Each admitted waiter's timer went with it: nothing left to keep the process busy.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a wait past queueTimeoutMs is refused, its Retry-After the limit in whole seconds (at least 1); it leaves the queue', async () => {
    vi.useFakeTimers();
    for (const [timeoutMs, retryAfterS] of [
      [2500, 3],
      [300, 1],
    ] as const) {
      const admission = new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: timeoutMs });
      const holder = await admission.enter(never);
      const waiting = admission.enter(never);
      const outcome = waiting.catch((error: unknown) => error);
      await vi.advanceTimersByTimeAsync(timeoutMs - 1);
      expect(await state(waiting)).toBe('pending');
      await vi.advanceTimersByTimeAsync(1);
      expect(await outcome).toMatchObject({
        code: 'DISAGG_OVERLOADED',
        retryAfterS,
        message: `The request waited ${timeoutMs} ms for one of 1 slots; try again later`,
      });
      expect(admission.queued).toBe(0);
      holder.release();
      expect(admission.active).toBe(0);
    }
  });

  for (const how of ['resolves', 'rejects'] as const) {
    it(`a waiter whose client leaves (gaveUp ${how}) leaves the queue at once: no place held, no slot taken, no timeout later`, async () => {
      vi.useFakeTimers();
      const admission = new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 1000 });
      const holder = await admission.enter(never);
      let leave: () => void = () => {};
      const gaveUp = new Promise<void>((resolve, reject) => {
        leave = how === 'resolves' ? resolve : () => reject(new Error('client left'));
      });
      const gone = admission.enter(gaveUp);
      leave();
      await vi.advanceTimersByTimeAsync(0);
      expect(admission.queued).toBe(0);
      expect(vi.getTimerCount()).toBe(0);
      const next = admission.enter(never);
      const nextSettled = next.then(
        () => 'fulfilled',
        () => 'rejected',
      );
      expect(admission.queued).toBe(1);
      await vi.advanceTimersByTimeAsync(2000);
      expect(await state(gone)).toBe('pending');
      expect(await nextSettled).toBe('rejected');
      holder.release();
      expect(admission.active).toBe(0);
    });
  }

  it('an admitted waiter is not refused later by its timer, and leaving after admission changes nothing', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 1000 });
    const holder = await admission.enter(never);
    let leave: () => void = () => {};
    const waiting = admission.enter(new Promise<void>((resolve) => (leave = resolve)));
    holder.release();
    const ticket: Ticket = await waiting;
    leave();
    await vi.advanceTimersByTimeAsync(5000);
    expect([admission.active, admission.queued]).toEqual([1, 0]);
    ticket.release();
    expect(admission.active).toBe(0);
  });

  it('a client that leaves after its admission does not take another waiter out of the queue', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 2, queueTimeoutMs: 1000 });
    const holder = await admission.enter(never);
    let leave: () => void = () => {};
    const first = admission.enter(new Promise<void>((resolve) => (leave = resolve)));
    const second = admission.enter(never);
    second.catch(() => {});
    holder.release();
    await first;
    leave();
    await vi.advanceTimersByTimeAsync(0);
    expect(admission.queued).toBe(1);
  });

  it('with no queue, a request beyond the slots is refused at once', async () => {
    const admission = new Admission({ maxConcurrent: 1, queueSize: 0, queueTimeoutMs: 1000 });
    await admission.enter(never);
    await expect(admission.enter(never)).rejects.toMatchObject({ retryAfterS: 1 });
    expect(admission.queued).toBe(0);
  });
});
