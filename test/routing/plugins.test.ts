// The scorer plugins and the scored policy composed from them: each plugin's parameters checked
// by the plugin, what each reads declared, and weights that decide the pick.
import { describe, expect, it } from 'vitest';
import type { EngineLoad } from '../../src/protocol/engines/load-metrics.js';
import {
  DEFAULT_SCORERS,
  readScorers,
  SCORER_NAMES,
  SCORERS,
  scoredFrom,
  scorersConsume,
} from '../../src/routing/plugins.js';
import { POLICIES, policyConsumes } from '../../src/routing/registry.js';
import { prefixScorer } from '../../src/routing/scoring.js';
import { mergeConsumption } from '../../src/routing/services.js';

type W = { url: string };
const a: W = { url: 'http://a' };
const b: W = { url: 'http://b' };
const idle = { inFlight: () => 0 };

/** The engines' load as a scraper would report it, per worker. */
function loads(entries: Array<[W, EngineLoad]>) {
  const map = new Map(entries);
  return { engineLoad: (worker: W) => map.get(worker) };
}

describe('the scored policy, composed from scorer plugins', () => {
  it('a scored policy with kv-usage picks the worker whose engine reports the emptier KV cache', () => {
    const services = loads([
      [a, { waiting: 0, running: 0, kvUsage: 0.9 }],
      [b, { waiting: 0, running: 0, kvUsage: 0.2 }],
    ]);
    const policy = scoredFrom<W>(readScorers([{ name: 'kv-usage', weight: 2 }]), services);
    for (let i = 0; i < 4; i++) expect(policy.select([a, b], idle, undefined)).toBe(b);
  });

  it('weights change the pick: kv-usage over queue prefers room, queue over kv-usage the shorter queue', () => {
    // a: an almost empty cache behind a long queue; b: a fuller cache, no queue.
    const services = loads([
      [a, { waiting: 8, running: 4, kvUsage: 0.1 }],
      [b, { waiting: 0, running: 1, kvUsage: 0.6 }],
    ]);
    const room = scoredFrom<W>(readScorers('kv-usage:3,queue:1'), services);
    const queue = scoredFrom<W>(readScorers('kv-usage:1,queue:3'), services);
    expect(room.select([a, b], idle, undefined)).toBe(a);
    expect(queue.select([a, b], idle, undefined)).toBe(b);
  });

  it('the default is load alone: the worker with fewer requests in flight from this router', () => {
    const policy = scoredFrom<W>(DEFAULT_SCORERS);
    expect(policy.select([a, b], { inFlight: (worker) => (worker === a ? 3 : 1) }, undefined)).toBe(b);
  });

  it("a plugin's parameters reach its scorer, the rest at their defaults", () => {
    // A prefix tree of 1 character remembers nothing of a longer prompt.
    const [setting] = readScorers([{ name: 'prefix', params: { maxTreeChars: 1 } }]);
    expect(setting).toEqual({ name: 'prefix', weight: 1, params: { maxTreeChars: 1 } });
  });
});

