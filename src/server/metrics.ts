import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { FlowEvent } from '../flow/events.js';
import type { WorkerPool } from '../flow/worker-pool.js';
import { CountedHistogram } from './counted-histogram.js';

// Up to the longest default deadline (a prefill's 600 s): a long prompt's TTFT past 30 s must
// land in a bucket of its own, not only in +Inf.
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const TOKEN_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** The proxy's own operational routes, which `disagg_requests_total` does not count. */
const NOT_REQUESTS: ReadonlySet<string> = new Set(['health', 'ready', 'metrics']);

/** A worker as the metrics name it. */
type Named = { url: string };

const CIRCUIT_STATES = ['closed', 'open', 'half-open'] as const;
/** A circuit breaker's state, as the health checker keeps it. */
type CircuitState = (typeof CIRCUIT_STATES)[number];

/** What the gauges read off admission: its counts, and its limits when it has them. */
type Admitting = {
  readonly active: number;
  readonly queued: number;
  readonly limits?: { readonly maxConcurrent: number; readonly queueSize: number };
  /** Each tenant's requests waiting, for the tenants the metrics name (the file's and the default). */
  readonly queuedByTenant?: () => ReadonlyArray<readonly [string, number]>;
};

/**
 * The proxy's Prometheus metrics, in a registry of its own (so that an embedding application's
 * default registry is left alone), fed from the flow's lifecycle events.
 *
 * @internal
 */
export class ProxyMetrics {
  readonly registry = new Registry();
  /** Where each metric is registered: the proxy's registry, and the application's if given. */
  readonly registers: Registry[];
  readonly #requests: Counter<'route' | 'status' | 'outcome' | 'leg'>;
  /** The flow's verdict on the request a response answers, until the response closes. */
  readonly #verdicts = new WeakMap<object, { outcome: string; leg: string | undefined }>();
  readonly #duration: Histogram<'route' | 'outcome'>;
  readonly #ttft: Histogram;
  readonly #prefill: Histogram;
  readonly #handoff: Histogram;
  readonly #interToken: CountedHistogram;
  readonly #held: Histogram;
  readonly #orphans: Counter;
  readonly #releases: Counter<'result'>;
  readonly #queueWait: Histogram<'tenant'>;
  readonly #tenantRequests: Counter<'tenant' | 'outcome'>;
  readonly #tenantTokens: Counter<'tenant'>;
  readonly #redisFailures: Counter;
  readonly #retries: Counter<'leg'>;
  readonly #migrations: Counter<'reason' | 'outcome'>;
  readonly #routed: Counter<'strategy' | 'reason'>;
  readonly #membership: Counter<'role' | 'change' | 'source'>;
  readonly #workerLegs: Counter<'role' | 'worker' | 'outcome'>;
  readonly #tokens: Counter<'route' | 'model' | 'kind'>;
  readonly #workerFailures: Counter<'role' | 'worker' | 'class'>;
  readonly #kvPredicted: Counter<'worker'>;
  readonly #kvReported: Counter<'worker'>;

