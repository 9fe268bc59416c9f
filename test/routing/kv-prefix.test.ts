import { beforeAll, describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { KvBlockIndex } from '../../src/kv/block-index.js';
import { type BlockKeys, loadBlockKeys } from '../../src/kv/block-keys.js';
import type { EngineLoad } from '../../src/protocol/engines/load-metrics.js';
import { engineQueueScorer, kvPrefixScorer, kvUsageScorer, precisePrefix } from '../../src/routing/kv-prefix.js';
import { RoutingInput } from '../../src/routing/routing-input.js';

let keys: BlockKeys;
beforeAll(async () => {
  keys = await loadBlockKeys();
});

type W = { url: string };
const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const store = (
  index: KvBlockIndex<W>,
  worker: W,
  tokens: number[],
  handle: string,
  scope: { lora?: string; salt?: string } = {},
) =>
  index.apply(worker, {
    kind: 'stored',
    blocks: Array.from({ length: tokens.length / 16 }, (_, i) => `${handle}${i}`),
    parent: undefined,
    tokenIds: tokens,
    blockSize: 16,
    lora: scope.lora,
    ...(scope.salt === undefined ? {} : { salt: scope.salt }),
    medium: 'GPU',
    group: 0,
  });
const idle = { inFlight: () => 0 };

describe("precise-prefix: routing on the engines' blocks", () => {
  it('sends a token-id prompt to the worker holding it (prefix weight 2 over a load score of at most 1); a text prompt goes by load', () => {
    const [a, b] = [{ url: 'http://a' }, { url: 'http://b' }];
    const index = new KvBlockIndex<W>(keys);
    store(index, b, ids(64), 'b');
    const pool = new WorkerPool([a, b], { selection: precisePrefix(() => index, { speculativeTtlMs: 0 }) });
    const input = new RoutingInput({ prompt: ids(64) });
    const held = [pool.acquire(undefined, input), pool.acquire(undefined, input)];
    expect(held.map((lease) => lease.worker)).toEqual([b, b]);
    expect(pool.acquire(undefined, input).worker).toBe(b);
    expect(pool.acquire(undefined, new RoutingInput({ prompt: 'text has no ids' })).worker).toBe(a);
  });

  it('a burst sharing a new prefix follows the first request (speculative entry), not load', () => {
    const [a, b] = [{ url: 'http://a' }, { url: 'http://b' }];
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(16, 9000), 'a'); // both views known, neither holds the prompt
    store(index, b, ids(16, 9100), 'b');
    const pool = new WorkerPool([a, b], { selection: precisePrefix(() => index) });
    const input = () => new RoutingInput({ prompt: ids(256) });
    const first = pool.acquire(undefined, input()).worker;
    expect(pool.acquire(undefined, input()).worker).toBe(first);
  });

  it('knows nothing without an index yet, and says how much decode holds for conditional disaggregation', () => {
    const [a, b] = [{ url: 'http://a' }, { url: 'http://b' }];
    const none = precisePrefix<W>(() => undefined);
    expect(none.cachedShare?.([a, b], new RoutingInput({ prompt: ids(32) }))).toBe(0);
    const index = new KvBlockIndex<W>(keys);
    store(index, b, ids(32), 'b');
    expect(precisePrefix<W>(() => index).cachedShare?.([a, b], new RoutingInput({ prompt: ids(64) }))).toBe(0.5);
  });
});

