import { beforeAll, describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { KvBlockIndex } from '../../src/kv/block-index.js';
import { type BlockKeys, loadBlockKeys } from '../../src/kv/block-keys.js';
import { precisePrefix } from '../../src/routing/kv-prefix.js';
import { RoutingInput } from '../../src/routing/routing-input.js';

let keys: BlockKeys;
beforeAll(async () => {
  keys = await loadBlockKeys();
});

type W = { url: string };
const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const store = (index: KvBlockIndex<W>, worker: W, tokens: number[], handle: string) =>
  index.apply(worker, {
    kind: 'stored',
    blocks: Array.from({ length: tokens.length / 16 }, (_, i) => `${handle}${i}`),
    parent: undefined,
    tokenIds: tokens,
    blockSize: 16,
    lora: undefined,
    medium: 'GPU',
    group: 0,
  });

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
