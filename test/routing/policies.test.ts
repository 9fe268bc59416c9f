import { describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { cacheAware } from '../../src/routing/cache-aware.js';
import { powerOfTwo } from '../../src/routing/power-of-two.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { sessionAffinity } from '../../src/routing/session-affinity.js';

const prompt = (text: string) => new RoutingInput({ prompt: text });
const SYSTEM = 'You are a careful assistant. Answer in one line. '.repeat(4);

/** A pool of `n` named workers whose loads the test sets. */
function loads(...inFlight: number[]) {
  const workers = inFlight.map((_, i) => `w${i}`);
  return { workers, load: { inFlight: (worker: string) => inFlight[workers.indexOf(worker)] ?? 0 } };
}

describe('cacheAware', () => {
  it('a request goes where its prefix was sent when the match passes the threshold', () => {
    const policy = cacheAware<string>();
    const { workers, load } = loads(0, 0, 0);
    // Each leg succeeds: what its worker computed is then known to be there.
    const routed = (input: RoutingInput) => {
      const worker = policy.select(workers, load, input);
      policy.completed?.(worker, input, 'success');
      return worker;
    };
    // Cold: each new prompt goes to the worker remembered holding least (ties in order).
    expect(routed(prompt(`${SYSTEM}first`))).toBe('w0');
    expect(routed(prompt('another topic entirely'))).toBe('w1');
    // Warm: most of this prompt is what w0 got.
    expect(routed(prompt(`${SYSTEM}second`))).toBe('w0');
  });

  it('below the threshold the least loaded worker gets it; at 0.3 the same match is a hit', () => {
    const { workers, load } = loads(2, 0);
    const sent = 'abcdefghij';
    const query = 'abcdeXXXXXXX'; // 5 of 12 match: 0.42
    const strict = cacheAware<string>();
    strict.tree.insert(sent, 'w0');
    expect(strict.select(workers, load, prompt(query))).toBe('w1');
    const loose = cacheAware<string>({ cacheThreshold: 0.3 });
    loose.tree.insert(sent, 'w0');
    expect(loose.select(workers, load, prompt(query))).toBe('w0');
  });

  it('imbalanced load (both thresholds exceeded) sends the request to the least loaded, whatever it holds', () => {
    const chosen = (...inFlight: number[]) => {
      const policy = cacheAware<string>({ balanceAbsThreshold: 4, balanceRelThreshold: 1.5 });
      policy.tree.insert(`${SYSTEM}x`, 'w0');
      return policy.select(...asArgs(loads(...inFlight)), prompt(`${SYSTEM}y`));
    };
    // 10 vs 5: 5 more (> 4) and twice (> 1.5x): balance first.
    expect(chosen(10, 5)).toBe('w1');
    // 10 vs 7: only 3 more: the cache wins.
    expect(chosen(10, 7)).toBe('w0');
    // 100 vs 95: 5 more but only 1.05x: the cache wins.
    expect(chosen(100, 95)).toBe('w0');
  });

  it('records the text for the worker chosen once its leg succeeded, also when balance chose it; choosing alone records nothing', () => {
    const policy = cacheAware<string>({ balanceAbsThreshold: 0, balanceRelThreshold: 1 });
    const input = prompt('hello there');
    const chosen = policy.select(...asArgs(loads(3, 0)), input);
    expect(chosen).toBe('w1');
    expect(policy.tree.sizeOf('w1')).toBe(0);
    policy.completed?.(chosen, input, 'success');
    expect(policy.tree.match('hello there', ['w0', 'w1'])).toEqual({ length: 11, workers: ['w1'] });
  });

  it('a leg that failed is not recorded: after a prefill failure and a retry elsewhere, the next turn goes where the prompt was computed', () => {
    const policy = cacheAware<string>();
    const pool = new WorkerPool(['w0', 'w1'], { selection: policy });
    const turn = prompt(`${SYSTEM}turn one`);
    const failed = pool.acquire(undefined, turn);
    expect(failed.worker).toBe('w0');
    failed.release('failure'); // a 500 on w0
    const retried = pool.acquire([failed.worker], turn);
    expect(retried.worker).toBe('w1');
    retried.release('success');
    expect(pool.acquire(undefined, prompt(`${SYSTEM}turn one, and two`)).worker).toBe('w1');
  });

  it('a request without routing text goes to the least loaded and is not recorded', () => {
    const policy = cacheAware<string>();
    expect(policy.select(...asArgs(loads(1, 0)), new RoutingInput({ model: 'm' }))).toBe('w1');
    expect(policy.select(...asArgs(loads(0, 1)), undefined)).toBe('w0');
    expect(policy.tree.sizeOf('w0') + policy.tree.sizeOf('w1')).toBe(0);
  });

  it('a worker leaving the rotation of its pool is forgotten: when it comes back it is cold', () => {
    const policy = cacheAware<string>();
    const pool = new WorkerPool(['w0', 'w1'], { selection: policy });
    pool.acquire(undefined, prompt(`${SYSTEM}a`)).release('success');
    expect(policy.tree.sizeOf('w0')).toBeGreaterThan(0);
    pool.setAvailable('w0', false);
    expect(policy.tree.sizeOf('w0')).toBe(0);
    const served = pool.acquire(undefined, prompt(`${SYSTEM}b`));
    expect(served.worker).toBe('w1');
    served.release('success');
    pool.setAvailable('w0', true);
    // Back in rotation, w0 is cold: the prefix is w1's now.
    expect(pool.acquire(undefined, prompt(`${SYSTEM}c`)).worker).toBe('w1');
    expect(pool.acquire(undefined, prompt('something new')).worker).toBe('w0');
  });

  it('refuses thresholds out of range, saying what was expected', () => {
    expect(() => cacheAware({ cacheThreshold: 2 })).toThrow(
      'cacheAware: cacheThreshold must be a number from 0 to 1, got 2',
    );
    expect(() => cacheAware({ balanceRelThreshold: 0.5 })).toThrow('a ratio of 1 or more');
    expect(() => cacheAware({ balanceAbsThreshold: -1 })).toThrow('0 or more');
    expect(() => cacheAware({ maxTreeChars: 1.5 })).toThrow('a positive whole number of characters');
    expect(() => cacheAware({ cacheThreshold: Number.NaN })).toThrow('cacheThreshold');
  });
});

describe('powerOfTwo', () => {
  it('draws two distinct candidates and takes the less loaded; the first drawn on a tie', () => {
    const draws = [0.1, 0.1, 0.5, 0.5, 0.9, 0.1];
    const policy = powerOfTwo<string>({ random: () => draws.shift() as number });
    const { workers, load } = loads(1, 5, 0);
    expect(policy.select(workers, load, undefined)).toBe('w0'); // w0 (1) against w1 (5)
    expect(policy.select(workers, load, undefined)).toBe('w2'); // w1 (5) against w2 (0): the second draw skips the first
    expect(policy.select(workers, loads(0, 0, 0).load, undefined)).toBe('w2'); // w2 against w0, a tie
  });

  it('the second draw is of the others: below the first it stays, at or above it moves one place on', () => {
    const draws = [0.9, 0.1, 0.1, 0.1];
    const policy = powerOfTwo<string>({ random: () => draws.shift() as number });
    const { workers, load } = loads(0, 5, 1);
    expect(policy.select(workers, load, undefined)).toBe('w0'); // w2 (1) against w0 (0)
    expect(policy.select(workers, load, undefined)).toBe('w0'); // w0 (0) against w1 (5)
    expect(policy.name).toBe('power-of-two');
  });

  it('one candidate is the answer without a draw', () => {
    const policy = powerOfTwo<string>({
      random: () => {
        throw new Error('no draw expected');
      },
    });
    expect(policy.select(['only'], { inFlight: () => 0 }, undefined)).toBe('only');
  });
});

describe('sessionAffinity', () => {
  const session = (key: string) => new RoutingInput({ prompt: 'p' }, key);

  it('a session stays on its worker; requests without a key go to the fallback', () => {
    const policy = sessionAffinity<string>();
    const { workers, load } = loads(0, 0, 0, 0);
    const first = policy.select(workers, load, session('chat-1'));
    for (let i = 0; i < 5; i++) expect(policy.select(workers, load, session('chat-1'))).toBe(first);
    expect(policy.select(...asArgs(loads(3, 0, 2, 1)), prompt('no key'))).toBe('w1');
    expect(policy.select(workers, load, new RoutingInput({ prompt: 'p', user: 'chat-1' }))).toBe(first);
  });

  it('sessions spread over the workers, and a worker joining moves only the sessions it wins', () => {
    const policy = sessionAffinity<string>();
    const before = loads(0, 0, 0, 0);
    const after = loads(0, 0, 0, 0, 0);
    const placed = new Map<string, string>();
    const counts = new Map<string, number>();
    for (let i = 0; i < 2_000; i++) {
      const worker = policy.select(before.workers, before.load, session(`s${i}`));
      placed.set(`s${i}`, worker);
      counts.set(worker, (counts.get(worker) ?? 0) + 1);
    }
    for (const count of counts.values()) expect(count).toBeGreaterThan(400); // of 500 each on average
    let moved = 0;
    for (const [key, worker] of placed) {
      const now = policy.select(after.workers, after.load, session(key));
      if (now !== worker) {
        expect(now).toBe('w4');
        moved++;
      }
    }
    expect(moved).toBeGreaterThan(300); // about a fifth of 2,000
    expect(moved).toBeLessThan(500);
  });

  it('names workers by their url, or as idOf says; refuses a worker it cannot name', () => {
    const urls = [{ url: 'http://a' }, { url: 'http://b' }];
    const byUrl = sessionAffinity<{ url: string }>();
    const copy = [{ url: 'http://a' }, { url: 'http://b' }];
    const load = { inFlight: () => 0 };
    expect(byUrl.select(urls, load, session('k')).url).toBe(
      sessionAffinity<{ url: string }>().select(copy, load, session('k')).url,
    );
    expect(() => sessionAffinity<object>().select([{}], load, session('k'))).toThrow('needs a stable name');
    expect(sessionAffinity<object>({ idOf: () => 'x' }).select([{}], load, session('k'))).toEqual({});
  });
});

function asArgs(pool: ReturnType<typeof loads>): [string[], { inFlight: (w: string) => number }] {
  return [pool.workers, pool.load];
}
