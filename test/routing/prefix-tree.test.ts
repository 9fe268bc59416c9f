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
// The edges of the surrogate ranges (U+10000 and U+10FC00 start with 0xd800 and 0xdbff; 🐀 and
// U+1F7FF end with 0xdc00 and 0xdfff), lone low surrogates, the first character past them
// (U+E000), and runs longer than the 256 characters compared at a time.
const edgyText = fc
  .array(
    fc.constantFrom(
      'a',
      'b',
      '\ud83d',
      '\udc00',
      '\udfff',
      '\ue000',
      '\u{10000}',
      '\u{10001}',
      '\u{10fc00}',
      '\u{10fc01}',
      '🐀',
      '\u{1f7ff}',
      'a'.repeat(300),
      'a'.repeat(256),
    ),
    { maxLength: 8 },
  )
  .map((parts) => parts.join(''));

/** Sends `inserts` to a tree, then checks each query's match against the model's. */
function matchesTheModel(inserts: Array<[string, string]>, queries: Array<[string, string[]]>): void {
  const tree = new PrefixTree<string>(1_000_000);
  const sent = new Map<string, string[]>();
  for (const [t, w] of inserts) {
    tree.insert(t, w);
    sent.set(w, [...(sent.get(w) ?? []), t]);
  }
  for (const [t, candidates] of queries) expect(tree.match(t, candidates)).toEqual(modelMatch(sent, t, candidates));
}

