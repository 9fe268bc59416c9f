import { afterEach, describe, expect, it, vi } from 'vitest';
import { Admission, type Applicant, PreemptedError, type Ticket } from '../../../src/server/pipeline/admission.js';
import { errorAnswer } from '../../../src/server/pipeline/error-answers.js';

afterEach(() => {
  vi.useRealTimers();
});

const never = new Promise<never>(() => {});

/** Requests of a one-slot (or `maxConcurrent`) admission that record which of them were preempted, and by what. */
function preemptible(options: { maxConcurrent?: number; queueSize?: number; preempt?: boolean } = {}) {
  const admission = new Admission({
    maxConcurrent: options.maxConcurrent ?? 1,
    queueSize: options.queueSize ?? 10,
    queueTimeoutMs: 60_000,
    preempt: options.preempt ?? true,
  });
  const preempted: Array<{ name: string; error: PreemptedError }> = [];
  const tickets = new Map<string, Ticket>();
  /** A request of `tenant` at `priority`; preemptible unless `callback` is false. */
  const enter = (name: string, tenant: string, priority: number, callback = true): Promise<Ticket> => {
    const applicant: Applicant = {
      tenant,
      priority,
      ...(callback ? { preempt: (error: PreemptedError) => preempted.push({ name, error }) } : {}),
    };
    const entered = admission.enter(never, applicant);
    entered.then(
      (ticket) => tickets.set(name, ticket),
      () => {},
    );
    return entered;
  };
  return { admission, preempted, tickets, enter };
}

