// The rules between the policies and what the settings provide them: read from what each
// configured policy declares it consumes (its plugin's `consumes`), never from its name.
import { type EngineName, engineOf } from '../../engines/registry.js';
import { type DeciderSetting, deciderPlugin, decidersOf } from '../../routing/decider-plugins.js';
import { CACHE_KNOWING_POLICIES, type PolicyName, policyConsumes, type RoutingParams } from '../../routing/registry.js';
import type { Consumption } from '../../routing/services.js';
import { ConfigError } from './setting.js';
import type { ResolvedProxyOptions } from './types.js';
import type { KvEventEndpoints } from './worker-entries.js';

/**
 * Refuses a configuration whose policies require data it does not provide: the engines' KV
 * events (a port, or endpoints on the workers) for a policy that requires the KV index; the
 * engines' load (an interval, and an engine that names its metrics) for one that requires it;
 * a decode policy that knows the caches for a decider that reads them (`decode-cached`, which
 * `aggregateCachedRatio` turns on). The deciders are checked as the policies are, by what
 * their plugins declare. A pool with a policy of your own is not checked: it takes what the
 * proxy has.
 *
 * @example
 * // decodePolicy scored with kv-usage and no --engine-load-interval-ms: a ConfigError.
 * checkConsumption(values, { prefill: 'least-in-flight', decode: 'scored' }, { prefill: undefined, decode: undefined }, kv);
 *
 * @throws {ConfigError} naming the pool, its policy and the setting that would provide the data.
 */
export function checkConsumption(
  values: Record<string, unknown>,
  policies: { prefill: PolicyName; decode: PolicyName },
  custom: { prefill: unknown; decode: unknown },
  kv: ResolvedProxyOptions['kvEvents'],
): void {
  const routing = values.routing as RoutingParams & {
    aggregateCachedRatio: number;
    aggregateBelowChars: number;
    deciders: readonly DeciderSetting[];
    engineLoadIntervalMs: number;
  };
  const deciders = decidersOf(routing);
  for (const decider of deciders) {
    if (deciderPlugin(decider.name).consumes['decode-caches'] !== 'required') continue;
    if (custom.decode !== undefined || CACHE_KNOWING_POLICIES.includes(policies.decode)) continue;
    const knowing = CACHE_KNOWING_POLICIES.map((name) => `'${name}'`).join(' or ');
    // Named by the setting that turned it on, where one did.
    const needs =
      decider.name === 'decode-cached' && routing.aggregateCachedRatio > 0
        ? 'routing.aggregateCachedRatio (--aggregate-cached-ratio) needs decodePolicy'
        : `the ${decider.name} decider (routing.deciders) needs decodePolicy`;
    throw new ConfigError(
      `${needs} ${knowing} (--decode-policy): only then does the router know what decode workers hold; decodePolicy is '${policies.decode}'`,
    );
  }
  const ownEndpoints = [
    ...((values.prefill as KvEventEndpoints[]) ?? []),
    ...((values.decode as KvEventEndpoints[]) ?? []),
  ].some((worker) => worker.kvEvents !== undefined);
  const connector = values.connector as EngineName;
  // Each configured policy, and each decider, by what its plugin declares.
  const readers: Array<{ who: string; consumes: Consumption }> = [
    ...(['prefill', 'decode'] as const)
      .filter((role) => custom[role] === undefined)
      .map((role) => ({
        who: `${role}Policy '${policies[role]}'`,
        consumes: policyConsumes(policies[role], routing),
      })),
    ...deciders.map((decider) => ({
      who: `decider '${decider.name}'`,
      consumes: deciderPlugin(decider.name).consumes,
    })),
  ];
  for (const { who, consumes } of readers) {
    if (consumes['kv-index'] === 'required' && kv.port === undefined && !ownEndpoints) {
      throw new ConfigError(
        `${who} routes on the engines' KV cache events: set kvEvents.port (--kv-events-port, the port of the workers' --kv-events-config endpoint) or give the workers kvEvents endpoints`,
      );
    }
    if (consumes['engine-load'] !== 'required') continue;
    if (engineOf(connector).loadMetrics === undefined) {
      throw new ConfigError(
        `${who} scores the engines' load from their /metrics, which the ${connector} engine does not report`,
      );
    }
    if (routing.engineLoadIntervalMs === 0) {
      throw new ConfigError(
        `${who} scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100`,
      );
    }
  }
}
