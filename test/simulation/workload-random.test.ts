import { describe, expect, it } from 'vitest';
import { SeededRandom, Zipf } from '../../src/simulation/workload-random.js';

const draws = (random: SeededRandom, n: number) => Array.from({ length: n }, () => random.next());

describe('the workloads’ seeded randomness', () => {
  it('repeats its stream for a seed, and neighbouring seeds start apart', () => {
    expect(draws(new SeededRandom(3), 50)).toEqual(draws(new SeededRandom(3), 50));
    const a = draws(new SeededRandom(1), 50);
    const b = draws(new SeededRandom(2), 50);
    expect(a.filter((value, i) => Math.abs(value - (b[i] as number)) < 0.01).length).toBeLessThan(5);
  });

  it('draws uniformly in [0, 1), and exponentials and lognormal token counts of the mean and median asked for', () => {
    const random = new SeededRandom(11);
    const uniform = draws(random, 20_000);
    expect(Math.min(...uniform)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...uniform)).toBeLessThan(1);
    expect(uniform.reduce((sum, value) => sum + value, 0) / uniform.length).toBeCloseTo(0.5, 1);
    let sum = 0;
    for (let i = 0; i < 20_000; i++) sum += random.exponential(250);
    expect(sum / 20_000 / 250).toBeCloseTo(1, 1);
    const tokens = Array.from({ length: 20_001 }, () => random.tokens(1000, 1, 10, 50_000)).sort((x, y) => x - y);
    expect((tokens[10_000] as number) / 1000).toBeCloseTo(1, 1);
    expect(tokens[0]).toBeGreaterThanOrEqual(10);
    expect(Number.isInteger(tokens[7])).toBe(true);
  });

  it('draws Zipf’s law: item i about 1/(i+1) as often as item 0 for an exponent of 1', () => {
    const zipf = new Zipf(100, 1);
    const random = new SeededRandom(5);
    const counts = new Array<number>(100).fill(0);
    for (let i = 0; i < 100_000; i++) {
      const item = zipf.draw(random);
      counts[item] = (counts[item] as number) + 1;
    }
    expect((counts[1] as number) / (counts[0] as number)).toBeCloseTo(0.5, 1);
    expect((counts[9] as number) / (counts[0] as number)).toBeCloseTo(0.1, 1);
    expect(counts[99]).toBeGreaterThan(0);
  });
});
