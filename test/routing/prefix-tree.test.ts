import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PrefixTree } from '../../src/routing/prefix-tree.js';
import { propertyOptions } from '../support/property.js';

/** The model: the longest common prefix in whole characters (code points) with any text sent to a worker. */
function modelMatch(sent: Map<string, string[]>, text: string, candidates: string[]) {
  const chars = Array.from(text);
  const held = (worker: string) =>
    Math.max(
      0,
      ...(sent.get(worker) ?? []).map((other) => {
        const theirs = Array.from(other);
        let units = 0;
        for (let i = 0; i < chars.length && i < theirs.length && chars[i] === theirs[i]; i++) {
          units += (chars[i] as string).length;
        }
        return units;
      }),
    );
  const length = Math.max(0, ...candidates.map(held));
  return { length, workers: length === 0 ? [] : candidates.filter((worker) => held(worker) === length) };
}

// Two emoji that share their high surrogate, a lone high surrogate, and plain letters.
const text = fc
  .array(fc.constantFrom('a', 'b', 'é', '😀', '😁', '\ud83d'), { maxLength: 12 })
  .map((parts) => parts.join(''));
const worker = fc.constantFrom('w0', 'w1', 'w2');

describe('PrefixTree', () => {
  it('property: the match is the longest prefix, in whole characters, of any text sent to a candidate', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(text, worker), { maxLength: 25 }),
        fc.array(fc.tuple(text, fc.subarray(['w0', 'w1', 'w2'], { minLength: 1 })), { minLength: 1, maxLength: 10 }),
        (inserts, queries) => {
          const tree = new PrefixTree<string>(1_000_000);
          const sent = new Map<string, string[]>();
          for (const [t, w] of inserts) {
            tree.insert(t, w);
            sent.set(w, [...(sent.get(w) ?? []), t]);
          }
          for (const [t, candidates] of queries)
            expect(tree.match(t, candidates)).toEqual(modelMatch(sent, t, candidates));
        },
      ),
      propertyOptions(1_000, 1130),
    );
  });

  it('a match never ends inside a character: two emoji that share a surrogate share no prefix', () => {
    const tree = new PrefixTree<string>(1_000);
    tree.insert('hi 😀', 'w0');
    expect(tree.match('hi 😁', ['w0'])).toEqual({ length: 3, workers: ['w0'] });
    expect(tree.match('hi 😀!', ['w0'])).toEqual({ length: 5, workers: ['w0'] });
  });

  it("counts each worker's characters once, and a worker removed is forgotten", () => {
    const tree = new PrefixTree<string>(1_000);
    tree.insert('system prompt: be brief. Q1', 'w0');
    tree.insert('system prompt: be brief. Q2', 'w0');
    tree.insert('system prompt: be brief. Q1', 'w1');
    expect(tree.sizeOf('w0')).toBe('system prompt: be brief. Q1'.length + 1);
    expect(tree.sizeOf('w1')).toBe('system prompt: be brief. Q1'.length);
    tree.remove('w0');
    expect(tree.sizeOf('w0')).toBe(0);
    expect(tree.match('system prompt: be brief. Q2', ['w0', 'w1'])).toEqual({ length: 26, workers: ['w1'] });
    expect(tree.match('system prompt', ['w0'])).toEqual({ length: 0, workers: [] });
  });

  it("past its bound a worker's least recently used texts go first, down to nine tenths; other workers keep theirs", () => {
    const tree = new PrefixTree<string>(100);
    const texts = ['A'.repeat(40), 'B'.repeat(40), 'C'.repeat(40)];
    tree.insert(texts[0] as string, 'w0');
    tree.insert(texts[0] as string, 'w1');
    tree.insert(texts[1] as string, 'w0');
    tree.insert(texts[0] as string, 'w0'); // A is used again: B is now the oldest
    tree.insert(texts[2] as string, 'w0'); // 120 > 100: B goes (80 <= 90)
    expect(tree.sizeOf('w0')).toBe(80);
    expect(tree.match(texts[1] as string, ['w0']).length).toBe(0);
    expect(tree.match(texts[0] as string, ['w0']).length).toBe(40);
    expect(tree.match(texts[2] as string, ['w0']).length).toBe(40);
    expect(tree.match(texts[0] as string, ['w1']).length).toBe(40);
  });

  it('evicts a shared prefix last: the tails go before the system prompt they share', () => {
    const tree = new PrefixTree<string>(60);
    const system = 'S'.repeat(30);
    tree.insert(`${system}${'x'.repeat(20)}`, 'w0');
    tree.insert(`${system}${'y'.repeat(20)}`, 'w0'); // 70 > 60: the older tail goes (50 <= 54)
    expect(tree.sizeOf('w0')).toBe(50);
    expect(tree.match(`${system}${'x'.repeat(20)}`, ['w0']).length).toBe(30);
    expect(tree.match(`${system}${'y'.repeat(20)}`, ['w0']).length).toBe(50);
  });
});