  constructor(
    pools: { prefill: WorkerPool<Named>; decode: WorkerPool<Named> },
    admission?: Admitting,
    /** An application's registry the proxy's metrics join too (not the process metrics, which it has its own of). */
    shared?: Registry,
    /**
     * A worker's name for its `worker` label (what the admin API, logs and answers call it);
     * its URL when omitted. Read at each scrape: names are given as workers join.
     */
    nameOf: (worker: Named) => string = (worker) => worker.url,
    /** The state of a worker's circuit breaker, read at each scrape; every circuit closed when omitted. */
    circuitOf: (worker: Named) => CircuitState = () => 'closed',
  ) {
    const registers = shared === undefined ? [this.registry] : [this.registry, shared];
    this.registers = registers;
    collectDefaultMetrics({ register: this.registry });
    this.#requests = new Counter({
      name: 'disagg_requests_total',
      help: 'Every answered request, by route, HTTP status, outcome (success, error, cancelled by the client, shutdown: ended past the grace period, rejected before any worker was called) and, for errors, the leg that failed',
      labelNames: ['route', 'status', 'outcome', 'leg'],
      registers,
    });
    this.#duration = new Histogram({
      name: 'disagg_request_duration_seconds',
      help: 'From a request arriving to its answer closing (the last byte, or the connection cut), by route and outcome',
      labelNames: ['route', 'outcome'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#ttft = new Histogram({
      name: 'disagg_time_to_first_token_seconds',
      help: 'From the request reaching the router to its first token leaving it',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#prefill = new Histogram({
      name: 'disagg_prefill_duration_seconds',
      help: 'From the prefill dispatch to prefill completing',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#handoff = new Histogram({
      name: 'disagg_handoff_window_seconds',
      help: "From prefill's first output to decode taking the KV (the prefill worker holds it meanwhile)",
      buckets: LATENCY_BUCKETS,
      registers,
    });
    // Observed per token: a histogram without prom-client's per-call label handling.
    this.#interToken = new CountedHistogram(
      'disagg_inter_token_latency_seconds',
      'Between consecutive streamed chunks leaving the router',
      TOKEN_BUCKETS,
      registers,
    );
    this.#held = new Histogram({
      name: 'disagg_held_terminal_wait_seconds',
      help: "How long decode's last chunk waited for prefill to succeed",
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#orphans = new Counter({
      name: 'disagg_orphaned_handoffs_total',
      help: 'Handoffs given up after the clean-up budget: KV left on a prefill worker',
      registers,
    });
    this.#releases = new Counter({
      name: 'disagg_kv_releases_total',
      help: 'Handoffs whose KV a prefill held although it finished the request at its first token, sent to a decode worker to be freed: freed (its handler answered), failed (the KV waits for the engine to free it)',
      labelNames: ['result'],
      registers,
    });
    this.#retries = new Counter({
      name: 'disagg_retries_total',
      help: 'Requests sent again to another worker after a worker failure before their first byte, by failing leg',
      labelNames: ['leg'],
      registers,
    });
    this.#migrations = new Counter({
      name: 'disagg_migrations_total',
      help: 'Decode streams that broke after their first token, by why (stream_error: a reset, an error event or a cut stream; idle: silence past the idle deadline; worker_down: its worker taken out of rotation while it streamed) and what became of them: migrated (continued on another worker), refused (not continued faithfully, or migration off for it; the log says why), failed (the continuation could not start)',
      labelNames: ['reason', 'outcome'],
      registers,
    });
    this.#routed = new Counter({
      name: 'disagg_routed_requests_total',
      help: 'Requests by how they were served (sequential, concurrent, early or aggregated) and, for aggregated ones, why',
      labelNames: ['strategy', 'reason'],
      registers,
    });
    this.#queueWait = new Histogram({
      name: 'disagg_queue_wait_seconds',
      help: "How long an admitted request waited for a slot (0 when one was free), by tenant (the tenants file's names, default, or other)",
      labelNames: ['tenant'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#tenantRequests = new Counter({
      name: 'disagg_tenant_requests_total',
      help: "Generation requests by tenant and what admission did: admitted, or refused by a limit (requests_per_minute, tokens_per_minute, max_concurrent: the tenant's own; capacity: the proxy's slots and queue full; shed: its place given to a higher priority; queue_timeout: a wait past its band's time-to-live; limits_unavailable: Redis unreachable with --redis-failure closed)",
      labelNames: ['tenant', 'outcome'],
      registers,
    });
    this.#redisFailures = new Counter({
      name: 'disagg_redis_failures_total',
      help: "Calls to the Redis of the tenants' limits (--redis-url) that failed: while it is unreachable, requests go in without those limits (--redis-failure open) or are refused (closed)",
      registers,
    });
    this.#tenantTokens = new Counter({
      name: 'disagg_tenant_tokens_total',
      help: 'Tokens counted against each tenant (prompt and generated, as the answers reported them)',
      labelNames: ['tenant'],
      registers,
    });
    this.#membership = new Counter({
      name: 'disagg_worker_changes_total',
      help: 'Workers added, set draining, removed, and drained ones that left, by pool and by who changed it (config, admin, dns, kubernetes)',
      labelNames: ['role', 'change', 'source'],
      registers,
    });
    this.#workerLegs = new Counter({
      name: 'disagg_worker_legs_total',
      help: 'Legs each worker served, by pool, worker name and outcome: success, error (the leg that failed a finished request), cancelled (the client left), retried (a leg that failed and was retried on another worker, so the client never saw it)',
      labelNames: ['role', 'worker', 'outcome'],
      registers,
    });
    this.#workerFailures = new Counter({
      name: 'disagg_worker_failures_total',
      help: 'Failed calls to each worker, retried or answered, by pool, worker name and class: unreachable, broken-off (after it answered), worker-error (5xx), overloaded (429), refused (another 4xx), protocol (an answer that could not be read)',
      labelNames: ['role', 'worker', 'class'],
      registers,
    });
    this.#kvPredicted = new Counter({
      name: 'disagg_kv_predicted_cached_tokens_total',
      help: 'Prompt tokens precise-prefix expected each prefill worker to hold cached when it routed a request there',
      labelNames: ['worker'],
      registers,
    });
    this.#kvReported = new Counter({
      name: 'disagg_kv_reported_cached_tokens_total',
      help: 'Cached prompt tokens those prefill workers reported for the same requests (against the predicted: how true the index is)',
      labelNames: ['worker'],
      registers,
    });
    this.#tokens = new Counter({
      name: 'disagg_tokens_total',
      help: "Tokens of answered requests as the workers' usage reported them, by route, model and kind: prompt, completion, cached (prompt tokens the prefill worker's cache held)",
      labelNames: ['route', 'model', 'kind'],
      registers,
    });
    registerGauges(registers, pools, admission, nameOf, circuitOf);
  }

  /**
   * The usage a worker reported for a request. Only usage a worker sent is counted, so the
   * model label holds names a worker served, not whatever a client wrote.
   */
  tokens(
    route: string,
    model: string,
    usage: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: unknown },
  ): void {
    const cached = (usage.prompt_tokens_details as { cached_tokens?: unknown } | null | undefined)?.cached_tokens;
    for (const [kind, count] of [
      ['prompt', usage.prompt_tokens],
      ['completion', usage.completion_tokens],
      ['cached', cached],
    ] as const) {
      if (typeof count === 'number' && Number.isFinite(count) && count > 0)
        this.#tokens.inc({ route, model, kind }, count);
    }
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
   * A leg that failed and was retried on another worker: the client never saw the failure,
   * the operator should (`outcome="retried"`), or a worker that fails every first attempt
   * would look healthy in the per-worker counts.
   */
  legRetried(role: 'prefill' | 'decode', worker: string | undefined): void {
    if (worker !== undefined) this.#workerLegs.inc({ role, worker, outcome: 'retried' });
  }

  /** A call to `worker` failed, of this class (see the proxy's failure rules). */
  workerFailed(role: 'prefill' | 'decode', worker: string, failureClass: string): void {
    this.#workerFailures.inc({ role, worker, class: failureClass });
  }

  /** A worker joined or left a pool (see {@link Membership}). */
  membershipChanged(role: string, change: string, source: string): void {
    this.#membership.inc({ role, change, source });
  }

  /** An event listener that feeds the metrics of one request. */
  listener(): (event: FlowEvent) => void {
    let prefillDispatched: number | undefined;
    let firstOutput: number | undefined;
    return (event) => {
      switch (event.type) {
        case 'routed':
          this.#routed.inc({ strategy: event.strategy, reason: event.reason ?? '' });
          break;
        case 'prefillDispatched':
          prefillDispatched = event.elapsedMs;
          break;
        case 'prefillFirstOutput':
          firstOutput = event.elapsedMs;
          break;
        case 'prefillCompleted':
          if (prefillDispatched !== undefined) this.#prefill.observe((event.elapsedMs - prefillDispatched) / 1000);
          break;
        case 'kvClaimed':
          if (firstOutput !== undefined) this.#handoff.observe((event.elapsedMs - firstOutput) / 1000);
          break;
        case 'firstToken':
          this.#ttft.observe(event.elapsedMs / 1000);
          break;
        case 'terminalReleased':
          this.#held.observe(event.heldMs / 1000);
          break;
        case 'cleanupExpired':
          this.#orphans.inc();
          break;
        case 'handoffReleased':
          this.#releases.inc({ result: event.freed ? 'freed' : 'failed' });
          break;
      }
    };
  }

  /** What the flow concluded of the request `res` answers (its `finished` event). */
  verdict(res: object, outcome: string, leg: string | undefined): void {
    this.#verdicts.set(res, { outcome, leg });
  }

  /**
   * Counts one request once its response has closed (not `/health`, `/ready`, `/metrics`),
   * whatever answered it: the flow's verdict
   * where the request reached the flow; otherwise a 4xx is `rejected`, a 5xx an `error`, an
   * answer cut before its end `cancelled`.
   */
  answered(
    route: string,
    res: { statusCode: number; writableFinished: boolean },
    seconds?: number,
    how: { cutAtShutdown?: boolean } = {},
  ): void {
    // Health probes and scrapes are not requests: a kubelet's every 10 s would outnumber a
    // quiet fleet's traffic and pull its error ratio toward zero.
    if (NOT_REQUESTS.has(route)) return;
    const verdict = this.#verdicts.get(res);
    const status = res.statusCode;
    // A request ended by shutdown past the grace period is neither the client's doing
    // (cancelled) nor a worker's (error): an operator sizing --grace-period-ms counts these.
    const outcome = how.cutAtShutdown
      ? 'shutdown'
      : (verdict?.outcome ??
        (!res.writableFinished ? 'cancelled' : status >= 500 ? 'error' : status >= 400 ? 'rejected' : 'success'));
    const leg = how.cutAtShutdown ? '' : (verdict?.leg ?? '');
    this.#requests.inc({ route, status: String(status), outcome, leg });
    if (seconds !== undefined) this.#duration.observe({ route, outcome }, seconds);
  }

  /** A request precise-prefix routed: the cached tokens it expected of `worker`, and those the worker reported. */
  kvPrediction(worker: string, predicted: number, reported: number): void {
    this.#kvPredicted.inc({ worker }, predicted);
    this.#kvReported.inc({ worker }, reported);
  }

  /** A request is tried again after its `leg` failed. */
  retried(leg: string): void {
    this.#retries.inc({ leg });
  }

  /** A decode stream broke after its first token: why, and whether it went on elsewhere. */
  migration(reason: string, outcome: string): void {
    this.#migrations.inc({ reason, outcome });
  }

  /** How long an admitted request waited in the queue. */
  queueWait(seconds: number, tenant = 'default'): void {
    this.#queueWait.observe({ tenant }, seconds);
  }
  /** What admission did with a request of `tenant` (a label from `tenantLabel`). */
  tenantRequest(tenant: string, outcome: string): void {
    this.#tenantRequests.inc({ tenant, outcome });
  }

  /** A call to the limits' Redis failed. */
  redisFailed(): void {
    this.#redisFailures.inc();
  }

  /** Tokens counted against `tenant`. */
  tenantTokens(tenant: string, tokens: number): void {
    if (tokens > 0) this.#tenantTokens.inc({ tenant }, tokens);
  }

  /** The gap between two chunks written to a client. */
  interToken(seconds: number): void {
    this.#interToken.observe(seconds);
  }
}

