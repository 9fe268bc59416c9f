import { describe, expect, it } from 'vitest';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { WorkerPool } from '../../src/routing/worker-pool.js';

describe("a pool's peerLoad: the other replicas' requests in flight", () => {
  it("its policy sees its own leases plus the others', while its own count stays its own", () => {
    const others = new Map([['a', 3]]);
    const pool = new WorkerPool(['a', 'b'], {
      selection: 'least-in-flight',
      peerLoad: { inFlight: (w) => others.get(w) ?? 0 },
    });
    // a is busy elsewhere: b is chosen, twice, until b's own leases pass a's shared count.
    const leases = [pool.acquire(), pool.acquire(), pool.acquire()];
    expect(leases.map((lease) => lease.worker)).toEqual(['b', 'b', 'b']);
    expect(pool.inFlight('a')).toBe(0);
    expect(pool.inFlight('b')).toBe(3);
    // The others' count falls (their requests ended): a is the least loaded again.
    others.set('a', 1);
    expect(pool.acquire().worker).toBe('a');
  });

  it('without it, the pool balances on its own leases alone', () => {
    const pool = new WorkerPool(['a', 'b'], { selection: 'least-in-flight' });
    expect([pool.acquire().worker, pool.acquire().worker]).toEqual(['a', 'b']);
  });

  it("its load view gives each worker's prompt tokens under way, this router's own (replicas share requests, not tokens), until each lease is released", () => {
    const tokens = (input: RoutingInput | undefined) => input?.promptTokens ?? 0;
    const shared = new WorkerPool(['a', 'b'], { peerLoad: { inFlight: () => 5 }, promptTokens: tokens });
    const lone = new WorkerPool(['a', 'b'], { promptTokens: tokens });
    for (const pool of [shared, lone]) {
      const first = pool.acquire(undefined, new RoutingInput({ prompt: [1, 2, 3] }));
      const second = pool.acquire(undefined, new RoutingInput({ prompt: [1, 2, 3, 4, 5] }));
      expect([first.worker, second.worker]).toEqual(['a', 'b']);
      expect(pool.load.promptTokens?.('a')).toBe(3);
      expect(pool.load.promptTokens?.('b')).toBe(5);
      first.release('success');
      expect(pool.load.promptTokens?.('a')).toBe(0);
      expect(pool.promptTokensInFlight).toBe(5);
      second.release();
    }
  });
});
