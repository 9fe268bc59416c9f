// createProxy's options resolved: a policy of your own beside the named ones, and what the
// configured policies read checked against what the router has (each refusal one line).
import { describe, expect, it } from 'vitest';
import type { RoutingPolicy } from '../../../src/routing/routing-policy.js';
import { ConfigError, type ProxyOptions, resolveProxyOptions } from '../../../src/server/options.js';

const base = {
  connector: 'vllm',
  prefill: [{ url: 'http://p.example:8100' }],
  decode: [{ url: 'http://d.example:8200' }],
} as const;

const resolve = (options: Partial<ProxyOptions>) => resolveProxyOptions({ ...base, ...options } as ProxyOptions);

/** The one line `options` are refused with. */
function refusal(options: Partial<ProxyOptions>): string {
  try {
    resolve(options);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).message;
  }
  throw new Error('expected a ConfigError');
}

const own: RoutingPolicy<{ url: string }> = { name: 'mine', select: (candidates) => candidates[0] as { url: string } };

describe('resolveProxyOptions: a policy of your own', () => {
  it('is taken for its pool as a factory, and the named policy of that pool stays the default', () => {
    const defaults = resolve({});
    const resolved = resolve({ prefillPolicy: own as never });
    expect(resolved.customPolicies.prefill?.({} as never)).toBe(own);
    expect(resolved.customPolicies.decode).toBeUndefined();
    expect(resolved.prefillPolicy).toBe(defaults.prefillPolicy);
    const decode = resolve({ decodePolicy: (() => own) as never });
    expect(decode.customPolicies.decode?.({} as never)).toBe(own);
    expect(decode.customPolicies.prefill).toBeUndefined();
    expect(decode.decodePolicy).toBe(defaults.decodePolicy);
  });

  it('something that is neither a name, a policy nor a factory is refused by its pool', () => {
    expect(refusal({ prefillPolicy: { pick: () => undefined } as never })).toMatch(/^prefillPolicy must be one of/);
    expect(refusal({ decodePolicy: 42 as never })).toMatch(/^decodePolicy must be one of .*got 42$/);
  });

  it('a name is still checked as a setting', () => {
    expect(refusal({ decodePolicy: 'fastest' as never })).toMatch(/^decodePolicy/);
    expect(resolve({ decodePolicy: 'least-in-flight' }).decodePolicy).toBe('least-in-flight');
  });

  it("a pool with a policy of its own is not held to what a named policy reads: its data is the program's", () => {
    const precise = { kvEvents: { port: undefined } } as Partial<ProxyOptions>;
    expect(refusal({ ...precise, decodePolicy: 'precise-prefix' })).toMatch(/^decodePolicy 'precise-prefix'/);
    expect(
      resolve({ ...precise, decodePolicy: own as never, prefillPolicy: own as never }).customPolicies.decode,
    ).toBeDefined();
    // The cached share needs a decode policy that knows the caches, unless the policy is the program's.
    expect(refusal({ routing: { aggregateCachedRatio: 0.5 } })).toMatch(/^routing.aggregateCachedRatio/);
    expect(
      resolve({ routing: { aggregateCachedRatio: 0.5 }, decodePolicy: own as never }).routing.aggregateCachedRatio,
    ).toBe(0.5);
  });
});

describe("resolveProxyOptions: the engines' load, for the policies that read it", () => {
  const scored = {
    prefillPolicy: 'scored',
    routing: { scorers: [{ name: 'kv-usage' }], engineLoadIntervalMs: 100 },
  } as Partial<ProxyOptions>;

  it('is refused for an engine that does not report it, naming the pool, the policy and the engine', () => {
    expect(refusal({ ...scored, connector: 'trtllm' })).toBe(
      "prefillPolicy 'scored' scores the engines' load from their /metrics, which the trtllm engine does not report",
    );
  });

  it('is refused when scraping is off, saying which setting turns it on', () => {
    expect(refusal({ ...scored, routing: { ...scored.routing, engineLoadIntervalMs: 0 } })).toBe(
      "prefillPolicy 'scored' scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100",
    );
  });

  it('is taken from an engine that reports it, and a policy that does not read it is never held to it', () => {
    expect(resolve(scored).routing.engineLoadIntervalMs).toBe(100);
    expect(resolve({ connector: 'trtllm', routing: { engineLoadIntervalMs: 0 } }).connector).toBe('trtllm');
    // Only the pool whose policy reads it is named.
    expect(
      refusal({
        prefillPolicy: 'least-in-flight',
        decodePolicy: 'scored',
        routing: { scorers: [{ name: 'queue' }], engineLoadIntervalMs: 0 },
      }),
    ).toMatch(/^decodePolicy 'scored'/);
  });

  it('KV events are found on the workers of either pool when they name their own endpoints', () => {
    const kvOnDecode = {
      decodePolicy: 'precise-prefix',
      decode: [{ url: 'http://d.example:8200', kvEvents: 'tcp://d.example:5557' }],
    } as Partial<ProxyOptions>;
    expect(resolve(kvOnDecode).decodePolicy).toBe('precise-prefix');
    const kvOnPrefill = {
      decodePolicy: 'precise-prefix',
      prefill: [{ url: 'http://p.example:8100', kvEvents: 'tcp://p.example:5557' }],
    } as Partial<ProxyOptions>;
    expect(resolve(kvOnPrefill).decodePolicy).toBe('precise-prefix');
  });
});

describe('resolveProxyOptions: the deciders, checked by what they declare', () => {
  it('decode-cached listed in routing.deciders needs a decode policy that knows the caches, named as listed', () => {
    expect(refusal({ routing: { deciders: [{ name: 'decode-cached' }] } })).toBe(
      "the decode-cached decider (routing.deciders) needs decodePolicy 'cache-aware' or 'precise-prefix' (--decode-policy): only then does the router know what decode workers hold; decodePolicy is 'scored'",
    );
    expect(
      resolve({ decodePolicy: 'cache-aware', routing: { deciders: [{ name: 'decode-cached' }] } }).routing.deciders,
    ).toEqual([{ name: 'decode-cached' }]);
  });

  it("a decider's params are checked as a scorer's are, naming the decider", () => {
    expect(refusal({ routing: { deciders: [{ name: 'short-prompt', params: { belowChars: 0 } }] } })).toBe(
      'routing.deciders has decider short-prompt with belowChars 0: it must be a positive whole number',
    );
  });
});
