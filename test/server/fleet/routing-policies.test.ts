import { describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { POLICY_NAMES } from '../../../src/routing/registry.js';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { conditionalAggregation, selectionFor } from '../../../src/server/fleet/routing-policies.js';
import type { ResolvedProxyOptions } from '../../../src/server/options.js';

vi.mock('../../../src/routing/cache-aware.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../../src/routing/cache-aware.js')>();
  return { ...original, cacheAware: vi.fn(original.cacheAware) };
});
const { cacheAware } = await import('../../../src/routing/cache-aware.js');

type W = { url: string };
const routing: ResolvedProxyOptions['routing'] = {
  cacheThreshold: 0.3,
  balanceAbsThreshold: 7,
  prefixWeight: 2,
  speculativeTtlMs: 2000,
  scorers: [{ name: 'load', weight: 1 }],
  filters: [],
  picker: { name: 'max-score' },
  engineLoadIntervalMs: 0,
  engineLoadStaleMs: 2000,
  balanceRelThreshold: 1.5,
  maxTreeChars: 4096,
  aggregateBelowChars: 0,
  aggregateCachedRatio: 0,
  sessionHeader: 'x-session-id',
  prefixKeyHeader: 'x-prefix-key',
};

describe('selectionFor', () => {
  it('each policy name gets a policy object of its own; cache-aware with the routing settings', () => {
    const first = selectionFor<W>('cache-aware', routing);
    expect(cacheAware).toHaveBeenCalledWith({
      cacheThreshold: 0.3,
      balanceAbsThreshold: 7,
      balanceRelThreshold: 1.5,
      maxTreeChars: 4096,
    });
    expect(first).toMatchObject({ name: 'cache-aware' });
    expect(selectionFor<W>('cache-aware', routing)).not.toBe(first);
    // Every plugin of the registry, by its own name, a new object per pool.
    for (const name of POLICY_NAMES) {
      const services = { kvIndex: () => undefined };
      const policy = selectionFor<W>(name, routing, services);
      expect(policy, name).toMatchObject({ name });
      expect(selectionFor<W>(name, routing, services), name).not.toBe(policy);
    }
  });
});

/** A completion as the flow asks about it: the body and its routing input. */
const routed = (body: Record<string, unknown>) => [body, new RoutingInput(body)] as const;

describe('conditionalAggregation', () => {
  const decode = () => new WorkerPool<W>([{ url: 'http://d0' }, { url: 'http://d1' }]);

  it('off (undefined) when both conditions are off, or the cache condition has no tree to read', () => {
    expect(conditionalAggregation(routing, decode(), 'least-in-flight')).toBeUndefined();
    expect(conditionalAggregation(routing, decode(), selectionFor<W>('cache-aware', routing))).toBeUndefined();
    expect(
      conditionalAggregation({ ...routing, aggregateCachedRatio: 0.5 }, decode(), 'least-in-flight'),
    ).toBeUndefined();
    // A policy object that knows nothing of caches (cachedShare is optional for plugins).
    const unaware = { name: 'unaware', select: (candidates: readonly W[]) => candidates[0] as W };
    expect(conditionalAggregation({ ...routing, aggregateCachedRatio: 0.5 }, decode(), unaware)).toBeUndefined();
  });

  it('an empty prompt is never served on decode alone for its cache: the policy is not asked about it', () => {
    const cachedShare = vi.fn(() => 1);
    const policy = { name: 'all-cached', select: (candidates: readonly W[]) => candidates[0] as W, cachedShare };
    const decide = conditionalAggregation({ ...routing, aggregateCachedRatio: 0.5 }, decode(), policy);
    expect(decide?.(...routed({ prompt: '' }))).toBeUndefined();
    expect(cachedShare).not.toHaveBeenCalled();
    expect(decide?.(...routed({ prompt: 'a' }))).toBe('decode-cached');
  });

  it('a prompt shorter than aggregateBelowChars is served on decode alone; one that long is disaggregated', () => {
    const decide = conditionalAggregation({ ...routing, aggregateBelowChars: 5 }, decode(), 'least-in-flight');
    expect(decide?.(...routed({ prompt: 'abcd' }))).toBe('short-prompt');
    expect(decide?.(...routed({ prompt: '' }))).toBe('short-prompt');
    expect(decide?.(...routed({ prompt: 'abcde' }))).toBeUndefined();
  });

  it('a prompt a decode worker in rotation holds more than aggregateCachedRatio of is served on decode alone', () => {
    const pool = decode();
    const selection = selectionFor<W>('cache-aware', routing);
    const tree = (selection as unknown as { tree: { insert(text: string, worker: W): void } }).tree;
    const [d0] = pool.workers as [W, W];
    tree.insert('0123456789', d0);
    const decide = conditionalAggregation({ ...routing, aggregateCachedRatio: 0.5 }, pool, selection);
    expect(decide?.(...routed({ prompt: '012345abcd' }))).toBe('decode-cached');
    expect(decide?.(...routed({ prompt: '01234abcde' }))).toBeUndefined();
    expect(decide?.(...routed({ prompt: '' }))).toBeUndefined();
    pool.setAvailable(d0, false);
    expect(decide?.(...routed({ prompt: '0123456789' }))).toBeUndefined();
  });
});