/** The gauges read when `/metrics` is scraped: admission, and per worker in-flight requests and rotation. */
function registerGauges(
  registers: Registry[],
  pools: { prefill: WorkerPool<Named>; decode: WorkerPool<Named> },
  admission: Admitting | undefined,
  nameOf: (worker: Named) => string,
  circuitOf: (worker: Named) => CircuitState,
): void {
  new Gauge({
    name: 'disagg_admission_limit',
    help: 'The admission limits: in_flight (--max-concurrent-requests) and queue (--queue-size); a full queue answers 429',
    labelNames: ['limit'],
    registers,
    collect() {
      if (admission?.limits === undefined) return;
      this.set({ limit: 'in_flight' }, admission.limits.maxConcurrent);
      this.set({ limit: 'queue' }, admission.limits.queueSize);
    },
  });
  new Gauge({
    name: 'disagg_worker_circuit_state',
    help: "Each worker's circuit breaker: 1 for its state (closed, open: out of rotation after failed requests, half-open: one trial request), 0 for the others",
    labelNames: ['role', 'worker', 'state'],
    registers,
    collect() {
      this.reset();
      for (const [role, pool] of Object.entries(pools)) {
        for (const worker of pool.workers) {
          const current = circuitOf(worker);
          for (const state of CIRCUIT_STATES)
            this.set({ role, worker: nameOf(worker), state }, state === current ? 1 : 0);
        }
      }
    },
  });
  new Gauge({
    name: 'disagg_queue_depth',
    help: 'Requests waiting for a slot (--max-concurrent-requests)',
    registers,
    collect() {
      this.set(admission?.queued ?? 0);
    },
  });
  new Gauge({
    name: 'disagg_tenant_queue_depth',
    help: "Each tenant's requests waiting for a slot (the tenants file's tenants and the default)",
    labelNames: ['tenant'],
    registers,
    collect() {
      this.reset();
      for (const [tenant, queued] of admission?.queuedByTenant?.() ?? []) this.set({ tenant }, queued);
    },
  });
  new Gauge({
    name: 'disagg_admitted_requests',
    help: 'Generation requests holding a slot',
    registers,
    collect() {
      this.set(admission?.active ?? 0);
    },
  });
  new Gauge({
    name: 'disagg_workers',
    help: 'Workers per pool and state (ready, down, draining)',
    labelNames: ['role', 'state'],
    registers,
    collect() {
      for (const [role, pool] of Object.entries(pools)) {
        const counts = { ready: 0, down: 0, draining: 0 };
        // A listed worker always has a state.
        for (const worker of pool.workers) counts[pool.stateOf(worker) as keyof typeof counts] += 1;
        for (const [state, count] of Object.entries(counts)) this.set({ role, state }, count);
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
      for (const [role, pool] of Object.entries(pools)) {
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
      for (const [role, pool] of Object.entries(pools)) {
        for (const worker of pool.workers) this.set({ role, worker: nameOf(worker) }, pool.isAvailable(worker) ? 1 : 0);
      }
    },
  });
}
