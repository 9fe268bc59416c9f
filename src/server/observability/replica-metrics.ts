import { Counter, Gauge, type Registry } from 'prom-client';
import type { SharedInFlight } from '../../replicas/shared-in-flight.js';

/**
 * The replicas' shared load (`--redis-url`; without it, one replica that never syncs), in the proxy's metrics: the replicas this one
 * sees, how old its view of their requests in flight is, and the rounds that did not reach
 * Redis (the replica then balances on its own view).
 *
 * @internal
 */
export function registerReplicaMetrics(
  registers: Registry[],
  shared: SharedInFlight | undefined,
): (outcome: 'synced' | 'failed') => void {
  new Gauge({
    name: 'disagg_replicas',
    help: 'Replicas of the router sharing their requests in flight through Redis, this one included (1 while Redis cannot be reached)',
    registers,
    collect() {
      // Without --redis-url a replica shares nothing: it is one.
      this.set(shared?.replicas ?? 1);
    },
  });
  new Gauge({
    name: 'disagg_replica_sync_lag_seconds',
    help: "How old this replica's view of the other replicas' requests in flight is: since its last round that reached Redis",
    registers,
    collect() {
      const lag = shared?.lagMs;
      if (lag !== undefined) this.set(lag / 1000);
    },
  });
  const failures = new Counter({
    name: 'disagg_replica_sync_failures_total',
    help: "Rounds that could not share this replica's requests in flight through Redis (unreachable or slower than the round): it balanced on its own view meanwhile",
    registers,
  });
  return (outcome) => {
    if (outcome === 'failed') failures.inc();
  };
}
