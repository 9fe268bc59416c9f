import { describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { cacheAware } from '../../src/routing/cache-aware.js';
import { roundRobin } from '../../src/routing/round-robin.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { sessionAffinity } from '../../src/routing/session-affinity.js';

const session = (key: string) => new RoutingInput({ prompt: 'p' }, key);
const idle = { inFlight: () => 0 };

describe('sessionAffinity: without a session key', () => {
  it('a request without an input goes to the least loaded (no fallback) or to the fallback', () => {
    const load = { inFlight: (worker: string) => (worker === 'w1' ? 0 : 3) };
    expect(sessionAffinity<string>().select(['w0', 'w1', 'w2'], load, undefined)).toBe('w1');
    const turns = sessionAffinity<string>({ fallback: roundRobin() });
    expect(['w0', 'w1', 'w2'].map(() => turns.select(['w0', 'w1', 'w2'], load, undefined))).toEqual(['w0', 'w1', 'w2']);
  });

  it('the fallback chooses every request without a key, not the least loaded', () => {
    const policy = sessionAffinity<string>({
      fallback: { name: 'last', select: (candidates) => candidates.at(-1) as string },
    });
    const load = { inFlight: (worker: string) => (worker === 'w0' ? 0 : 3) };
    expect(policy.select(['w0', 'w1', 'w2'], load, new RoutingInput({ prompt: 'no key' }))).toBe('w2');
    expect(policy.select(['w0', 'w1', 'w2'], load, session('k'))).toBe(
      sessionAffinity<string>().select(['w0', 'w1', 'w2'], idle, session('k')),
    );
  });
});

describe('sessionAffinity: names and ties', () => {
  it('refuses a worker it cannot name, naming itself', () => {
    expect(() => sessionAffinity<object>().select([{}, {}], idle, session('k'))).toThrow(
      'sessionAffinity needs a stable name for each worker',
    );
  });

  it('workers that idOf names alike tie: the first listed takes the session', () => {
    const policy = sessionAffinity<string>({ idOf: () => 'same' });
    expect(policy.select(['w0', 'w1', 'w2'], idle, session('k'))).toBe('w0');
    expect(policy.select(['w2', 'w1', 'w0'], idle, session('k'))).toBe('w2');
  });
});

describe('sessionAffinity: what the fallback learns', () => {
  it('a cache-aware fallback learns from every leg, those of sessions too: a prompt without a key follows its prefix', () => {
    const fallback = cacheAware<string>();
    const pool = new WorkerPool(['w0', 'w1', 'w2'], { selection: sessionAffinity({ fallback }) });
    const system = 'You are a careful assistant. Answer in one line. '.repeat(4);
    const leg = pool.acquire(undefined, new RoutingInput({ prompt: `${system}first` }, 'chat-1'));
    leg.release('success');
    expect(fallback.tree.sizeOf(leg.worker)).toBeGreaterThan(0);
    expect(pool.acquire(undefined, new RoutingInput({ prompt: `${system}second` })).worker).toBe(leg.worker);
  });

  it('the choice and the outcome of each leg reach the fallback', () => {
    const heard: string[] = [];
    const policy = sessionAffinity<string>({
      fallback: {
        name: 'listening',
        select: (candidates) => candidates[0] as string,
        routed: (worker) => heard.push(`routed ${worker}`),
        completed: (worker, _input, outcome) => heard.push(`${outcome} ${worker}`),
        forget: (worker) => heard.push(`forget ${worker}`),
      },
    });
    const pool = new WorkerPool(['w0', 'w1'], { selection: policy });
    pool.acquire(undefined, new RoutingInput({ prompt: 'p' })).release('failure');
    pool.setAvailable('w1', false);
    expect(heard).toEqual(['routed w0', 'failure w0', 'forget w1']);
  });

  it("a worker leaving is forgotten by the fallback: its cache isn't counted on", () => {
    const fallback = cacheAware<string>();
    const pool = new WorkerPool(['w0', 'w1'], { selection: sessionAffinity({ fallback }) });
    pool.acquire(undefined, new RoutingInput({ prompt: 'a prompt without a session' })).release('success');
    expect(fallback.tree.sizeOf('w0')).toBeGreaterThan(0);
    pool.setAvailable('w0', false);
    expect(fallback.tree.sizeOf('w0')).toBe(0);
  });

  it('without a fallback, or with one that learns nothing, there is nothing to tell', () => {
    for (const policy of [sessionAffinity<string>(), sessionAffinity<string>({ fallback: roundRobin() })]) {
      const pool = new WorkerPool(['w0', 'w1'], { selection: policy });
      pool.acquire(undefined, new RoutingInput({ prompt: 'p' })).release('success');
      pool.acquire(undefined, session('k')).release('failure');
      expect(() => pool.setAvailable('w0', false)).not.toThrow();
    }
  });
});
