// The filter plugins as the settings give them: names or entries with params, each checked by
// its plugin in one line; what they read declared; the scored policy applying them in order.
import { describe, expect, it } from 'vitest';
import type { EngineLoad } from '../../src/protocol/engines/load-metrics.js';
import { FILTER_NAMES, FILTERS, filterPlugin, readFilters } from '../../src/routing/filter-plugins.js';
import { scoredFrom, scorersConsume } from '../../src/routing/plugins.js';
import { policyConsumes } from '../../src/routing/registry.js';

type W = { url: string };
const a: W = { url: 'http://a' };
const b: W = { url: 'http://b' };
const idle = { inFlight: () => 0 };

describe('readFilters', () => {
  it('takes names comma-separated (a flag), a list of names or entries (a file), and none', () => {
    expect(readFilters('low-queue, low-kv-usage')).toEqual([{ name: 'low-queue' }, { name: 'low-kv-usage' }]);
    expect(readFilters(['low-queue', { name: 'low-kv-usage', params: { maxKvUsage: '0.9' } }])).toEqual([
      { name: 'low-queue' },
      { name: 'low-kv-usage', params: { maxKvUsage: 0.9 } },
    ]);
    expect(readFilters([])).toEqual([]);
    expect(readFilters('')).toEqual([]);
  });

  it('refuses, in one line naming the filter, an unknown name, parameter or value, a stray key, a name twice', () => {
    const refusal = (value: unknown) => {
      try {
        readFilters(value);
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        return (error as Error).message;
      }
      throw new Error('expected a RangeError');
    };
    expect(refusal('low-queu')).toBe(
      `names no filter "low-queu" (did you mean low-queue?): the filters are ${FILTER_NAMES.join(', ')}`,
    );
    expect(refusal([{ name: 'low-queue', params: { maxWaitng: 3 } }])).toBe(
      'has filter low-queue with no parameter maxWaitng (did you mean maxWaiting?)',
    );
    expect(refusal([{ name: 'low-queue', params: { maxWaiting: -1 } }])).toBe(
      'has filter low-queue with maxWaiting -1: it must be a whole number of 0 or more',
    );
    expect(refusal([{ name: 'low-kv-usage', params: { maxKvUsage: 1.5 } }])).toBe(
      'has filter low-kv-usage with maxKvUsage 1.5: it must be a number above 0 and at most 1',
    );
    expect(refusal([{ name: 'low-queue', weight: 2 }])).toBe(
      'has filter low-queue with weight: an entry takes name and params',
    );
    expect(refusal('low-queue,low-queue')).toBe('names filter low-queue twice');
    expect(refusal(7)).toBe(`must list filters (${FILTER_NAMES.join(', ')}), got 7`);
    expect(refusal([7])).toBe('has 7: a filter is a name or { name, params? }');
  });
});

describe('the filter plugins', () => {
  it("the load filters read the engines' load, and a scored policy with one requires it; same-label reads none", () => {
    for (const plugin of FILTERS.filter((each) => each.name.startsWith('low-'))) {
      expect(plugin.consumes).toEqual({ 'engine-load': 'required' });
    }
    expect(filterPlugin('same-label').consumes).toEqual({});
    expect(policyConsumes('scored', { scorers: [{ name: 'load' }], filters: [{ name: 'same-label' }] })).toEqual({});
    expect(scorersConsume([{ name: 'load' }], { filters: [{ name: 'low-queue' }] })).toEqual({
      'engine-load': 'required',
    });
    expect(policyConsumes('scored', { scorers: [{ name: 'load' }], filters: [{ name: 'low-kv-usage' }] })).toEqual({
      'engine-load': 'required',
    });
    expect(policyConsumes('scored', { scorers: [{ name: 'load' }] })).toEqual({});
  });

  it("made without the engines' load, a filter says which setting provides it", () => {
    expect(() => filterPlugin('low-queue').create({ maxWaiting: 1 }, {})).toThrow(
      "The low-queue filter reads the engines' load (routing.engineLoadIntervalMs, --engine-load-interval-ms), which this router does not have",
    );
    expect(() => filterPlugin('low-kv-usage').create({ maxKvUsage: 1 }, {})).toThrow(/^The low-kv-usage filter/);
    expect(() => filterPlugin('none')).toThrow(`names no filter "none": the filters are ${FILTER_NAMES.join(', ')}`);
  });

  it('a scored policy applies them with their parameters, the rest at their defaults', () => {
    const map = new Map<W, EngineLoad>([
      [a, { waiting: 200, running: 0, kvUsage: 0.1 }],
      [b, { waiting: 10, running: 0, kvUsage: 0.85 }],
    ]);
    const services = { engineLoad: (worker: W) => map.get(worker) };
    // low-queue at its default (128) passes a over; low-kv-usage at its default (0.8) would pass b.
    const queue = scoredFrom<W>([{ name: 'load' }], services, { filters: [{ name: 'low-queue' }] });
    expect(queue.select([a, b], idle, undefined)).toBe(b);
    const both = scoredFrom<W>([{ name: 'load' }], services, {
      filters: [{ name: 'low-queue', params: { maxWaiting: 500 } }, { name: 'low-kv-usage' }],
    });
    for (let i = 0; i < 3; i++) expect(both.select([a, b], idle, undefined)).toBe(a);
  });
});

describe("the filters' parameters, at their edges", () => {
  const params = (name: string, value: unknown) =>
    readFilters([{ name, params: { [name === 'low-queue' ? 'maxWaiting' : 'maxKvUsage']: value } }]);

  it('maxWaiting takes 0 and any whole number above; maxKvUsage takes above 0 up to 1', () => {
    expect(params('low-queue', 0)[0]?.params).toEqual({ maxWaiting: 0 });
    for (const bad of [-1, 1.5, Number.NaN])
      expect(() => params('low-queue', bad)).toThrow(/it must be a whole number/);
    expect(params('low-kv-usage', 1)[0]?.params).toEqual({ maxKvUsage: 1 });
    for (const bad of [0, 1.01, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => params('low-kv-usage', bad)).toThrow(/it must be a number above 0 and at most 1/);
    }
  });

  it('a parameter written as blank text is not a number; a filter entry that is null or unnamed is refused', () => {
    expect(() => params('low-queue', ' ')).toThrow(
      'has filter low-queue with maxWaiting " ": it must be a whole number of 0 or more',
    );
    expect(() => readFilters([null])).toThrow('has null: a filter is a name or { name, params? }');
    expect(() => readFilters([{ name: 3 }])).toThrow('has {"name":3}: a filter is a name or { name, params? }');
    expect(readFilters(' low-queue ,, ')).toEqual([{ name: 'low-queue' }]);
  });
});
