import { describe, expect, it } from 'vitest';
import { random } from '../../src/routing/random.js';

describe('random', () => {
  it('draws a candidate uniformly, only among the candidates', () => {
    const draws = [0, 0.34, 0.67, 0.999];
    let i = 0;
    const policy = random<string>({ random: () => draws[i++ % draws.length] as number });
    const idle = { inFlight: () => 0 };
    expect(draws.map(() => policy.select(['a', 'b', 'c'], idle, undefined))).toEqual(['a', 'b', 'c', 'c']);
    expect(policy.select(['only'], idle, undefined)).toBe('only');
  });
});
