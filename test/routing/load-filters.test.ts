// The filters on the engines' own load: a worker past the threshold is passed over while another
// is under it; one whose load is not known stays; the scored policy never empties its list.
import { describe, expect, it } from 'vitest';
import type { EngineLoad } from '../../src/protocol/engines/load-metrics.js';
import { lowKvUsageFilter, lowQueueFilter } from '../../src/routing/load-filters.js';
import { loadScorer, scoredPolicy } from '../../src/routing/scoring.js';

type W = { url: string };
const [a, b, c] = ['a', 'b', 'c'].map((name) => ({ url: `http://${name}` })) as [W, W, W];
const idle = { inFlight: () => 0 };
const loads = (entries: Array<[W, EngineLoad]>) => {
  const map = new Map(entries);
  return (worker: W) => map.get(worker);
};

describe('lowQueueFilter', () => {
  it('keeps the workers with at most maxWaiting requests waiting (running ones do not count), and those not known', () => {
    const loadOf = loads([
      [a, { waiting: 3, running: 50, kvUsage: 0 }],
      [b, { waiting: 4, running: 0, kvUsage: 0 }],
    ]);
    expect(lowQueueFilter(loadOf, 3).filter([a, b, c], idle, undefined)).toEqual([a, c]);
    expect(lowQueueFilter(loadOf, 4).filter([a, b, c], idle, undefined)).toEqual([a, b, c]);
    expect(lowQueueFilter(loadOf, 2).filter([a, b], idle, undefined)).toEqual([]);
  });
});

describe('lowKvUsageFilter', () => {
  it('keeps the workers whose KV cache usage is at most maxKvUsage, and those not known', () => {
    const loadOf = loads([
      [a, { waiting: 0, running: 0, kvUsage: 0.8 }],
      [b, { waiting: 0, running: 0, kvUsage: 0.81 }],
    ]);
    expect(lowKvUsageFilter(loadOf, 0.8).filter([a, b, c], idle, undefined)).toEqual([a, c]);
  });

  it('in a scored policy, passes the full worker over whatever the scorers prefer; all full, the policy goes on with all', () => {
    const loadOf = loads([
      [a, { waiting: 0, running: 0, kvUsage: 0.95 }],
      [b, { waiting: 0, running: 0, kvUsage: 0.5 }],
    ]);
    // The load scorer prefers a (nothing in flight there).
    const inFlight = { inFlight: (worker: W) => (worker === b ? 5 : 0) };
    const policy = scoredPolicy<W>({
      filters: [lowKvUsageFilter(loadOf, 0.9)],
      scorers: [{ scorer: loadScorer(), weight: 1 }],
    });
    for (let i = 0; i < 3; i++) expect(policy.select([a, b], inFlight, undefined)).toBe(b);
    const strict = scoredPolicy<W>({
      filters: [lowKvUsageFilter(loadOf, 0.1)],
      scorers: [{ scorer: loadScorer(), weight: 1 }],
    });
    expect(strict.select([a, b], inFlight, undefined)).toBe(a);
  });
});

describe('the load filters by name', () => {
  it('are named as their plugins', () => {
    expect(lowQueueFilter(() => undefined, 1).name).toBe('low-queue');
    expect(lowKvUsageFilter(() => undefined, 1).name).toBe('low-kv-usage');
  });
});
