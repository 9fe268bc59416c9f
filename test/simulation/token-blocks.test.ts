import { describe, expect, it } from 'vitest';
import { tokenBlocks } from '../../src/simulation/token-blocks.js';

const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

describe('a live prompt’s blocks', () => {
  it('one block per 512 tokens, the last one shorter', () => {
    expect(tokenBlocks(ids(1100, 1))).toHaveLength(3);
    expect(tokenBlocks(ids(1024, 1))).toHaveLength(2);
    expect(tokenBlocks([])).toEqual([]);
  });

  it('prompts that begin alike begin with the same blocks, and part where their tokens do', () => {
    const a = tokenBlocks([...ids(1024, 1), ...ids(600, 5000)]);
    const b = tokenBlocks([...ids(1024, 1), ...ids(600, 9000)]);
    expect(b.slice(0, 2)).toEqual(a.slice(0, 2));
    expect(b[2]).not.toBe(a[2]);
  });

  it('a block is named by every token before it: the same tokens after another prefix are another block', () => {
    const tail = ids(512, 7000);
    const a = tokenBlocks([...ids(512, 1), ...tail]);
    const b = tokenBlocks([...ids(512, 2), ...tail]);
    expect(b[1]).not.toBe(a[1]);
  });

  it('a partial last block is not the whole block its tokens begin', () => {
    const whole = tokenBlocks(ids(1024, 1));
    const partial = tokenBlocks(ids(1000, 1));
    expect(partial[0]).toBe(whole[0]);
    expect(partial[1]).not.toBe(whole[1]);
  });

  it('ids are safe integers', () => {
    for (const id of tokenBlocks(ids(5000, 3))) expect(Number.isSafeInteger(id)).toBe(true);
  });
});
