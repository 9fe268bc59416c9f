import { beforeAll, describe, expect, it } from 'vitest';
import { KvBlockIndex } from '../../src/kv/block-index.js';
import { type BlockKeys, BlockKeys as BlockKeysOf, loadBlockKeys } from '../../src/kv/block-keys.js';
import type { KvEvent } from '../../src/kv/kv-events.js';

let keys: BlockKeys;
beforeAll(async () => {
  keys = await loadBlockKeys();
});

const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
function stored(blocks: string[], tokenIds: number[], parent?: string, extra: Partial<KvEvent> = {}): KvEvent {
  return {
    kind: 'stored',
    blocks,
    parent,
    tokenIds,
    blockSize: 4,
    lora: undefined,
    medium: 'GPU',
    group: 0,
    ...extra,
  } as KvEvent;
}

describe("BlockKeys: the router's own chained keys", () => {
  it('are the same for the same tokens, differ by position, content and scope, and cover whole blocks only', () => {
    const a = keys.keys(ids(10), 4);
    expect(a).toHaveLength(2);
    expect(keys.keys(ids(8), 4)).toEqual(a);
    expect(keys.keys([...ids(4, 4), ...ids(4)], 4)[1]).not.toBe(a[0]);
    expect(keys.keys(ids(8), 4, keys.root('adapter'))).not.toEqual(a);
    // A chain continued from a parent key equals the whole chain.
    expect(keys.keys(ids(4, 4), 4, a[0])).toEqual([a[1]]);
  });
});

describe("KvBlockIndex: who holds which blocks, from the engines' events", () => {
  it('a prompt matches, block by block from its start, the worker whose events stored it', () => {
    const index = new KvBlockIndex(keys);
    index.apply('w0', stored(['h1', 'h2'], ids(8)));
    // A later step stores the next block with the first as its parent.
    index.apply('w0', stored(['h3'], ids(4, 8), 'h2'));
    index.apply('w1', stored(['g1'], ids(4)));
    expect(index.overlap(ids(14), ['w0', 'w1', 'w2'])).toEqual(
      new Map([
        ['w0', 12],
        ['w1', 4],
        ['w2', 0],
      ]),
    );
    expect(index.blocks('w0')).toBe(3);
    expect(index.blockSize('w0')).toBe(4);
  });

  it('a removal ends the match at the removed block; a clear or a restart forgets the worker', () => {
    const index = new KvBlockIndex(keys);
    index.apply('w0', stored(['h1', 'h2', 'h3'], ids(12)));
    index.apply('w0', { kind: 'removed', blocks: ['h2'], medium: 'GPU', group: 0 });
    expect(index.overlap(ids(12), ['w0']).get('w0')).toBe(4);
    index.apply('w0', { kind: 'cleared' });
    expect(index.overlap(ids(12), ['w0']).get('w0')).toBe(0);
    index.apply('w0', stored(['h1'], ids(4)));
    index.clear('w0');
    expect(index.blocks('w0')).toBe(0);
  });

  it('a store whose parent it never saw, or without token ids, is skipped rather than guessed', () => {
    const index = new KvBlockIndex(keys);
    expect(index.apply('w0', stored(['h9'], ids(4, 8), 'unknown'))).toBe('skipped');
    expect(index.apply('w0', stored(['h9'], [], undefined, { tokenIds: undefined }))).toBe('skipped');
    expect(index.blocks('w0')).toBe(0);
  });

  it('CPU-offload blocks and other KV cache groups do not count; a LoRA adapter is its own scope', () => {
    const index = new KvBlockIndex(keys);
    expect(index.apply('w0', stored(['c1'], ids(4), undefined, { medium: 'CPU' }))).toBe('ignored');
    expect(index.apply('w0', stored(['s1'], ids(4), undefined, { group: 1 }))).toBe('ignored');
    index.apply('w1', stored(['l1'], ids(4), undefined, { lora: 'sql' }));
    expect(index.overlap(ids(4), ['w0', 'w1']).get('w1')).toBe(0);
    expect(index.overlap(ids(4), ['w1'], 'sql').get('w1')).toBe(4);
  });

  it('an untrusted view (events lost, not yet replayed) matches nothing until trusted again', () => {
    const index = new KvBlockIndex(keys);
    index.apply('w0', stored(['h1'], ids(4)));
    index.setTrusted('w0', false);
    expect(index.overlap(ids(4), ['w0']).get('w0')).toBe(0);
    index.setTrusted('w0', true);
    expect(index.overlap(ids(4), ['w0']).get('w0')).toBe(4);
  });

  it('workers of different block sizes are each matched at their own size', () => {
    const index = new KvBlockIndex(keys);
    index.apply('w4', stored(['a', 'b'], ids(8)));
    index.apply('w8', stored(['c'], ids(8), undefined, { blockSize: 8 }));
    expect(index.overlap(ids(10), ['w4', 'w8'])).toEqual(
      new Map([
        ['w4', 8],
        ['w8', 8],
      ]),
    );
  });

  it('holds at most maxBlocksPerWorker, dropping the oldest', () => {
    const index = new KvBlockIndex(keys, { maxBlocksPerWorker: 2 });
    index.apply('w0', stored(['h1', 'h2', 'h3'], ids(12)));
    expect(index.blocks('w0')).toBe(2);
    expect(index.overlap(ids(12), ['w0']).get('w0')).toBe(0);
  });
});