describe('Admission with preemption', () => {
  it('a request of higher priority finding every slot busy takes at once the slot of the newest request of the lowest band under way', async () => {
    const { admission, preempted, enter } = preemptible({ maxConcurrent: 4 });
    await enter('low-old', 'batch', 0);
    await enter('mid', 'chat', 5);
    await enter('low-new', 'batch', 0);
    await enter('lower-than-high', 'other', 3);
    const high = await enter('high', 'vip', 10);
    expect(preempted.map((each) => each.name)).toEqual(['low-new']);
    expect(high).toBeDefined();
    expect([admission.active, admission.queued]).toEqual([4, 0]);
    expect(admission.usageOf('batch')).toEqual({ active: 1, queued: 0 });
    expect(admission.usageOf('vip')).toEqual({ active: 1, queued: 0 });
    // The next takes the other of the lowest band, then the next band up.
    await enter('high-2', 'vip', 10);
    await enter('high-3', 'vip', 10);
    expect(preempted.map((each) => each.name)).toEqual(['low-new', 'low-old', 'lower-than-high']);
  });

  it('the preempted request is told which priority took its slot, in a PreemptedError answered 503 with Retry-After and the API code preempted', async () => {
    const { preempted, enter } = preemptible();
    await enter('low', 'batch', 0);
    await enter('high', 'chat', 7);
    const error = preempted[0]?.error;
    expect(PreemptedError.is(error)).toBe(true);
    expect(error).toMatchObject({ code: 'DISAGG_PREEMPTED', retryAfterS: 1, preemptedBy: 7, priority: 0 });
    expect(error?.message).toBe(
      "The proxy is at capacity and gave this request's slot to one of higher priority (7 over 0): it was preempted; try again later",
    );
    expect(errorAnswer(error)).toMatchObject({
      status: 503,
      body: { error: { type: 'service_unavailable', code: 'preempted' } },
    });
  });

  it('a request of equal priority never preempts: it waits in the queue', async () => {
    vi.useFakeTimers();
    const { admission, preempted, enter } = preemptible();
    await enter('first', 'a', 3);
    const second = enter('second', 'b', 3);
    await vi.advanceTimersByTimeAsync(0);
    expect(preempted).toEqual([]);
    expect([admission.active, admission.queued]).toEqual([1, 1]);
    second.catch(() => {});
  });

  it('a request of lower priority never preempts one of higher', async () => {
    vi.useFakeTimers();
    const { admission, preempted, enter } = preemptible({ queueSize: 0 });
    await enter('high', 'a', 3);
    await expect(enter('low', 'b', 0)).rejects.toMatchObject({ limit: 'capacity' });
    expect(preempted).toEqual([]);
    expect(admission.active).toBe(1);
  });

  it('a request under way whose applicant gave no preempt callback is never preempted: the newcomer waits, or the next preemptible one goes', async () => {
    vi.useFakeTimers();
    const { admission, preempted, enter } = preemptible({ maxConcurrent: 2 });
    await enter('lowest-fixed', 'a', 0, false);
    await enter('low', 'b', 1);
    await enter('high', 'c', 5);
    expect(preempted.map((each) => each.name)).toEqual(['low']);
    // Only the one without a callback is left below: the next waits.
    const next = enter('high-2', 'c', 5);
    await vi.advanceTimersByTimeAsync(0);
    expect(preempted.map((each) => each.name)).toEqual(['low']);
    expect([admission.active, admission.queued]).toEqual([2, 1]);
    next.catch(() => {});
  });

  it('a request whose prefill still runs is passed over: preempting it would free a slot, not its worker', async () => {
    vi.useFakeTimers();
    const admission = new Admission({ maxConcurrent: 2, queueSize: 10, queueTimeoutMs: 60_000, preempt: true });
    const preempted: string[] = [];
    const prefilling = new Set(['low-new', 'low-old']);
    const low = (name: string): Applicant => ({
      tenant: 'batch',
      priority: 0,
      preempt: () => preempted.push(name),
      stoppable: () => !prefilling.has(name),
    });
    await admission.enter(never, low('low-old'));
    await admission.enter(never, low('low-new'));
    // Both prefills run: the newcomer waits rather than overcommit the workers.
    const first = admission.enter(never, { tenant: 'vip', priority: 5 });
    await vi.advanceTimersByTimeAsync(0);
    expect(preempted).toEqual([]);
    expect([admission.active, admission.queued]).toEqual([2, 1]);
    // The older one's prefill is done (it decodes now): it is the one to go, though not the newest.
    prefilling.delete('low-old');
    await admission.enter(never, { tenant: 'vip', priority: 5 });
    expect(preempted).toEqual(['low-old']);
    first.catch(() => {});
  });

  it('with preemption off (the default) a request under way is never preempted, callback or not', async () => {
    vi.useFakeTimers();
    for (const admission of [
      new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 60_000 }),
      new Admission({ maxConcurrent: 1, queueSize: 1, queueTimeoutMs: 60_000, preempt: false }),
    ]) {
      const told: PreemptedError[] = [];
      await admission.enter(never, { tenant: 'a', priority: 0, preempt: (error) => told.push(error) });
      const high = admission.enter(never, { tenant: 'b', priority: 9 });
      high.catch(() => {});
      await vi.advanceTimersByTimeAsync(0);
      expect(told).toEqual([]);
      expect([admission.active, admission.queued]).toEqual([1, 1]);
    }
  });

  it("a preempted request's ticket is released by admission: its own release later frees nothing more, and the slots stay counted right", async () => {
    vi.useFakeTimers();
    const { admission, tickets, enter } = preemptible({ queueSize: 5 });
    await enter('low', 'batch', 0);
    await enter('high', 'chat', 5);
    const waiting = enter('waiting', 'batch', 0);
    await vi.advanceTimersByTimeAsync(0);
    (tickets.get('low') as Ticket).release();
    (tickets.get('low') as Ticket).release();
    // The slot is high's: the waiter still waits, one slot is in use.
    expect([admission.active, admission.queued]).toEqual([1, 1]);
    expect(admission.usageOf('batch')).toEqual({ active: 0, queued: 1 });
    (tickets.get('high') as Ticket).release();
    await waiting;
    expect([admission.active, admission.queued]).toEqual([1, 0]);
    (tickets.get('waiting') as Ticket).release();
    expect([admission.active, admission.queued, admission.tenantRecords]).toEqual([0, 0, 0]);
  });

  it('a preempting request takes the slot over the queue: it neither waits nor sheds a waiter', async () => {
    vi.useFakeTimers();
    const { admission, preempted, enter } = preemptible({ queueSize: 1 });
    await enter('low', 'batch', 0);
    const waiter = enter('waiter', 'batch', 0);
    const high = enter('high', 'chat', 5);
    await vi.advanceTimersByTimeAsync(0);
    expect(preempted.map((each) => each.name)).toEqual(['low']);
    await high;
    expect([admission.active, admission.queued]).toEqual([1, 1]);
    waiter.catch(() => {});
  });

  it("a request preempting one of its own tenant's keeps that tenant's count right", async () => {
    const { admission, preempted, enter } = preemptible();
    await enter('low', 'same', 0);
    await enter('high', 'same', 5);
    expect(preempted.map((each) => each.name)).toEqual(['low']);
    expect(admission.usageOf('same')).toEqual({ active: 1, queued: 0 });
    expect(admission.tenantRecords).toBe(1);
  });
});

