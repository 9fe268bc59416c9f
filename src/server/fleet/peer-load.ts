// The pools' side of the replicas' shared load: what this replica has in flight on each worker
// (written to Redis), and the other replicas' (read from it) as each pool's `peerLoad`. A
// worker's key is its role and URL, which every replica gives it alike.
import type { SharedInFlight } from '../../replicas/shared-in-flight.js';
import type { RoutingInput } from '../../routing/routing-input.js';
import type { LoadView } from '../../routing/routing-policy.js';
import type { SessionBindingStore } from '../../routing/session-bindings.js';
import type { ResolvedProxyOptions } from '../settings/types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { Fleet } from './pool-set.js';
import { pairsOf } from './pool-set.js';

/** The key of a worker in the shared counts: its role and URL. */
export function peerKey(role: 'prefill' | 'decode', worker: { url: string }): string {
  return `${role} ${worker.url}`;
}

/** This replica's leases on each worker of the fleet, by {@link peerKey} (only the workers with some). */
export function* localInFlight(fleet: Fleet): Generator<readonly [string, number]> {
  for (const pool of pairsOf(fleet)) {
    for (const role of ['prefill', 'decode'] as const) {
      const side = pool[role];
      for (const worker of side.workers) {
        const count = side.inFlight(worker as never);
        if (count > 0) yield [peerKey(role, worker), count];
      }
    }
  }
}

/** The workers this replica's health checks hold out of rotation (down, not draining), by {@link peerKey}. */
export function* downWorkers(fleet: Fleet): Generator<string> {
  for (const pool of pairsOf(fleet)) {
    for (const role of ['prefill', 'decode'] as const) {
      const side = pool[role];
      for (const worker of side.workers) if (side.stateOf(worker as never) === 'down') yield peerKey(role, worker);
    }
  }
}

/** Each side's view of the other replicas' leases; none without sharing. */
export function peerLoadOf(
  shared: SharedInFlight | undefined,
): { prefill: LoadView<ProxyPrefillWorker>; decode: LoadView<ProxyDecodeWorker> } | undefined {
  if (shared === undefined) return undefined;
  return {
    prefill: shared.viewOf((worker: ProxyPrefillWorker) => peerKey('prefill', worker)),
    decode: shared.viewOf((worker: ProxyDecodeWorker) => peerKey('decode', worker)),
  };
}

/** Whether any pool side routes by session (top level or a `pools` entry): then bindings are worth sharing. */
export function usesSessionPolicy(
  options: Pick<ResolvedProxyOptions, 'prefillPolicy' | 'decodePolicy' | 'pools'>,
): boolean {
  const named = [
    options.prefillPolicy,
    options.decodePolicy,
    ...options.pools.flatMap((pool) => [pool.prefillPolicy, pool.decodePolicy]),
  ];
  return named.includes('session');
}

/**
 * The workers `input`'s session is bound to, looked up once before it is routed (when bindings
 * are shared and it has a session key); a lookup that fails leaves it to hashing.
 */
export async function lookUpBindings(store: SessionBindingStore | undefined, input: RoutingInput): Promise<void> {
  const key = input.sessionKey;
  if (store === undefined || key === undefined || input.sessionBindings !== undefined) return;
  input.sessionBindings = await store.lookup(key);
}