describe('kvPrefixScorer', () => {
  const [a, b, c] = [{ url: 'http://a' }, { url: 'http://b' }, { url: 'http://c' }];

  it("scores the share of the prompt's tokens each candidate holds in whole blocks from the start", () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(32), 'a');
    store(index, b, ids(16, 500), 'b'); // blocks of another prompt
    const scorer = kvPrefixScorer<W>(() => index);
    expect(scorer.name).toBe('kv-prefix');
    expect(scorer.score([a, b, c], idle, new RoutingInput({ prompt: ids(64) }))).toEqual([0.5, 0, 0]);
  });

  it('scores 0 everywhere without token ids, without an input, or without an index yet', () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(32), 'a');
    const scorer = kvPrefixScorer<W>(() => index);
    expect(scorer.score([a, b], idle, new RoutingInput({ prompt: 'text' }))).toEqual([0, 0]);
    expect(scorer.score([a, b], idle, new RoutingInput({ prompt: 'text' }, undefined, []))).toEqual([0, 0]);
    expect(scorer.score([a, b], idle, undefined)).toEqual([0, 0]);
    expect(kvPrefixScorer<W>(() => undefined).score([a, b], idle, new RoutingInput({ prompt: ids(32) }))).toEqual([
      0, 0,
    ]);
  });

  it("a LoRA adapter's blocks and a salted request's blocks are their own", () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(32), 'a', { lora: 'sql-lora' });
    store(index, b, ids(32), 'b', { salt: 'tenant-1' });
    const scorer = kvPrefixScorer<W>(() => index);
    const score = (body: Record<string, unknown>) => scorer.score([a, b], idle, new RoutingInput(body));
    expect(score({ model: 'sql-lora', prompt: ids(32) })).toEqual([1, 0]);
    expect(score({ prompt: ids(32), cache_salt: 'tenant-1' })).toEqual([0, 1]);
    expect(score({ model: 'base', prompt: ids(32) })).toEqual([0, 0]);
  });

  it('routed: notes what the worker was expected to reuse, then counts the whole prompt as held until the TTL passes', () => {
    let now = 1000;
    const index = new KvBlockIndex<W>(keys, { now: () => now });
    store(index, a, ids(32), 'a');
    const scorer = kvPrefixScorer<W>(() => index, { speculativeTtlMs: 100 });
    const input = new RoutingInput({ prompt: ids(64) });
    scorer.routed?.(a, input);
    expect(input.predictedCached(a)).toBe(32); // before the speculative entry
    scorer.routed?.(b, input);
    expect(input.predictedCached(b)).toBe(0);
    const later = () => scorer.score([a, b], idle, new RoutingInput({ prompt: ids(64) }));
    now = 1099;
    expect(later()).toEqual([1, 1]);
    now = 1100;
    expect(later()).toEqual([0.5, 0]); // expired: what the events said is left
  });

  it('routed: the speculative entry lasts 2 s by default, and is not made with a TTL of 0', () => {
    let now = 0;
    const index = new KvBlockIndex<W>(keys, { now: () => now });
    const byDefault = kvPrefixScorer<W>(() => index);
    byDefault.routed?.(a, new RoutingInput({ prompt: ids(32) }));
    now = 1999;
    expect(byDefault.score([a], idle, new RoutingInput({ prompt: ids(32) }))).toEqual([1]);
    now = 2000;
    expect(byDefault.score([a], idle, new RoutingInput({ prompt: ids(32) }))).toEqual([0]);
    const none = kvPrefixScorer<W>(() => index, { speculativeTtlMs: 0 });
    const input = new RoutingInput({ prompt: ids(32) });
    none.routed?.(b, input);
    expect(input.predictedCached(b)).toBe(0);
    expect(none.score([b], idle, new RoutingInput({ prompt: ids(32) }))).toEqual([0]);
    expect(index.blockSize(b)).toBeUndefined(); // no entry at all, not one that expires at once
  });

  it("routed: what the worker is expected to reuse, and the speculative entry, are in the request's scope", () => {
    const index = new KvBlockIndex<W>(keys, { now: () => 0 });
    store(index, b, ids(16), 'b', { salt: 'tenant-1' });
    const scorer = kvPrefixScorer<W>(() => index);
    const salted = new RoutingInput({ prompt: ids(32), cache_salt: 'tenant-1' });
    scorer.routed?.(b, salted);
    expect(salted.predictedCached(b)).toBe(16);
    scorer.routed?.(a, new RoutingInput({ prompt: ids(32), cache_salt: 'tenant-1' }));
    expect(scorer.score([a], idle, new RoutingInput({ prompt: ids(32), cache_salt: 'tenant-1' }))).toEqual([1]);
    expect(scorer.score([a], idle, new RoutingInput({ prompt: ids(32) }))).toEqual([0]);
  });

  it('routed: nothing to note or expect without an input, token ids or an index', () => {
    const index = new KvBlockIndex<W>(keys, { now: () => 0 });
    const scorer = kvPrefixScorer<W>(() => index);
    scorer.routed?.(a, undefined);
    const text = new RoutingInput({ prompt: 'text' });
    scorer.routed?.(a, text);
    const empty = new RoutingInput({ prompt: 'text' }, undefined, []);
    scorer.routed?.(a, empty);
    expect([text.predictedCached(a), empty.predictedCached(a)]).toEqual([undefined, undefined]);
    expect(index.blockSize(a)).toBeUndefined(); // no entry made
    const withoutIndex = new RoutingInput({ prompt: ids(32) });
    kvPrefixScorer<W>(() => undefined).routed?.(a, withoutIndex);
    expect(withoutIndex.predictedCached(a)).toBeUndefined();
  });
});

