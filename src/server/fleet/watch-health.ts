import type { Dispatcher } from 'undici';
import type { FlowEventListener } from '../../flow/events.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import { libraryLogger } from '../../runtime/library-logger.js';
import type { Logger } from '../../runtime/logger.js';
import { describeValue } from '../../util/describe-value.js';
import { BREAKER_DEFAULTS, HEALTH_DEFAULTS, HealthChecker, type ProbeFailure } from './health.js';

/** Options of {@link watchHealth}; every default is `disagg serve`'s. */
export interface WatchHealthOptions {
  /** Between rounds of `GET /health` probes of every worker; 5,000 ms by default. */
  intervalMs?: number | undefined;
  /** How long one probe may take; 2,000 ms by default. */
  timeoutMs?: number | undefined;
  /**
   * Failed probes in a row that take a worker out of rotation (3 by default), and successful
   * ones that bring it back (2). A probe that cannot connect at all takes it out at once.
   */
  failureThreshold?: number | undefined;
  successThreshold?: number | undefined;
  /**
   * The circuit breaker of each worker, fed by what requests meet (`onEvent`):
   * `failureThreshold` requests failing on it in a row (5) take it out for `openMs` (10,000),
   * then it is back on trial until `successThreshold` successes (2) close it. `false` turns it
   * off (a worker that could not be reached still leaves at once).
   */
  breaker?:
    | { failureThreshold?: number | undefined; successThreshold?: number | undefined; openMs?: number | undefined }
    | false
    | undefined;
  /** Sent with every probe: the workers' API key, say (`{ authorization: 'Bearer …' }`). */
  headers?: Record<string, string> | undefined;
  /** The connection pool for the probes; the library's own by default. */
  dispatcher?: Dispatcher | undefined;
  /** Where a worker leaving or coming back is logged (warn and info); the library's logger by default. */
  logger?: Logger | undefined;
}

/** A watch over the workers of pools: see {@link watchHealth}. */
export interface WorkerHealth<P, D> {
  /**
   * What it learns from requests: give it as `disaggregate`'s `onEvent` (or call it from
   * yours). A worker a request could not reach leaves the rotation at once; other failures
   * on it (a 5xx, a broken stream, an unreadable answer) feed its circuit breaker; a success
   * closes a circuit on trial. Events of any number of requests may come through it.
   */
  readonly onEvent: FlowEventListener<P, D>;
  /** Probes every worker once, now; resolves when the round is over. */
  check(): Promise<void>;
  /** The state of a worker's circuit: `closed` (serving), `open` (out), `half-open` (on trial). */
  circuit(worker: P | D): 'closed' | 'open' | 'half-open';
  /** Why the worker's last probe failed (`GET /health answered 503`, `ECONNREFUSED`, with a hint), until one succeeds. */
  lastFailure(worker: P | D): ProbeFailure | undefined;
  /** Stops the probes and the breaker's timers; the pools keep the rotation they have. Idempotent. */
  stop(): void;
}

/**
 * Keeps failing workers of `pools` out of their rotation, as `disagg serve` does, for a
 * router built from the library's pieces:
 * - every worker's `GET /health` is probed now and every `intervalMs`: one that fails
 *   `failureThreshold` probes in a row (or cannot be connected to at all) leaves its pool's
 *   rotation (`pool.setAvailable(worker, false)`), and comes back after `successThreshold`
 *   good ones;
 * - fed the requests' events (`onEvent`), a worker a request could not reach leaves at once,
 *   and a circuit breaker per worker counts the requests that failed on it after reaching it.
 *
 * Workers added to a pool later are probed from the next round; those removed are forgotten.
 * The timers do not keep the process alive; `stop()` ends them.
 *
 * @throws {TypeError} for a pool that is not a `WorkerPool`, or a worker without a `url`.
 * @example
 * const health = watchHealth({ prefill: prefillWorkers, decode: decodeWorkers });
 * const stream = await disaggregate({ ...options, prefillWorkers, decodeWorkers, onEvent: health.onEvent });
 * process.on('SIGTERM', () => health.stop());
 */
export function watchHealth<P extends { url: string }, D extends { url: string }>(
  pools: { prefill?: WorkerPool<P> | undefined; decode?: WorkerPool<D> | undefined },
  options: WatchHealthOptions = {},
): WorkerHealth<P, D> {
  const watched: Array<{ role: string; pool: WorkerPool<{ url: string }> }> = [];
  for (const role of ['prefill', 'decode'] as const) {
    const pool = pools[role];
    if (pool === undefined) continue;
    if (typeof (pool as { setAvailable?: unknown }).setAvailable !== 'function') {
      throw new TypeError(`watchHealth: ${role} must be a WorkerPool, got ${describeValue(pool)}`);
    }
    for (const worker of pool.workers) {
      if (typeof (worker as { url?: unknown })?.url !== 'string') {
        throw new TypeError(`watchHealth: each ${role} worker needs a url to probe, got ${describeValue(worker)}`);
      }
    }
    watched.push({ role, pool: pool as unknown as WorkerPool<{ url: string }> });
  }
  const breaker = options.breaker === false ? undefined : { ...BREAKER_DEFAULTS, ...definedOf(options.breaker ?? {}) };
  const checker = new HealthChecker(watched, {
    intervalMs: options.intervalMs ?? HEALTH_DEFAULTS.intervalMs,
    timeoutMs: options.timeoutMs ?? HEALTH_DEFAULTS.timeoutMs,
    probeThresholds: {
      failure: options.failureThreshold ?? HEALTH_DEFAULTS.failureThreshold,
      success: options.successThreshold ?? HEALTH_DEFAULTS.successThreshold,
    },
    logger: libraryLogger(options.logger),
    forgetLeavers: true,
    ...(breaker === undefined ? {} : { breaker }),
    ...(options.headers === undefined ? {} : { headers: options.headers }),
    ...(options.dispatcher === undefined ? {} : { dispatcher: options.dispatcher }),
  });
  checker.start();
  void checker.check();
  return {
    onEvent: (event) => checker.observe(event as Parameters<HealthChecker['observe']>[0]),
    check: () => checker.check(),
    circuit: (worker) => checker.circuit(worker),
    lastFailure: (worker) => checker.lastFailure(worker),
    stop: () => checker.stop(),
  };
}

/** The fields of `values` that are set: an `undefined` one leaves its default. */
function definedOf<T extends object>(values: T): Partial<T> {
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined)) as Partial<T>;
}