describe('scorer settings: each plugin checks its own parameters', () => {
  const refusal = (value: unknown) => {
    try {
      readScorers(value);
    } catch (error) {
      expect(error).toBeInstanceOf(RangeError);
      return (error as Error).message;
    }
    throw new Error('accepted');
  };

  it('the flag form and the file form read alike, weights 1 by default', () => {
    expect(readScorers('kv-usage:2, queue')).toEqual([
      { name: 'kv-usage', weight: 2 },
      { name: 'queue', weight: 1 },
    ]);
    expect(readScorers([{ name: 'kv-usage', weight: 2 }, 'queue'])).toEqual(readScorers('kv-usage:2,queue'));
    // Read again (disagg serve hands its parsed settings to createProxy): the same.
    expect(readScorers(readScorers('kv-usage:2,queue'))).toEqual(readScorers('kv-usage:2,queue'));
  });

  it('an unknown scorer is one line with the closest name and the known ones', () => {
    expect(refusal('kv-usge:2')).toBe(
      `names no scorer "kv-usge" (did you mean kv-usage?): the scorers are ${SCORER_NAMES.join(', ')}`,
    );
    expect(refusal([{ name: 'fastest' }])).toBe(
      `names no scorer "fastest": the scorers are ${SCORER_NAMES.join(', ')}`,
    );
  });

  it('a parameter out of range is one line naming the plugin and the parameter', () => {
    expect(refusal([{ name: 'prefix', params: { maxTreeChars: -1 } }])).toBe(
      'has scorer prefix with maxTreeChars -1: it must be a positive whole number',
    );
    expect(refusal([{ name: 'kv-prefix', params: { speculativeTtlMs: 'soon' } }])).toBe(
      'has scorer kv-prefix with speculativeTtlMs "soon": it must be a number of milliseconds, 0 or more',
    );
    expect(refusal([{ name: 'kv-prefix', params: { speculativeTtl: 10 } }])).toBe(
      'has scorer kv-prefix with no parameter speculativeTtl (did you mean speculativeTtlMs?)',
    );
    expect(refusal([{ name: 'kv-usage', params: { ttl: 1 } }])).toBe(
      'has scorer kv-usage with no parameter ttl (it takes none)',
    );
    expect(refusal('kv-usage:0')).toBe('has scorer kv-usage with weight 0: it must be a number above 0');
    expect(refusal('kv-usage:')).toBe('has scorer kv-usage with weight NaN: it must be a number above 0');
    expect(refusal('load,load:2')).toBe('names scorer load twice: give it one weight');
    expect(refusal([])).toBe(`must list at least one scorer (${SCORER_NAMES.join(', ')}), got []`);
  });

  it('an entry that is not a scorer is one line saying what an entry is', () => {
    expect(refusal('kv-usage:2:3')).toBe('has "kv-usage:2:3": a scorer is name or name:weight');
    for (const [item, shown] of [
      [7, '7'],
      [null, 'null'],
      [{ name: 3 }, '{"name":3}'],
    ] as const) {
      expect(refusal([item])).toBe(`has ${shown}: a scorer is { name, weight?, params? } or name:weight`);
    }
    expect(refusal([{ name: 'load', wieght: 2 }])).toBe(
      'has scorer load with wieght: an entry takes name, weight and params',
    );
    expect(refusal([{ name: 'load', weight: '2' }])).toBe(
      'has scorer load with weight "2": it must be a number above 0',
    );
    expect(refusal([{ name: 'load', weight: Number.POSITIVE_INFINITY }])).toBe(
      'has scorer load with weight Infinity: it must be a number above 0',
    );
    for (const [params, shown] of [
      [[1], '[1]'],
      ['x', '"x"'],
      [null, 'null'],
    ] as const) {
      expect(refusal([{ name: 'prefix', params }])).toBe(`has scorer prefix with params ${shown}: params is a mapping`);
    }
    expect(refusal([{ name: 'prefix', params: { zzz: 1 } }])).toBe(
      'has scorer prefix with no parameter zzz (it takes maxTreeChars)',
    );
  });

  it('blank entries of a flag are skipped; a number written as text is read as one; a blank one is not a number', () => {
    expect(readScorers('load, ,queue,')).toEqual([
      { name: 'load', weight: 1 },
      { name: 'queue', weight: 1 },
    ]);
    const [entry] = readScorers([{ name: 'prefix', params: { maxTreeChars: '64' } }]);
    expect(entry).toStrictEqual({ name: 'prefix', weight: 1, params: { maxTreeChars: 64 } });
    expect(Object.keys(readScorers('load')[0] as object)).toEqual(['name', 'weight']);
    expect(refusal([{ name: 'prefix', params: { maxTreeChars: ' ' } }])).toBe(
      'has scorer prefix with maxTreeChars " ": it must be a positive whole number',
    );
  });

  it("each parameter's range, at its edges", () => {
    expect(refusal([{ name: 'prefix', params: { maxTreeChars: 0 } }])).toMatch(/maxTreeChars 0: it must be/);
    expect(refusal([{ name: 'prefix', params: { maxTreeChars: 1.5 } }])).toMatch(/maxTreeChars 1.5: it must be/);
    expect(readScorers([{ name: 'kv-prefix', params: { speculativeTtlMs: 0 } }])[0]?.params).toEqual({
      speculativeTtlMs: 0,
    });
    expect(refusal([{ name: 'kv-prefix', params: { speculativeTtlMs: -1 } }])).toMatch(
      /speculativeTtlMs -1: it must be/,
    );
    expect(refusal([{ name: 'kv-prefix', params: { speculativeTtlMs: Number.NaN } }])).toMatch(/speculativeTtlMs NaN/);
  });
});

