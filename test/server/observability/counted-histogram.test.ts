import fc from 'fast-check';
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CountedHistogram } from '../../../src/server/observability/counted-histogram.js';
import { propertyOptions } from '../../support/property.js';

const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.1, 1];

/** The same observations in a prom-client Histogram and a CountedHistogram, each in a registry of its own. */
function pair() {
  const theirs = new Registry();
  const ours = new Registry();
  const histogram = new Histogram({ name: 'gap_seconds', help: 'Gaps', buckets: BUCKETS, registers: [theirs] });
  const counted = new CountedHistogram('gap_seconds', 'Gaps', BUCKETS, [ours]);
  return {
    observe: (value: number) => {
      histogram.observe(value);
      counted.observe(value);
    },
    theirs,
    ours,
  };
}

describe('CountedHistogram: what a scrape shows is what prom-client shows for the same observations', () => {
  it('for any values (on a bound, between, above the last, negative, zero): the same text and the same JSON', async () => {
    const value = fc.oneof(fc.constantFrom(...BUCKETS, 0, -1, 5), fc.double({ min: -1, max: 3, noNaN: true }));
    await fc.assert(
      fc.asyncProperty(fc.array(value, { maxLength: 40 }), async (values) => {
        const { observe, theirs, ours } = pair();
        for (const each of values) observe(each);
        expect(await ours.metrics()).toBe(await theirs.metrics());
        expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
      }),
      propertyOptions(200, 53),
    );
  });

  it('zeros before any observation; nothing after a reset until the next one, then only what came after', async () => {
    const { observe, theirs, ours } = pair();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    observe(0.003);
    theirs.resetMetrics();
    ours.resetMetrics();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).not.toContain('gap_seconds_count');
    observe(0.5);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain('gap_seconds_count 1');
  });

  it('a value that is not a finite number is refused, as prom-client refuses it, and counts nothing', async () => {
    const counted = new CountedHistogram('gap_seconds', 'Gaps', BUCKETS, []);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) expect(() => counted.observe(bad)).toThrow(TypeError);
    expect((await counted.get()).values.at(-1)).toEqual({ labels: {}, value: 0, metricName: 'gap_seconds_count' });
  });
});
