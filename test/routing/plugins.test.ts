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
    expect(refusal([])).toMatch(/^must list at least one scorer/);
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
    expect(mergeConsumption([{}, { 'engine-load': 'optional' }])).toEqual({ 'engine-load': 'optional' });
  });
});
