// The picker plugins: max-score by default, weighted-random by name; each checked in one line.
import { describe, expect, it, vi } from 'vitest';
import { DEFAULT_PICKER, PICKER_NAMES, pickerPlugin, readPicker } from '../../src/routing/picker-plugins.js';
import { scoredFrom } from '../../src/routing/plugins.js';
import { weightedRandomPicker } from '../../src/routing/scoring.js';

type W = { url: string };
const [a, b, c] = ['a', 'b', 'c'].map((name) => ({ url: `http://${name}` })) as [W, W, W];
const idle = { inFlight: () => 0 };

describe('readPicker', () => {
  it('takes a name (a flag) or { name, params } (a file)', () => {
    expect(readPicker('weighted-random')).toEqual({ name: 'weighted-random' });
    expect(readPicker({ name: 'max-score', params: {} })).toEqual({ name: 'max-score', params: {} });
    expect(DEFAULT_PICKER).toEqual({ name: 'max-score' });
  });

  it('refuses an unknown name with the closest, a parameter it does not take, a stray key, no name', () => {
    expect(() => readPicker('weighted-randon')).toThrow(
      `names no picker "weighted-randon" (did you mean weighted-random?): the pickers are ${PICKER_NAMES.join(', ')}`,
    );
    expect(() => readPicker({ name: 'max-score', params: { ties: 1 } })).toThrow(
      'has picker max-score with no parameter ties (it takes none)',
    );
    expect(() => readPicker({ name: 'max-score', weight: 1 })).toThrow(
      'has picker max-score with weight: an entry takes name and params',
    );
    expect(() => readPicker(3)).toThrow(`has 3: a picker is one of ${PICKER_NAMES.join(', ')}, or { name, params? }`);
    expect(pickerPlugin('max-score').consumes).toEqual({});
    expect(() => pickerPlugin('none')).toThrow(`names no picker "none": the pickers are ${PICKER_NAMES.join(', ')}`);
  });
});

describe('weightedRandomPicker', () => {
  it('chooses each candidate with a chance in proportion to its total', () => {
    let next = 0;
    const picker = weightedRandomPicker<W>(() => next);
    const scores = [1, 0, 3];
    // The totals split [0, 4) as a: [0, 1), b: nothing, c: [1, 4).
    for (const [at, expected] of [
      [0, a],
      [0.2499, a],
      [0.25, c],
      [0.9999, c],
    ] as const) {
      next = at;
      expect(picker.pick([a, b, c], scores, idle)).toBe(expected);
    }
  });

  it('all totals 0: each candidate alike', () => {
    let next = 0;
    const picker = weightedRandomPicker<W>(() => next);
    const picks = [0, 0.34, 0.67].map((at) => {
      next = at;
      return picker.pick([a, b, c], [0, 0, 0], idle);
    });
    expect(picks).toEqual([a, b, c]);
  });

  it('a sum rounded short still lands on the last candidate with a score', () => {
    const picker = weightedRandomPicker<W>(() => 1 - Number.EPSILON);
    expect(picker.pick([a, b, c], [0.1, 0.2, 0], idle)).toBe(b);
  });

  it('is what a scored policy picks with when the settings name it', () => {
    const random = vi.spyOn(Math, 'random').mockReturnValue(0.9);
    try {
      // The load scorer gives a 1 and b 0 (b is busier): weighted-random can only pick a.
      const busy = { inFlight: (worker: W) => (worker === b ? 3 : 0) };
      const policy = scoredFrom<W>([{ name: 'load' }], {}, { picker: { name: 'weighted-random' } });
      expect(policy.select([a, b], busy, undefined)).toBe(a);
      expect(random).toHaveBeenCalled();
    } finally {
      random.mockRestore();
    }
  });
});

describe('weightedRandomPicker, at the edges', () => {
  it('is named, and a draw past every total lands on the last candidate with a score', () => {
    expect(weightedRandomPicker<W>().name).toBe('weighted-random');
    // A source that returns 1 (past [0, 1)) goes through every total without landing.
    const picker = weightedRandomPicker<W>(() => 1);
    expect(picker.pick([a, b, c], [0.1, 0.2, 0], idle)).toBe(b);
    expect(picker.pick([a, b, c], [0.5, 0, 0], idle)).toBe(a);
    expect(picker.pick([a, b, c], [0, 0, 0.5], idle)).toBe(c);
  });

  it('readPicker trims a flag value, and refuses null or a name that is no string', () => {
    expect(readPicker(' weighted-random ')).toEqual({ name: 'weighted-random' });
    expect(() => readPicker(null)).toThrow(/^has null: a picker is/);
    expect(() => readPicker({ name: 3 })).toThrow(/^has \{"name":3\}: a picker is/);
  });
});
