import { afterEach, describe, expect, it, vi } from 'vitest';
import { Admission, OverloadedError, type Ticket } from '../../../src/server/pipeline/admission.js';

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

describe('Admission by priority, fair between tenants', () => {
  /** Requests that record the order they were admitted in. */
  function recorder(admission: Admission) {
    const order: string[] = [];
    const tickets: Ticket[] = [];
    const ask = (name: string, tenant: string, priority = 0, maxConcurrent?: number) => {
      const entered = admission.enter(never, { tenant, priority, maxConcurrent });
      entered.then(
        (ticket) => {
          order.push(name);
          tickets.push(ticket);
        },
        () => {},
      );
      return entered;
    };
    /** Frees the oldest slot still held and lets the next waiter in. */
    const freeOne = async () => {
      tickets.shift()?.release();
      await vi.advanceTimersByTimeAsync(0);
    };
    return { order, ask, freeOne };
  }

  it('a high-priority request is admitted ahead of a full low-priority queue', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 10, queueTimeoutMs: 60_000 });
    const { order, ask, freeOne } = recorder(admission);
    ask('batch-0', 'batch');
    for (let i = 1; i <= 5; i++) ask(`batch-${i}`, 'batch');
    ask('chat', 'chat', 10);
    await vi.advanceTimersByTimeAsync(0);
    await freeOne();
    expect(order).toEqual(['batch-0', 'chat']);
  });

  it("within a band the tenants take turns: one tenant's backlog does not hold another's request behind it", async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 100, queueTimeoutMs: 60_000 });
    const { order, ask, freeOne } = recorder(admission);
    ask('a0', 'a');
    for (let i = 1; i <= 20; i++) ask(`a${i}`, 'a');
    ask('b1', 'b');
    ask('b2', 'b');
    ask('c1', 'c');
    await vi.advanceTimersByTimeAsync(0);
    for (let i = 0; i < 6; i++) await freeOne();
    // a's oldest, then b and c in their turns, a's next only once each had one.
    expect(order).toEqual(['a0', 'a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
  });

  it("a full queue sheds the newest waiter of the lowest band below the newcomer's, from the tenant with most waiting", async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 3, queueTimeoutMs: 60_000 });
    const { ask } = recorder(admission);
    ask('held', 'x');
    const low1 = ask('low-1', 'a', 0);
    const low2 = ask('low-2', 'a', 0);
    const lowB = ask('low-b', 'b', 0);
    // Same priority as the waiters: refused, nothing shed.
    await expect(ask('same', 'c', 0)).rejects.toThrow(/at capacity: 1 requests under way and 3 waiting/);
    await expect(ask('same-again', 'c', 0)).rejects.toMatchObject({ limit: 'capacity', retryAfterS: 1 });
    const high = ask('high', 'c', 5);
    await expect(low2).rejects.toThrow(/gave this request's place to one of higher priority \(5 over 0\)/);
    await expect(low2).rejects.toMatchObject({ limit: 'shed' });
    expect(await state(low1)).toBe('pending');
    expect(await state(lowB)).toBe('pending');
    expect(await state(high)).toBe('pending');
    expect(admission.queued).toBe(3);
  });

  it('of tenants with as many waiting in the band to shed from, the one that has waited there longest gives up its newest', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 4, queueTimeoutMs: 60_000 });
    const { ask } = recorder(admission);
    ask('held', 'x');
    const a1 = ask('a-1', 'a', 0);
    const b1 = ask('b-1', 'b', 0);
    const a2 = ask('a-2', 'a', 0);
    const b2 = ask('b-2', 'b', 0);
    const high = ask('high', 'c', 5);
    await expect(a2).rejects.toMatchObject({ limit: 'shed' });
    for (const waiting of [a1, b1, b2, high]) expect(await state(waiting)).toBe('pending');
  });

  it('keeps a record only of tenants with requests under way or waiting: names come and go without piling up', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 10, queueTimeoutMs: 60_000 });
    for (let i = 0; i < 50; i++)
      (await admission.enter(never, { tenant: `gateway-named-${i}`, priority: 0 })).release();
    expect(admission.tenantRecords).toBe(0);
    const held = await admission.enter(never, { tenant: 'a', priority: 0 });
    let leave: () => void = () => {};
    const leaving = admission.enter(new Promise<void>((resolve) => (leave = resolve)), { tenant: 'b', priority: 0 });
    leaving.catch(() => {});
    const waiting = admission.enter(never, { tenant: 'c', priority: 0 });
    expect(admission.tenantRecords).toBe(3);
    // a's second request waits too, and leaves: a still has one under way, and its record.
    let aLeaves: () => void = () => {};
    admission.enter(new Promise<void>((resolve) => (aLeaves = resolve)), { tenant: 'a', priority: 0 }).catch(() => {});
    leave();
    aLeaves();
    await vi.advanceTimersByTimeAsync(0);
    expect([admission.tenantRecords, admission.usageOf('b'), admission.usageOf('a')]).toEqual([
      2,
      { active: 0, queued: 0 },
      { active: 1, queued: 0 },
    ]);
    held.release();
    (await waiting).release();
    expect(admission.tenantRecords).toBe(0);
  });

  it('a request without an applicant is the default tenant at priority 0', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 60_000 });
    await admission.enter(never);
    expect(admission.usageOf('default')).toEqual({ active: 1, queued: 0 });
    const waiting = admission.enter(never);
    expect(admission.usageOf('default')).toEqual({ active: 1, queued: 1 });
    // A higher band sheds it: it waited at 0.
    admission.enter(never, { tenant: 'other', priority: 1 }).catch(() => {});
    await expect(waiting).rejects.toMatchObject({ limit: 'shed' });
  });

  it('a waiter let in counts for its tenant as under way, no longer as waiting', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 10, queueTimeoutMs: 60_000 });
    const { ask, freeOne } = recorder(admission);
    ask('held', 'x');
    ask('a1', 'a', 0, 2);
    ask('a2', 'a', 0, 2);
    await vi.advanceTimersByTimeAsync(0);
    await freeOne();
    expect(admission.usageOf('a')).toEqual({ active: 1, queued: 1 });
    await freeOne();
    expect(admission.usageOf('a')).toEqual({ active: 1, queued: 0 });
    // Its limit counts what it has now: one under way, so one more may wait.
    expect(await state(ask('a3', 'a', 0, 2))).toBe('pending');
    await expect(ask('a4', 'a', 0, 2)).rejects.toMatchObject({ limit: 'max_concurrent' });
  });

  it("a waiter that leaves keeps its tenant's other waiters in their turn", async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 10, queueTimeoutMs: 60_000 });
    const held = await admission.enter(never, { tenant: 'x', priority: 0 });
    let leave = () => {};
    const gone = new Promise<void>((resolve) => {
      leave = resolve;
    });
    const first = admission.enter(gone, { tenant: 'a', priority: 0 });
    const second = admission.enter(never, { tenant: 'a', priority: 0 });
    leave();
    await vi.advanceTimersByTimeAsync(0);
    expect(admission.queued).toBe(1);
    held.release();
    expect(await state(second)).toBe('fulfilled');
    expect(await state(first)).toBe('pending');
    expect(admission.usageOf('a')).toEqual({ active: 1, queued: 0 });
  });

  it('a lowest band of a single waiter is shed for a higher one', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 60_000 });
    const { ask } = recorder(admission);
    ask('held', 'x');
    const low = ask('low', 'a', 0);
    const high = ask('high', 'b', 5);
    await expect(low).rejects.toMatchObject({ limit: 'shed' });
    expect(await state(high)).toBe('pending');
    expect([admission.queued, admission.usageOf('a'), admission.usageOf('b')]).toEqual([
      1,
      { active: 0, queued: 0 },
      { active: 0, queued: 1 },
    ]);
  });

  it('a tenant at its own limit (under way and waiting) is refused at once, naming the limit', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 1, queueSize: 10, queueTimeoutMs: 60_000 });
    const { ask } = recorder(admission);
    ask('a1', 'a', 0, 2);
    ask('a2', 'a', 0, 2);
    await expect(ask('a3', 'a', 0, 2)).rejects.toThrow('Tenant a is at its limit of 2 requests under way or waiting');
    expect(admission.usageOf('a')).toEqual({ active: 1, queued: 1 });
    expect(await state(ask('b1', 'b', 0, 2))).toBe('pending');
  });

  it("each band waits as long as its own time-to-live; the waits are reported with the request's tenant", async () => {
    vi.useFakeTimers();
    const waits: Array<[number, string]> = [];
    const admission = new Admission({
      maxConcurrent: 1,
      queueSize: 10,
      queueTimeoutMs: (priority) => (priority > 0 ? 5000 : 1000),
      onWait: (seconds, applicant) => waits.push([seconds, applicant.tenant]),
    });
    const held = await admission.enter(never, { tenant: 'x', priority: 0 });
    const low = admission.enter(never, { tenant: 'a', priority: 0 });
    const high = admission.enter(never, { tenant: 'b', priority: 1 });
    low.catch(() => {});
    await vi.advanceTimersByTimeAsync(1000);
    await expect(low).rejects.toMatchObject({ retryAfterS: 1, limit: 'queue_timeout' });
    expect(await state(high)).toBe('pending');
    await vi.advanceTimersByTimeAsync(1000);
    held.release();
    await high;
    expect(waits).toEqual([
      [0, 'x'],
      [2, 'b'],
    ]);
    expect(admission.usageOf('a')).toEqual({ active: 0, queued: 0 });
  });
});

