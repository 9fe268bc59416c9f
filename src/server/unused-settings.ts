// Settings that are accepted but that nothing in the configuration reads: said once at start,
// as a warning, so that a flag given for a feature that is not on is not silently ignored.
import { policyConsumes } from '../routing/registry.js';
import type { ResolvedProxyOptions } from './settings/types.js';

/**
 * The warnings for settings that nothing reads: `--kv-events-port` when no pool's policy reads
 * the KV index (only policies of your own could). `--redis-url` is never one: the replicas
 * share their requests in flight through it, tenants file or not.
 *
 * @example
 * for (const line of unusedSettings(options)) logger.warn({ setting: line.setting }, line.message);
 */
export function unusedSettings(
  options: Pick<
    ResolvedProxyOptions,
    'kvEvents' | 'prefillPolicy' | 'decodePolicy' | 'customPolicies' | 'pools' | 'routing'
  >,
): Array<{ setting: string; message: string }> {
  const unused: Array<{ setting: string; message: string }> = [];
  if (options.kvEvents.port !== undefined && !readsKvIndex(options)) {
    unused.push({
      setting: 'kvEvents.port',
      message: `--kv-events-port ${options.kvEvents.port} is set but no policy routes on KV events (prefill '${options.prefillPolicy}', decode '${options.decodePolicy}'): the events are followed for nothing; set --prefill-policy or --decode-policy precise-prefix, or drop --kv-events-port`,
    });
  }
  return unused;
}

function readsKvIndex(
  options: Pick<ResolvedProxyOptions, 'prefillPolicy' | 'decodePolicy' | 'customPolicies' | 'pools' | 'routing'>,
): boolean {
  if (options.customPolicies.prefill !== undefined || options.customPolicies.decode !== undefined) return true;
  const names = [
    options.prefillPolicy,
    options.decodePolicy,
    ...options.pools.flatMap((pool) => [pool.prefillPolicy, pool.decodePolicy]),
  ].filter((name) => name !== undefined);
  return names.some((name) => policyConsumes(name, options.routing)['kv-index'] !== undefined);
}
