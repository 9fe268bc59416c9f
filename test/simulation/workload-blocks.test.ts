import { describe, expect, it } from 'vitest';
import { BlockHasher, tokensOf } from '../../src/simulation/workload-blocks.js';

describe('a generated prompt’s block hashes', () => {
  it('gives the same content at the same place the same ids, and new content fresh ids from 0 up', () => {
    const hasher = new BlockHasher();
    const system = hasher.segment(1024);
    expect(hasher.blocks([system, hasher.segment(300)])).toEqual([0, 1, 2]);
    expect(hasher.blocks([system, hasher.segment(900)])).toEqual([0, 1, 3, 4]);
  });

  it('holds ceil(tokens / 512) blocks, a block straddling two segments one block', () => {
    const hasher = new BlockHasher();
    const prompt = [hasher.segment(700), hasher.segment(700), hasher.segment(1)];
    expect(tokensOf(prompt)).toBe(1401);
    expect(hasher.blocks(prompt)).toHaveLength(3);
    expect(hasher.blocks([hasher.segment(512)])).toHaveLength(1);
  });

  it('makes a block behind other blocks another block, as a prefix cache keys it: a document in second place is not its first-place self', () => {
    const hasher = new BlockHasher();
    const a = hasher.segment(512);
    const b = hasher.segment(512);
    const first = hasher.blocks([a, b]);
    const second = hasher.blocks([b, a]);
    expect(second[0]).not.toBe(first[1]);
    expect(second[1]).not.toBe(first[0]);
    expect(hasher.blocks([a, b])).toEqual(first);
  });

  it('makes a partial last block its own content: the same tokens and more are another block', () => {
    const hasher = new BlockHasher();
    const turn = [hasher.segment(1000)];
    const before = hasher.blocks(turn);
    const after = hasher.blocks([...turn, hasher.segment(100)]);
    expect(after[0]).toBe(before[0]);
    expect(after[1]).not.toBe(before[1]);
    // The same partial content again is the same block.
    expect(hasher.blocks(turn)).toEqual(before);
  });
});
