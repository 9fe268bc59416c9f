import { Counter, Gauge, type Registry } from 'prom-client';
import type { WorkerPool } from '../../routing/worker-pool.js';

/** A worker as the metrics name it. */
export type Named = { url: string };

const CIRCUIT_STATES = ['closed', 'open', 'half-open'] as const;
/** A circuit breaker's state, as the health checker keeps it. */
export type CircuitState = (typeof CIRCUIT_STATES)[number];

/** @internal What the fleet's metrics read of the proxy's workers at a scrape. */
export interface FleetSource {
  /**
   * Every pool of the fleet, as its two sides. The gauges keep their `role` label and sum a
   * role's workers over the pools: worker names are unique across the fleet.
   */
  pools: ReadonlyArray<{ prefill: WorkerPool<Named>; decode: WorkerPool<Named> }>;
  /** A worker's name for its `worker` label, read at each scrape: names are given as workers join. */
  nameOf: (worker: Named) => string;
  /** The state of a worker's circuit breaker, read at each scrape. */
  circuitOf: (worker: Named) => CircuitState;
}

/**
 * The metrics of the fleet: membership changes, each worker's legs and failures, and the
 * gauges of the pools (workers by state, in flight, in rotation) and of circuit breakers.
 *
 * @internal
 */
export class FleetMetrics {
  readonly #membership: Counter<'role' | 'change' | 'source'>;
  readonly #workerLegs: Counter<'role' | 'worker' | 'outcome'>;
  readonly #workerFailures: Counter<'role' | 'worker' | 'class'>;

  /** Registers them in `registers`, the gauges reading `source` at each scrape. */
  constructor(registers: Registry[], source: FleetSource) {
    this.#membership = new Counter({
      name: 'disagg_worker_changes_total',
      help: 'Workers added, set draining, removed, and drained ones that left, by pool and by who changed it (config, admin, dns, kubernetes)',
      labelNames: ['role', 'change', 'source'],
      registers,
    });
    this.#workerLegs = new Counter({
      name: 'disagg_worker_legs_total',
      help: 'Legs each worker served, by pool, worker name and outcome: success, error (the leg that failed a finished request), cancelled (the client left), retried (a leg that failed and was retried on another worker, so the client never saw it), migrated (a decode stream that broke after its first token and was continued on another worker)',
      labelNames: ['role', 'worker', 'outcome'],
      registers,
    });
    this.#workerFailures = new Counter({
      name: 'disagg_worker_failures_total',
      help: 'Failed calls to each worker, retried or answered, by pool, worker name and class: unreachable, broken-off (after it answered), worker-error (5xx, or a 404 or 405 from no handler of the engine: a path it does not serve), overloaded (429), refused (another 4xx), protocol (an answer that could not be read)',
      labelNames: ['role', 'worker', 'class'],
      registers,
    });
    registerPoolGauges(registers, source);
  }

  /**
   * A finished request's legs, counted per worker: both legs of a success or a cancellation,
   * the failing leg of an error. Aggregated requests have no prefill leg.
   */
  legsFinished(
    workers: { prefill?: string | undefined; decode?: string | undefined },
    outcome: 'success' | 'error' | 'cancelled',
    failedLeg: string | undefined,
  ): void {
    for (const role of ['prefill', 'decode'] as const) {
      const worker = workers[role];
      // Of a failed request only the failing leg's worker is counted: the other may never
      // have been called (a prefill that failed before decode was sent).
      if (worker === undefined || (outcome === 'error' && failedLeg !== role)) continue;
      this.#workerLegs.inc({ role, worker, outcome });
    }
  }

  /**
   * A leg that failed and went on elsewhere, charged to the worker it failed on: `retried`
   * (run again on another worker before the client got a byte) or `migrated` (a decode stream
   * that broke mid-way, continued on another worker). The client never saw the failure, the
   * operator should, or a worker that breaks every first attempt would look healthy in the
   * per-worker counts.
   */
  legRetried(
    role: 'prefill' | 'decode',
    worker: string | undefined,
    outcome: 'retried' | 'migrated' = 'retried',
  ): void {
    if (worker !== undefined) this.#workerLegs.inc({ role, worker, outcome });
  }

  /** A call to `worker` failed, of this class (see the proxy's failure rules). */
  workerFailed(role: 'prefill' | 'decode', worker: string, failureClass: string): void {
    this.#workerFailures.inc({ role, worker, class: failureClass });
  }

  /** A worker joined or left a pool (see {@link Membership}). */
  membershipChanged(role: string, change: string, source: string): void {
    this.#membership.inc({ role, change, source });
  }
}