describe('KvBlockIndex: speculative entries', () => {
  it('a prompt just routed counts as held until the engine confirms it, or until it expires', () => {
    let now = 0;
    const index = new KvBlockIndex(keys, { now: () => now });
    index.apply('w0', stored(['h0'], ids(4, 100))); // w0's block size is known: 4
    index.expect('w0', ids(12), 1000);
    expect(index.overlap(ids(12), ['w0', 'w1']).get('w0')).toBe(12);
    // Confirmed by the store event: held for good, whatever the clock says.
    index.apply('w0', stored(['h1'], ids(4)));
    now = 5000;
    expect(index.overlap(ids(12), ['w0']).get('w0')).toBe(4);
  });

  it('a clear drops what was expected too', () => {
    const index = new KvBlockIndex(keys, { now: () => 0 });
    index.expect('w0', ids(8), 1000, undefined, 4);
    index.apply('w0', { kind: 'cleared' });
    expect(index.overlap(ids(8), ['w0']).get('w0')).toBe(0);
  });
});

describe('KvBlockIndex: scopes', () => {
  it("a request naming a LoRA adapter the events named, or a cache salt, matches only that scope's blocks", () => {
    const index = new KvBlockIndex(keys);
    index.apply('base', stored(['b1'], ids(4)));
    index.apply('lora', stored(['l1'], ids(4), undefined, { lora: 'sql' }));
    index.apply('salted', stored(['s1'], ids(4), undefined, { salt: 'tenant-a' } as Partial<KvEvent>));
    const all = ['base', 'lora', 'salted'];
    expect(index.scopeOf({ model: 'Qwen3-8B' })).toBeUndefined();
    expect(index.overlap(ids(4), all, index.scopeOf({ model: 'Qwen3-8B' }))).toEqual(
      new Map([
        ['base', 4],
        ['lora', 0],
        ['salted', 0],
      ]),
    );
    expect(index.overlap(ids(4), all, index.scopeOf({ model: 'sql' })).get('lora')).toBe(4);
    expect(index.overlap(ids(4), all, index.scopeOf({ model: 'Qwen3-8B', cache_salt: 'tenant-a' })).get('salted')).toBe(
      4,
    );
    expect(index.overlap(ids(4), all, index.scopeOf({ model: 'Qwen3-8B', cache_salt: 'tenant-a' })).get('base')).toBe(
      0,
    );
  });
});

describe("a prompt's keys", () => {
  it('are hashed once per request however many pools match it and expect it, and again for another prompt', () => {
    let hashed = 0;
    const counting = new BlockKeysOf((input, seed) => {
      hashed++;
      return keys.keys(
        Array.from(new Uint32Array(input.buffer, input.byteOffset, input.byteLength / 4)),
        input.byteLength / 4,
        seed,
      )[0] as bigint;
    });
    const index = new KvBlockIndex(counting);
    const ids = Array.from({ length: 64 }, (_, i) => i + 1);
    index.apply('w0', {
      kind: 'stored',
      blocks: ['1'],
      parent: undefined,
      tokenIds: ids.slice(0, 16),
      blockSize: 16,
      lora: undefined,
      medium: 'GPU',
      group: 0,
    });
    const stored = hashed;
    index.overlap(ids, ['w0', 'w1']);
    index.overlap(ids, ['w0']);
    index.expect('w1', ids, 1000);
    expect(hashed - stored).toBe(4);
    expect(index.overlap(ids, ['w0']).get('w0')).toBe(16);
    // Another request's token ids, equal or not, are its own.
    index.overlap([...ids], ['w0']);
    expect(hashed - stored).toBe(8);
  });
});