describe('Admission under any arrival, release and departure order', () => {
  it('never serves more than its slots nor leaves one free while someone waits, admits each request at most once, never a lower band while a higher one waits', async () => {
    const { default: fc } = await import('fast-check');
    const { propertyOptions } = await import('../../support/property.js');
    const step = fc.oneof(
      fc.record({
        kind: fc.constant('arrive' as const),
        tenant: fc.constantFrom('a', 'b', 'c'),
        priority: fc.constantFrom(0, 5),
      }),
      fc.record({ kind: fc.constant('release' as const) }),
      fc.record({ kind: fc.constant('leave' as const), which: fc.nat(20) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 40 }), async (steps) => {
        vi.useFakeTimers();
        const admission = new Admission({ maxConcurrent: 2, queueSize: 6, queueTimeoutMs: 60_000 });
        const held: Ticket[] = [];
        const waiting: Array<{ priority: number; settled: boolean; leave: () => void }> = [];
        let admittedTwice = false;
        for (const each of steps) {
          if (each.kind === 'arrive') {
            let leave = () => {};
            const gaveUp = new Promise<void>((resolve) => (leave = resolve));
            const entry = { priority: each.priority, settled: false, leave };
            waiting.push(entry);
            admission.enter(gaveUp, { tenant: each.tenant, priority: each.priority }).then(
              (ticket) => {
                if (entry.settled) admittedTwice = true;
                entry.settled = true;
                // A higher band must not still be waiting when a lower one is admitted.
                const higherWaits = waiting.some((other) => !other.settled && other.priority > entry.priority);
                if (higherWaits) admittedTwice = true;
                held.push(ticket);
              },
              () => {
                entry.settled = true;
              },
            );
          } else if (each.kind === 'release') held.shift()?.release();
          else {
            const entry = waiting.filter((candidate) => !candidate.settled)[each.which % Math.max(1, waiting.length)];
            if (entry !== undefined) {
              entry.settled = true;
              entry.leave();
            }
          }
          await vi.advanceTimersByTimeAsync(0);
          expect(admission.active).toBeLessThanOrEqual(2);
          expect(admission.queued).toBeLessThanOrEqual(6);
          expect(admission.active).toBe(held.length);
          // A free slot is never left while someone waits: enter() admits at once on that rule.
          if (admission.active < 2) expect(admission.queued).toBe(0);
        }
        expect(admittedTwice).toBe(false);
        vi.useRealTimers();
      }),
      propertyOptions(200, 41),
    );
  });
});
