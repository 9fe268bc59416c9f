import { describe, expect, it } from 'vitest';
import { closest } from '../../src/util/closest.js';

const flags = ['prefill', 'decode', 'port', 'connector', 'bootstrapPort', 'routing'];

describe('closest: the did-you-mean of a misspelt setting', () => {
  it.each([
    ['prefil', 'prefill'],
    ['prot', 'port'],
    ['conenctor', 'connector'],
    ['routnig', 'routing'],
    ['bootstrap_port', 'bootstrapPort'],
    ['DECODE', 'decode'],
  ])('%s is most likely %s (a letter missing or extra, two swapped, another case or separator)', (typo, meant) => {
    expect(closest(typo, flags)).toBe(meant);
  });

  it('a name far from every known one gets no hint rather than a wild guess', () => {
    expect(closest('xyzzy', flags)).toBeUndefined();
    expect(closest('pt', flags)).toBeUndefined();
  });
});
