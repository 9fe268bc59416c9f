import { vi } from 'vitest';
import { vllmNixl } from '../../src/engines/registry.js';
import type { FlowEvent } from '../../src/flow/events.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { Scheduler } from '../../src/routing/scheduler.js';
import { HealthChecker } from '../../src/server/fleet/health.js';
import { KvFollower } from '../../src/server/fleet/kv-following.js';
import { Membership } from '../../src/server/fleet/membership.js';
import { PoolSet } from '../../src/server/fleet/pool-set.js';
import { ProxyMetrics } from '../../src/server/observability/metrics.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../src/server/options.js';
import type { ProxyState } from '../../src/server/pipeline/proxy-state.js';
import { recordingLogger } from './async.js';

/**
 * What a request's bookkeeping sees of the proxy, over one prefill worker (`prefill-0`) and two
 * decode workers (`decode-0`, `decode-1`): real names and metrics, as operators read them; health
 * and the log recorded, being other units' to act on.
 */
export function proxyState(
  options: { onEvent?: (event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>) => void } = {},
) {
  const p0: ProxyPrefillWorker = { url: 'http://10.0.0.1:8100' };
  const d0: ProxyDecodeWorker = { url: 'http://10.0.0.2:8200' };
  const d1: ProxyDecodeWorker = { url: 'http://10.0.0.3:8200' };
  const prefill = new WorkerPool([p0]);
  const decode = new WorkerPool([d0, d1]);
  const { records: logs, logger } = recordingLogger();
  // What health is told: the checker's own reading of each event, onto spies.
  const health = {
    noteFailure: vi.fn(),
    noteSuccess: vi.fn(),
    observe(event: Parameters<HealthChecker['observe']>[0]) {
      HealthChecker.prototype.observe.call(this as unknown as HealthChecker, event);
    },
  };
  const scheduler = new Scheduler({ prefillWorkers: prefill, decodeWorkers: decode });
  const pools = new PoolSet([{ model: undefined, engine: 'vllm', connector: vllmNixl, prefill, decode, scheduler }]);
  const membership = new Membership(pools, health as unknown as HealthChecker, logger);
  const nameOf = (worker: { url: string }) => membership.nameOf(worker);
  const metrics = new ProxyMetrics(pools, undefined, undefined, nameOf);
  const proxy = {
    options: { onEvent: options.onEvent },
    pools,
    metrics,
    health,
    logger,
    nameOf,
    kv: new KvFollower({ logger }),
  } as unknown as ProxyState;
  /** Each series of the counter `name` as `label=value,...` => count. */
  const counts = async (name: string): Promise<Record<string, number>> => {
    const metric = (await metrics.registry.getMetricsAsJSON()).find((each) => each.name === name);
    return Object.fromEntries(
      (metric?.values ?? []).map(({ labels, value }) => [
        Object.entries(labels)
          .map(([label, v]) => `${label}=${v}`)
          .join(','),
        value,
      ]),
    );
  };
  return { proxy, p0, d0, d1, health, logs, counts };
}

/** One flow event of the request `r1`, with the fields every event has. */
export function flowEvent(
  fields: Record<string, unknown> & { type: FlowEvent['type'] },
): FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker> {
  return { requestId: 'r1', elapsedMs: 0, late: false, ...fields } as FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>;
}