describe('the prefix scorer without a routing text', () => {
  it('scores every candidate 0 and learns nothing from a request without one', () => {
    const scorer = prefixScorer<W>();
    scorer.completed?.(b, undefined, 'success');
    scorer.completed?.(b, { text: '' } as never, 'success');
    expect(scorer.score([a, b], idle, undefined)).toEqual([0, 0]);
    expect(scorer.score([a, b], idle, { text: 'Stryker was here!' } as never)).toEqual([0, 0]);
    // And a request without one matches nothing, whatever the tree holds.
    scorer.completed?.(b, { text: 'Stryker was here!' } as never, 'success');
    expect(scorer.score([a, b], idle, undefined)).toEqual([0, 0]);
    expect(policyConsumes('no-such-policy' as never)).toEqual({});
  });
});

describe('scorer plugins made without the data they read', () => {
  it('say which setting provides it', () => {
    expect(() => scoredFrom<W>(readScorers('kv-prefix'), {})).toThrow(
      "The kv-prefix scorer reads the engines' KV events (--kv-events-port), which this router does not have",
    );
    for (const name of ['queue', 'kv-usage']) {
      expect(() => scoredFrom<W>(readScorers(name), {})).toThrow(
        `The ${name} scorer reads the engines' load (routing.engineLoadIntervalMs, --engine-load-interval-ms), which this router does not have`,
      );
    }
  });

  it("the prefix scorer gets its tree's size: a tree of one character remembers no prompt", () => {
    const text = 'a long shared system prompt';
    const input = { text } as never;
    const remembers = scoredFrom<W>([{ name: 'prefix', params: { maxTreeChars: 1024 } }]);
    const forgets = scoredFrom<W>([{ name: 'prefix', params: { maxTreeChars: 1 } }]);
    for (const policy of [remembers, forgets]) policy.completed?.(b, input, 'success');
    // Ties rotate: a policy that holds nothing for the prompt picks a, then b; one that holds it, b twice.
    expect([remembers.select([a, b], idle, input), remembers.select([a, b], idle, input)]).toEqual([b, b]);
    expect([forgets.select([a, b], idle, input), forgets.select([a, b], idle, input)]).toEqual([a, b]);
  });
});

describe('what plugins consume, declared', () => {
  it('each scorer declares the data it reads: the engine-load ones require it, kv-prefix the KV index', () => {
    const declared = Object.fromEntries(SCORERS.map((plugin) => [plugin.name, plugin.consumes]));
    expect(declared).toEqual({
      load: {},
      prefix: {},
      'kv-prefix': { 'kv-index': 'required', tokens: 'optional' },
      queue: { 'engine-load': 'required' },
      'kv-usage': { 'engine-load': 'required' },
      'lora-affinity': { 'engine-load': 'required' },
      'slo-headroom': { latency: 'required', 'kv-index': 'optional', 'engine-load': 'optional' },
    });
  });

  it("every policy declares what it consumes; scored's is its scorers'", () => {
    for (const plugin of POLICIES) expect(plugin.consumes, plugin.name).toBeDefined();
    expect(policyConsumes('precise-prefix')).toEqual({
      'kv-index': 'required',
      tokens: 'optional',
      'engine-load': 'optional',
    });
    expect(policyConsumes('cache-aware')).toEqual({});
    expect(policyConsumes('scored')).toEqual({});
    expect(policyConsumes('scored', { scorers: readScorers('kv-prefix,kv-usage') })).toEqual(
      scorersConsume(readScorers('kv-prefix,kv-usage')),
    );
    expect(scorersConsume(readScorers('kv-prefix,kv-usage'))).toEqual({
      'kv-index': 'required',
      tokens: 'optional',
      'engine-load': 'required',
    });
  });

  it('merged consumption: required wins over optional, in any order', () => {
    expect(mergeConsumption([{ tokens: 'optional' }, { tokens: 'required' }])).toEqual({ tokens: 'required' });
    expect(mergeConsumption([{ tokens: 'required' }, { tokens: 'optional' }])).toEqual({ tokens: 'required' });
    expect(mergeConsumption([{}, { 'engine-load': 'optional' }])).toStrictEqual({ 'engine-load': 'optional' });
    // A plugin that reads nothing takes nothing away from one that does.
    expect(mergeConsumption([{ tokens: 'required' }, {}])).toStrictEqual({ tokens: 'required' });
    expect(mergeConsumption([{ tokens: 'optional' }, { tokens: 'optional' }])).toStrictEqual({ tokens: 'optional' });
  });
});
