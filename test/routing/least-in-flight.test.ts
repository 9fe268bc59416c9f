import { describe, expect, it } from 'vitest';
import { leastInFlight } from '../../src/routing/least-in-flight.js';

describe('leastInFlight', () => {
  it('equally idle workers take turns, each one place further', () => {
    const policy = leastInFlight<string>();
    const idle = { inFlight: () => 0 };
    expect([1, 2, 3, 4, 5].map(() => policy.select(['a', 'b', 'c'], idle, undefined))).toEqual([
      'a',
      'b',
      'c',
      'a',
      'b',
    ]);
  });

  it('the least loaded wins wherever the turn starts', () => {
    const policy = leastInFlight<string>();
    const load = { inFlight: (worker: string) => (worker === 'b' ? 0 : 2) };
    expect([1, 2, 3].map(() => policy.select(['a', 'b', 'c'], load, undefined))).toEqual(['b', 'b', 'b']);
  });
});