describe('PrefixTree', () => {
  it('property: the match is the longest prefix, in whole characters, of any text sent to a candidate', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(text, worker), { maxLength: 25 }),
        fc.array(fc.tuple(text, fc.subarray(['w0', 'w1', 'w2'], { minLength: 1 })), { minLength: 1, maxLength: 10 }),
        matchesTheModel,
      ),
      propertyOptions(1_000, 1130),
    );
  });

  it('property: the same for texts at the edges of the surrogate ranges and with long shared runs', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(edgyText, worker), { maxLength: 12 }),
        fc.array(fc.tuple(edgyText, fc.subarray(['w0', 'w1', 'w2'], { minLength: 1 })), { minLength: 1, maxLength: 8 }),
        matchesTheModel,
      ),
      propertyOptions(500, 1131),
    );
  });

  it('a match never ends inside a character: two emoji that share a surrogate share no prefix', () => {
    const tree = new PrefixTree<string>(1_000);
    tree.insert('hi 😀', 'w0');
    expect(tree.match('hi 😁', ['w0'])).toEqual({ length: 3, workers: ['w0'] });
    expect(tree.match('hi 😀!', ['w0'])).toEqual({ length: 5, workers: ['w0'] });
  });

  it('a lone surrogate is a character of its own: it matches as one, and ends a match before a pair', () => {
    const tree = new PrefixTree<string>(1_000);
    tree.insert('a\udc00b', 'w0'); // a lone low surrogate after a letter
    expect(tree.match('a\udc00c', ['w0'])).toEqual({ length: 2, workers: ['w0'] });
    expect(tree.match('ab', ['w0'])).toEqual({ length: 1, workers: ['w0'] });
    tree.insert('x\ud83dy', 'w1'); // a lone high surrogate before a letter
    expect(tree.match('x\ud83dz', ['w1'])).toEqual({ length: 2, workers: ['w1'] });
    expect(tree.match('x😀', ['w1'])).toEqual({ length: 1, workers: ['w1'] });
  });

  it('a long shared history is matched exactly, past the stretches compared at a time', () => {
    const tree = new PrefixTree<string>(1_000_000);
    const run = (n: number) => 'A'.repeat(n);
    tree.insert(`${run(256)}B`, 'w0');
    tree.insert(`${run(256)}C`, 'w0'); // one node of 256 characters, then the branches
    tree.insert(`${run(856)}x`, 'w0');
    expect(tree.match(`${run(512)}${'B'.repeat(300)}`, ['w0']).length).toBe(512);
    expect(tree.match(`${run(700)}y`, ['w0']).length).toBe(700);
    expect(tree.match(`${run(856)}x and more`, ['w0']).length).toBe(857);
    expect(tree.match(run(300), ['w0']).length).toBe(300);
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

  it('a worker at its bound keeps everything: eviction starts past maxChars, not at it', () => {
    const tree = new PrefixTree<string>(100);
    const texts = Array.from({ length: 10 }, (_, i) => String.fromCharCode(65 + i).repeat(10));
    for (const text of texts) tree.insert(text, 'w0');
    expect(tree.sizeOf('w0')).toBe(100);
    for (const text of texts) expect(tree.match(text, ['w0']).length).toBe(10);
  });

  it('one text past the bound drops the least recently used down to exactly nine tenths, and no further', () => {
    const tree = new PrefixTree<string>(100);
    const texts = Array.from({ length: 11 }, (_, i) => String.fromCharCode(65 + i).repeat(10));
    for (const text of texts) tree.insert(text, 'w0'); // 110 > 100: the two oldest go (90 <= 90)
    expect(tree.sizeOf('w0')).toBe(90);
    expect(texts.map((text) => tree.match(text, ['w0']).length)).toEqual([0, 0, 10, 10, 10, 10, 10, 10, 10, 10, 10]);
  });

  it('a text evicted for one worker stays for the others that hold it', () => {
    const tree = new PrefixTree<string>(100);
    const [a, b, c] = ['A'.repeat(40), 'B'.repeat(40), 'C'.repeat(40)];
    tree.insert(a, 'w0');
    tree.insert(a, 'w1');
    tree.insert(b, 'w0');
    tree.insert(c, 'w0'); // 120 > 100: w0's oldest, A, goes
    expect(tree.sizeOf('w0')).toBe(80);
    expect(tree.match(a, ['w0', 'w1'])).toEqual({ length: 40, workers: ['w1'] });
    expect(tree.match(b, ['w0', 'w1'])).toEqual({ length: 40, workers: ['w0'] });
  });

  it("only a worker's own leaves are evicted: another worker's branch under a shared prefix does not make the prefix a leaf", () => {
    const tree = new PrefixTree<string>(60);
    const system = 'S'.repeat(30);
    tree.insert(`${system}${'x'.repeat(20)}`, 'w0');
    tree.insert(`${system}${'z'.repeat(20)}`, 'w1');
    tree.insert(`${system}${'y'.repeat(25)}`, 'w0'); // 75 > 60: both of w0's tails go (55, then 30 <= 54)
    expect(tree.sizeOf('w0')).toBe(30);
    expect(tree.match(`${system}${'x'.repeat(20)}`, ['w0']).length).toBe(30);
    expect(tree.match(`${system}${'y'.repeat(25)}`, ['w0']).length).toBe(30);
    expect(tree.match(`${system}${'z'.repeat(20)}`, ['w0', 'w1'])).toEqual({ length: 50, workers: ['w1'] });
    expect(tree.sizeOf('w1')).toBe(50);
  });

  it('a worker removed and sent a text again holds only that text, not what it held before', () => {
    const tree = new PrefixTree<string>(1_000);
    tree.insert('abcdef', 'w0');
    tree.insert('abcxyz', 'w0');
    tree.insert('abq', 'w1');
    tree.remove('w0');
    tree.remove('w2'); // never sent anything: nothing changes
    tree.insert('abc', 'w0');
    expect(tree.sizeOf('w0')).toBe(3);
    expect(tree.match('abcdef', ['w0'])).toEqual({ length: 3, workers: ['w0'] });
    expect(tree.match('abcxyz', ['w0'])).toEqual({ length: 3, workers: ['w0'] });
    expect(tree.match('abqdef', ['w0', 'w1'])).toEqual({ length: 3, workers: ['w1'] });
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