/** The gauges read when `/metrics` is scraped: per worker its circuit, in-flight requests and rotation. */
function registerPoolGauges(registers: Registry[], { pools, nameOf, circuitOf }: FleetSource): void {
  new Gauge({
    name: 'disagg_worker_circuit_state',
    help: "Each worker's circuit breaker: 1 for its state (closed, open: out of rotation after failed requests, half-open: one trial request), 0 for the others",
    labelNames: ['role', 'worker', 'state'],
    registers,
    collect() {
      this.reset();
      for (const { role, pool } of sides(pools)) {
        for (const worker of pool.workers) {
          const current = circuitOf(worker);
          for (const state of CIRCUIT_STATES)
            this.set({ role, worker: nameOf(worker), state }, state === current ? 1 : 0);
        }
      }
    },
  });
  new Gauge({
    name: 'disagg_workers',
    help: 'Workers per pool and state (ready, down, draining)',
    labelNames: ['role', 'state'],
    registers,
    collect() {
      for (const role of ['prefill', 'decode'] as const) {
        const counts = { ready: 0, down: 0, draining: 0 };
        // A listed worker always has a state.
        for (const pool of pools.map((each) => each[role])) {
          for (const worker of pool.workers) counts[pool.stateOf(worker) as keyof typeof counts] += 1;
        }
        for (const [state, count] of Object.entries(counts)) this.set({ role, state }, count);
      }
    },
  });
  new Gauge({
    name: 'disagg_pool_workers',
    help: "Workers per pool (its first model's name; default: the pool of every other model), role and state (ready, down, draining)",
    labelNames: ['pool', 'role', 'state'],
    registers,
    collect() {
      this.reset();
      for (const pool of pools) {
        const name = (pool as { model?: unknown }).model;
        const label = typeof name === 'string' ? name : 'default';
        for (const role of ['prefill', 'decode'] as const) {
          const counts = { ready: 0, down: 0, draining: 0 };
          for (const worker of pool[role].workers) counts[pool[role].stateOf(worker) as keyof typeof counts] += 1;
          for (const [state, count] of Object.entries(counts)) this.set({ pool: label, role, state }, count);
        }
      }
    },
  });
  new Gauge({
    name: 'disagg_in_flight_requests',
    help: 'Requests under way per worker',
    labelNames: ['role', 'worker'],
    registers,
    collect() {
      // Workers come and go at run time: a series per worker present at this scrape only.
      this.reset();
      for (const { role, pool } of sides(pools)) {
        for (const worker of pool.workers) this.set({ role, worker: nameOf(worker) }, pool.inFlight(worker));
      }
    },
  });
  new Gauge({
    name: 'disagg_worker_available',
    help: 'Whether a worker is in rotation (1) or taken out by health checks or draining (0)',
    labelNames: ['role', 'worker'],
    registers,
    collect() {
      this.reset();
      for (const { role, pool } of sides(pools)) {
        for (const worker of pool.workers) this.set({ role, worker: nameOf(worker) }, pool.isAvailable(worker) ? 1 : 0);
      }
    },
  });
}

/** Each pool's two sides, as `{ role, pool }`, pool after pool. */
function sides(pools: FleetSource['pools']): Array<{ role: 'prefill' | 'decode'; pool: WorkerPool<Named> }> {
  return pools.flatMap((pool) => [
    { role: 'prefill' as const, pool: pool.prefill },
    { role: 'decode' as const, pool: pool.decode },
  ]);
}