describe('Admission with preemption under any arrival, release and preemption order', () => {
  it('never serves more than its slots, and every ticket ends exactly once: released by its holder or preempted, never both, never twice', async () => {
    const { default: fc } = await import('fast-check');
    const { propertyOptions } = await import('../../support/property.js');
    const step = fc.oneof(
      fc.record({
        kind: fc.constant('arrive' as const),
        tenant: fc.constantFrom('a', 'b', 'c'),
        priority: fc.constantFrom(0, 1, 5),
        preemptible: fc.boolean(),
      }),
      fc.record({ kind: fc.constant('release' as const), which: fc.nat(20) }),
      fc.record({ kind: fc.constant('release-again' as const), which: fc.nat(20) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 40 }), async (steps) => {
        vi.useFakeTimers();
        const max = 2;
        const admission = new Admission({ maxConcurrent: max, queueSize: 4, queueTimeoutMs: 60_000, preempt: true });
        type Held = { ticket: Ticket; priority: number; ends: number; preempted: boolean; released: boolean };
        const held: Held[] = [];
        const told = new Map<number, number>();
        let id = 0;
        for (const each of steps) {
          if (each.kind === 'arrive') {
            const mine = id++;
            const entry: { held?: Held } = {};
            const preempt = each.preemptible
              ? () => {
                  told.set(mine, (told.get(mine) ?? 0) + 1);
                  const record = entry.held;
                  // Only a request under way, never one that ended, is preempted.
                  expect(record).toBeDefined();
                  if (record === undefined) return;
                  expect(record.released).toBe(false);
                  record.ends += 1;
                  record.preempted = true;
                }
              : undefined;
            admission
              .enter(never, { tenant: each.tenant, priority: each.priority, ...(preempt ? { preempt } : {}) })
              .then(
                (ticket) => {
                  entry.held = { ticket, priority: each.priority, ends: 0, preempted: false, released: false };
                  held.push(entry.held);
                },
                () => {},
              );
          } else {
            const live = held.filter((record) => each.kind === 'release-again' || record.ends === 0);
            const record = live[each.which % Math.max(1, live.length)];
            if (record !== undefined) {
              if (!record.released && !record.preempted) record.ends += 1;
              record.released = true;
              record.ticket.release();
            }
          }
          await vi.advanceTimersByTimeAsync(0);
          const under = held.filter((record) => record.ends === 0);
          expect(admission.active).toBeLessThanOrEqual(max);
          expect(admission.active).toBe(under.length);
          if (admission.active < max) expect(admission.queued).toBe(0);
          for (const record of held) expect(record.ends).toBeLessThanOrEqual(1);
        }
        for (const times of told.values()) expect(times).toBe(1);
        vi.useRealTimers();
      }),
      propertyOptions(200, 73),
    );
  });
});
