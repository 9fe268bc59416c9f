import type { Connector } from '../flow/connectors.js';
import type { WorkerPool } from '../flow/worker-pool.js';
import type { httpEngine } from '../http/http-engine.js';
import type { Logger } from '../runtime/logger.js';
import type { HealthChecker } from './health.js';
import type { InFlightRequests } from './in-flight.js';
import type { ProxyMetrics } from './metrics.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker, ResolvedProxyOptions } from './options.js';

/**
 * What the proxy's request handlers share: its checked options, the pools, the engine that
 * calls the workers, health feedback, metrics and the requests under way.
 *
 * @internal
 */
export interface ProxyState {
  readonly options: ResolvedProxyOptions;
  readonly connector: Connector;
  readonly engine: ReturnType<typeof httpEngine<{ url: string }>>;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  readonly health: HealthChecker;
  readonly metrics: ProxyMetrics;
  readonly inFlight: InFlightRequests;
  readonly logger: Logger;
  /** True once shutdown has begun: new requests are refused. */
  readonly closing: boolean;
}
