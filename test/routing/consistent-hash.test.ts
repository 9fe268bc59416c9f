import { describe, expect, it } from 'vitest';
import { consistentHash } from '../../src/routing/consistent-hash.js';
import { RoutingInput } from '../../src/routing/routing-input.js';

type W = { url: string };
const workers: W[] = Array.from({ length: 5 }, (_, i) => ({ url: `http://w${i}:8000` }));
const idle = { inFlight: () => 0 };
const prompt = (i: number) => new RoutingInput({ prompt: `system prompt ${i}: and then the question` });

describe('consistentHash', () => {
  it('the same key goes to the same worker, on a second router replica too (nothing learnt, nothing shared)', () => {
    const replicaA = consistentHash<W>();
    const replicaB = consistentHash<W>();
    for (let i = 0; i < 200; i++) {
      const a = replicaA.select(workers, idle, prompt(i));
      expect(replicaA.select(workers, idle, prompt(i))).toBe(a);
      // Another process: the same workers (by URL), listed in another order.
      expect(replicaB.select([...workers].reverse(), idle, prompt(i)).url).toBe(a.url);
    }
  });

  it('spreads 10,000 keys over the workers within 25 % of an even share', () => {
    const policy = consistentHash<W>();
    const counts = new Map<W, number>();
    for (let i = 0; i < 10_000; i++) {
      const chosen = policy.select(workers, idle, prompt(i));
      counts.set(chosen, (counts.get(chosen) ?? 0) + 1);
    }
    for (const worker of workers) expect(counts.get(worker) ?? 0, worker.url).toBeGreaterThan(2000 * 0.75);
    for (const worker of workers) expect(counts.get(worker) ?? 0, worker.url).toBeLessThan(2000 * 1.25);
  });

  it('a worker that leaves the rotation moves only its own keys; when it comes back they return to it', () => {
    const policy = consistentHash<W>();
    const before = Array.from({ length: 2000 }, (_, i) => policy.select(workers, idle, prompt(i)));
    const gone = workers[2] as W;
    const rest = workers.filter((worker) => worker !== gone);
    const during = Array.from({ length: 2000 }, (_, i) => policy.select(rest, idle, prompt(i)));
    for (let i = 0; i < 2000; i++) {
      if (before[i] !== gone) expect(during[i]).toBe(before[i]);
      else expect(during[i]).not.toBe(gone);
    }
    policy.forget?.(gone);
    const after = Array.from({ length: 2000 }, (_, i) => policy.select(workers, idle, prompt(i)));
    expect(after).toEqual(before);
  });

  it('a session key decides over the prompt; a request with neither goes to the least loaded', () => {
    const policy = consistentHash<W>();
    const one = policy.select(workers, idle, new RoutingInput({ prompt: 'a' }, 'session-7'));
    expect(policy.select(workers, idle, new RoutingInput({ prompt: 'something else entirely' }, 'session-7'))).toBe(
      one,
    );
    const load = { inFlight: (worker: W) => (worker === workers[3] ? 0 : 5) };
    expect(policy.select(workers, load, new RoutingInput({}))).toBe(workers[3]);
    expect(policy.select(workers, load, undefined)).toBe(workers[3]);
  });

  it('keys on the start of the prompt: prompts that share their first keyChars land together', () => {
    const policy = consistentHash<W>({ keyChars: 16 });
    const a = policy.select(workers, idle, new RoutingInput({ prompt: 'You are helpful. Question one?' }));
    expect(policy.select(workers, idle, new RoutingInput({ prompt: 'You are helpful. Another one.' }))).toBe(a);
  });

  it('bounded loads: the owner of a key past twice the mean load passes it on along the ring, the same next worker each time', () => {
    const policy = consistentHash<W>();
    const owner = policy.select(workers, idle, prompt(1));
    // The owner has 4 in flight, the others 1: the mean with this request is 9/5, the bound 2 x 9/5 rounded up, 4.
    const busy = { inFlight: (worker: W) => (worker === owner ? 4 : 1) };
    const next = policy.select(workers, busy, prompt(1));
    expect(next).not.toBe(owner);
    expect(policy.select(workers, busy, prompt(1))).toBe(next);
    // Pure hashing keeps it on the owner whatever its load.
    expect(consistentHash<W>({ loadFactor: Number.POSITIVE_INFINITY }).select(workers, busy, prompt(1))).toBe(owner);
    // Back under the bound (all at 1: the bound is 3), back to the owner.
    expect(policy.select(workers, { inFlight: () => 1 }, prompt(1))).toBe(owner);
  });

  it('sessions spread over the workers: the session key itself is hashed', () => {
    const policy = consistentHash<W>();
    const chosen = new Set(
      Array.from({ length: 50 }, (_, i) => policy.select(workers, idle, new RoutingInput({}, `s${i}`))),
    );
    expect(chosen.size).toBe(workers.length);
  });

  it('placement is pinned: the same ring in every version, so that replicas agree during a rolling upgrade', () => {
    const names = ['http://w0', 'http://w1', 'http://w2'];
    const policy = consistentHash<string>({ virtualNodes: 2 });
    const owners = Array.from({ length: 24 }, (_, i) =>
      names.indexOf(policy.select(names, idle, new RoutingInput({}, `s${i}`))),
    );
    expect(owners.join('')).toBe('111110111200100012011021');
  });

  it('past its bound the owner passes a request to the worker that would own it without the owner: the next on the ring', () => {
    const policy = consistentHash<W>();
    for (let i = 0; i < 20; i++) {
      const owner = policy.select(workers, idle, prompt(i));
      const rest = workers.filter((worker) => worker !== owner);
      const busy = { inFlight: (worker: W) => (worker === owner ? 4 : 1) };
      expect(policy.select(workers, busy, prompt(i))).toBe(consistentHash<W>().select(rest, idle, prompt(i)));
    }
  });

  it('loadFactor 1: no worker takes more than the mean load, rounded up', () => {
    const policy = consistentHash<W>({ loadFactor: 1 });
    const pair = workers.slice(0, 2);
    const owner = policy.select(pair, idle, prompt(3));
    const other = pair.find((worker) => worker !== owner) as W;
    // One in flight on the owner: with this request the mean is 1, and the owner would have 2.
    expect(policy.select(pair, { inFlight: (worker: W) => (worker === owner ? 1 : 0) }, prompt(3))).toBe(other);
    expect(policy.select(pair, { inFlight: () => 1 }, prompt(3))).toBe(owner);
  });

  it('a worker forgotten (gone for good) is never chosen again while it is out; back, it takes its keys again', () => {
    const policy = consistentHash<W>({ virtualNodes: 1 });
    const before = Array.from({ length: 200 }, (_, i) => policy.select(workers, idle, prompt(i)));
    const gone = workers[1] as W;
    policy.forget?.(gone);
    const rest = workers.filter((worker) => worker !== gone);
    for (let i = 0; i < 200; i++) {
      const now = policy.select(rest, idle, prompt(i));
      expect(now).not.toBe(gone);
      if (before[i] !== gone) expect(now).toBe(before[i]);
    }
    expect(Array.from({ length: 200 }, (_, i) => policy.select(workers, idle, prompt(i)))).toEqual(before);
  });

  it('names workers by their url, or as idOf says; refuses a worker it cannot name, saying so', () => {
    const byName = consistentHash<{ name: string }>({ idOf: (worker) => worker.name });
    const named = [{ name: 'a' }, { name: 'b' }];
    expect(named).toContain(byName.select(named, idle, prompt(1)));
    expect(() => consistentHash<object>().select([{}, {}], idle, prompt(1))).toThrow(
      'consistentHash needs a stable name for each worker',
    );
  });

  it('refuses virtualNodes or keyChars that are not positive whole numbers', () => {
    expect(() => consistentHash({ virtualNodes: 1, keyChars: 1, loadFactor: 1 })).not.toThrow();
    expect(() => consistentHash({ virtualNodes: 0 })).toThrow(
      'consistentHash: virtualNodes must be a positive whole number, got 0',
    );
    expect(() => consistentHash({ keyChars: 1.5 })).toThrow(
      'consistentHash: keyChars must be a positive whole number, got 1.5',
    );
    expect(() => consistentHash({ loadFactor: 0.9 })).toThrow(
      'consistentHash: loadFactor must be a number of 1 or more, got 0.9',
    );
  });
});
