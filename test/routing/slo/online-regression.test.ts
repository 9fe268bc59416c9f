import { describe, expect, it } from 'vitest';
import { OnlineRidge } from '../../../src/routing/slo/online-regression.js';
import { SeededRandom } from '../../../src/simulation/workload-random.js';

/** A seeded source of numbers in [0, 1), so that the noise is the same every run. */
function seeded(seed: number): () => number {
  const random = new SeededRandom(seed);
  return () => random.next();
}

describe('OnlineRidge', () => {
  it('learns a known linear relation from noisy samples', () => {
    const random = seeded(7);
    const fit = new OnlineRidge(3);
    for (let i = 0; i < 400; i++) {
      const x = [1, random() * 10, random() * 5];
      const noise = (random() - 0.5) * 4;
      fit.learn(x, 20 + 30 * (x[1] as number) + 8 * (x[2] as number) + noise);
    }
    const [bias, perToken, perQueued] = fit.weights;
    expect(bias).toBeCloseTo(20, -0.5);
    expect(perToken).toBeCloseTo(30, 0);
    expect(perQueued).toBeCloseTo(8, 0);
    expect(fit.predict([1, 4, 2])).toBeGreaterThan(156 - 3);
    expect(fit.predict([1, 4, 2])).toBeLessThan(156 + 3);
    expect(fit.samples).toBe(400);
  });

  it('forgets an old relation after it changed: with forgetting, the new one is predicted; without, the fit stays between', () => {
    const random = seeded(11);
    const forgetful = new OnlineRidge(2, { forgetting: 0.95 });
    const remembering = new OnlineRidge(2, { forgetting: 1 });
    const feed = (slope: number, count: number) => {
      for (let i = 0; i < count; i++) {
        const x = [1, random() * 10];
        const y = 5 + slope * (x[1] as number) + (random() - 0.5);
        forgetful.learn(x, y);
        remembering.learn(x, y);
      }
    };
    feed(10, 300);
    expect(forgetful.predict([1, 5])).toBeCloseTo(55, -0.5);
    // The worker became four times slower per token.
    feed(40, 200);
    expect(forgetful.predict([1, 5])).toBeGreaterThan(205 - 3);
    expect(forgetful.predict([1, 5])).toBeLessThan(205 + 3);
    expect(remembering.predict([1, 5])).toBeLessThan(180);
  });

  it('a feature that never varies does not wind the fit up: after a long run the weights stay finite and a new value moves them by a bounded step', () => {
    const fit = new OnlineRidge(2, { forgetting: 0.98 });
    // 40,000 samples whose second feature is always 0: forgetting alone would inflate its
    // variance past what a double holds.
    for (let i = 0; i < 40_000; i++) fit.learn([1, 0], 100);
    expect(fit.weights.every(Number.isFinite)).toBe(true);
    fit.learn([1, 1], 110);
    expect(fit.weights.every(Number.isFinite)).toBe(true);
    expect(fit.predict([1, 0])).toBeCloseTo(100, 0);
    expect(fit.predict([1, 1])).toBeGreaterThan(100);
    expect(fit.predict([1, 1])).toBeLessThanOrEqual(110.5);
  });

  it('ignores a sample with a value that is not finite', () => {
    const fit = new OnlineRidge(2);
    for (let i = 0; i < 10; i++) fit.learn([1, i], 2 * i);
    const before = fit.weights;
    fit.learn([1, 3], Number.NaN);
    fit.learn([1, Number.POSITIVE_INFINITY], 3);
    expect(fit.weights).toEqual(before);
    expect(fit.samples).toBe(10);
  });

  it('refuses a dimension, a forgetting factor or a ridge out of range, and features of another length', () => {
    expect(() => new OnlineRidge(0)).toThrow(RangeError);
    expect(() => new OnlineRidge(2, { forgetting: 0 })).toThrow(/forgetting/);
    expect(() => new OnlineRidge(2, { forgetting: 1.01 })).toThrow(/forgetting/);
    expect(() => new OnlineRidge(2, { ridge: 0 })).toThrow(/ridge/);
    expect(() => new OnlineRidge(2).learn([1], 1)).toThrow(/expects 2 features/);
    expect(() => new OnlineRidge(2).predict([1, 2, 3])).toThrow(/expects 2 features/);
  });
});
