// The rules between the policies and what the settings provide them: read from what each
// configured policy declares it consumes (its plugin's `consumes`), never from its name.
import { type EngineName, engineOf } from '../../engines/registry.js';
import { CACHE_KNOWING_POLICIES, type PolicyName, policyConsumes, type RoutingParams } from '../../routing/registry.js';
import { ConfigError } from '../config-error.js';
import type { ResolvedProxyOptions } from './types.js';
import type { KvEventEndpoints } from './worker-entries.js';

/**
 * Refuses a configuration whose policies require data it does not provide: the engines' KV
 * events (a port, or endpoints on the workers) for a policy that requires the KV index; the
 * engines' load (an interval, and an engine that names its metrics) for one that requires it;
 * a policy that knows the decode caches for `aggregateCachedRatio`. A pool with a policy of
 * your own is not checked: it takes what the proxy has.
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
  const routing = values.routing as RoutingParams & { aggregateCachedRatio: number; engineLoadIntervalMs: number };
  if (
    routing.aggregateCachedRatio > 0 &&
    custom.decode === undefined &&
    !CACHE_KNOWING_POLICIES.includes(policies.decode)
  ) {
    const knowing = CACHE_KNOWING_POLICIES.map((name) => `'${name}'`).join(' or ');
    throw new ConfigError(
      `routing.aggregateCachedRatio (--aggregate-cached-ratio) needs decodePolicy ${knowing} (--decode-policy): only then does the router know what decode workers hold; decodePolicy is '${policies.decode}'`,
    );
  }
  const ownEndpoints = [
    ...((values.prefill as KvEventEndpoints[]) ?? []),
    ...((values.decode as KvEventEndpoints[]) ?? []),
  ].some((worker) => worker.kvEvents !== undefined);
  const connector = values.connector as EngineName;
  for (const role of ['prefill', 'decode'] as const) {
    if (custom[role] !== undefined) continue;
    const policy = policies[role];
    const consumes = policyConsumes(policy, routing);
    if (consumes['kv-index'] === 'required' && kv.port === undefined && !ownEndpoints) {
      throw new ConfigError(
        `${role}Policy '${policy}' routes on the engines' KV cache events: set kvEvents.port (--kv-events-port, the port of the workers' --kv-events-config endpoint) or give the workers kvEvents endpoints`,
      );
    }
    if (consumes['engine-load'] !== 'required') continue;
    if (engineOf(connector).loadMetrics === undefined) {
      throw new ConfigError(
        `${role}Policy '${policy}' scores the engines' load from their /metrics, which the ${connector} engine does not report`,
      );
    }
    if (routing.engineLoadIntervalMs === 0) {
      throw new ConfigError(
        `${role}Policy '${policy}' scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100`,
      );
    }
  }
}