describe('engine load scorers', () => {
  const [a, b, c, d] = ['a', 'b', 'c', 'd'];
  const loads = (table: Record<string, EngineLoad>) => (worker: string) => table[worker];

  it('engine queue: 1 for the fewest waiting and running, falling to 0 for the most; 0.5 when not known', () => {
    const scorer = engineQueueScorer(
      loads({
        a: { waiting: 1, running: 0, kvUsage: 0 },
        b: { waiting: 0, running: 3, kvUsage: 0 },
        c: { waiting: 2, running: 2, kvUsage: 0 },
      }),
    );
    expect(scorer.name).toBe('engine-queue');
    const [sa, sb, sc, sd] = scorer.score([a, b, c, d], idle, undefined);
    expect([sa, sc, sd]).toEqual([1, 0, 0.5]);
    expect(sb).toBeCloseTo(1 / 3);
    const even = engineQueueScorer(
      loads({ a: { waiting: 2, running: 1, kvUsage: 0 }, b: { waiting: 0, running: 3, kvUsage: 0 } }),
    );
    expect(even.score([a, b, c], idle, undefined)).toEqual([1, 1, 0.5]);
    expect(engineQueueScorer(loads({})).score([a, b], idle, undefined)).toEqual([0.5, 0.5]);
  });

  it('KV usage: 1 minus the share in use (clamped to 0..1); 0.5 when not known', () => {
    const scorer = kvUsageScorer(
      loads({
        a: { waiting: 0, running: 0, kvUsage: 0.25 },
        b: { waiting: 0, running: 0, kvUsage: 1.5 },
        c: { waiting: 0, running: 0, kvUsage: -0.5 },
      }),
    );
    expect(scorer.name).toBe('kv-usage');
    expect(scorer.score([a, b, c, d], idle, undefined)).toEqual([0.75, 0, 1, 0.5]);
  });
});

describe('precisePrefix: the weights', () => {
  const [a, b] = [{ url: 'http://a' }, { url: 'http://b' }];
  const busyA = { inFlight: (worker: W) => (worker === a ? 1 : 0) };
  const prompt = () => new RoutingInput({ prompt: ids(80) }); // five blocks

  it('prefix overlap weighs 2 against a load score of 1 by default: 2 of 5 blocks lose to load, 3 win', () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(32), 'a');
    const policy = precisePrefix<W>(() => index, { speculativeTtlMs: 0 });
    expect(policy.name).toBe('precise-prefix');
    expect(policy.select([a, b], busyA, prompt())).toBe(b); // 2 x 0.4 < 1
    store(index, a, ids(48), 'a');
    expect(policy.select([a, b], busyA, prompt())).toBe(a); // 2 x 0.6 > 1
  });

  it('speculativeTtlMs 0: no speculative entry, so a burst sharing a new prefix spreads by load', () => {
    const index = new KvBlockIndex<W>(keys);
    const pool = new WorkerPool([a, b], { selection: precisePrefix<W>(() => index, { speculativeTtlMs: 0 }) });
    const first = pool.acquire(undefined, new RoutingInput({ prompt: ids(64) })).worker;
    expect(pool.acquire(undefined, new RoutingInput({ prompt: ids(64) })).worker).not.toBe(first);
  });

  it('prefixWeight sets the weight of overlap', () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(32), 'a');
    expect(precisePrefix<W>(() => index, { prefixWeight: 3 }).select([a, b], busyA, prompt())).toBe(a); // 3 x 0.4 > 1
    expect(precisePrefix<W>(() => index, { prefixWeight: 1 }).select([a, b], idle, prompt())).toBe(a);
  });

  it("with the engines' load, their queue and KV usage weigh in too", () => {
    const index = new KvBlockIndex<W>(keys);
    const engine = new Map<W, EngineLoad>([
      [a, { waiting: 4, running: 2, kvUsage: 0.5 }],
      [b, { waiting: 0, running: 2, kvUsage: 0.5 }],
    ]);
    const input = () => new RoutingInput({ prompt: ids(32) });
    expect(precisePrefix<W>(() => index).select([a, b], idle, input())).toBe(a); // nothing to tell them apart
    const policy = precisePrefix<W>(() => index, { engineLoad: (worker) => engine.get(worker) });
    expect(policy.select([a, b], idle, input())).toBe(b); // a's engine has a queue
    engine.set(a, { waiting: 0, running: 2, kvUsage: 0.9 });
    engine.set(b, { waiting: 0, running: 2, kvUsage: 0.5 });
    expect(policy.select([a, b], idle, input())).toBe(b); // a's KV cache is fuller
  });

  it('cachedShare is the best overlap among the candidates; 0 for none', () => {
    const index = new KvBlockIndex<W>(keys);
    store(index, a, ids(16), 'a');
    store(index, b, ids(48), 'b');
    const policy = precisePrefix<W>(() => index);
    expect(policy.cachedShare?.([a, b], new RoutingInput({ prompt: ids(64) }))).toBe(0.75);
    expect(policy.cachedShare?.([a], new RoutingInput({ prompt: ids(64) }))).toBe(0.25);
    expect(policy.cachedShare?.([], new RoutingInput({ prompt: ids(64) }))).toBe(0);
  });
});
