import { describe, expect, it } from 'vitest';
import { FakePrefixCache } from '../../src/fakes/fake-prefix-cache.js';

const tokens = (text: string) => Math.ceil(text.length / 4);
const compute = (cache: FakePrefixCache, prompt: string) => cache.compute({ prompt }, tokens(prompt));

describe('FakePrefixCache', () => {
  it('a prompt computed before is found cached in whole blocks; the tail of a block is computed again', () => {
    const cache = new FakePrefixCache({ blockChars: 64, msPerToken: 1 });
    const prompt = 'x'.repeat(200); // three whole blocks and 8 characters
    expect(compute(cache, prompt)).toEqual({ cachedTokens: 0, computeMs: 50 });
    expect(compute(cache, prompt)).toEqual({ cachedTokens: 48, computeMs: 2 });
  });

  it('prompts sharing a system prompt share its whole blocks; after the first difference nothing is reused', () => {
    const cache = new FakePrefixCache({ blockChars: 16 });
    const system = 'S'.repeat(48);
    compute(cache, `${system}${'a'.repeat(32)}`);
    expect(compute(cache, `${system}${'b'.repeat(32)}`).cachedTokens).toBe(12);
    // Same later blocks after a different start: a block is named by everything before it too.
    expect(compute(cache, `${'T'.repeat(48)}${'a'.repeat(32)}`).cachedTokens).toBe(0);
  });

  it('chat messages are cut as a router renders them, so a growing conversation reuses its history', () => {
    const cache = new FakePrefixCache({ blockChars: 8 });
    const history = [{ role: 'system', content: 'You help with code. '.repeat(4) }];
    const turn1 = [...history, { role: 'user', content: 'first question' }];
    const turn2 = [...turn1, { role: 'assistant', content: 'an answer' }, { role: 'user', content: 'next' }];
    cache.compute({ messages: turn1 }, 100);
    expect(cache.compute({ messages: turn2 }, 100).cachedTokens).toBeGreaterThan(20);
  });

  it('holds capacityBlocks at most, dropping the least recently used', () => {
    const cache = new FakePrefixCache({ blockChars: 4, capacityBlocks: 4 });
    compute(cache, 'aaaabbbb'); // 2 blocks
    compute(cache, 'ccccdddd'); // 4
    compute(cache, 'aaaabbbb'); // used again: c, d are the oldest
    compute(cache, 'eeeeffff'); // c and d go
    expect(cache.size).toBe(4);
    expect(compute(cache, 'aaaabbbb').cachedTokens).toBe(2);
    expect(compute(cache, 'ccccdddd').cachedTokens).toBe(0);
  });
});
