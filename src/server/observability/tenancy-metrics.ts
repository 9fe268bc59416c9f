import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { LATENCY_BUCKETS } from './request-metrics.js';

/** What the gauges read off admission: its counts, and its limits when it has them. */
export type Admitting = {
  readonly active: number;
  readonly queued: number;
  readonly limits?: { readonly maxConcurrent: number; readonly queueSize: number };
  /** Each tenant's requests waiting, for the tenants the metrics name (the file's and the default). */
  readonly queuedByTenant?: () => ReadonlyArray<readonly [string, number]>;
};

/**
 * The metrics of tenancy and admission: queue waits, what admission did per tenant, tenants'
 * tokens, the limits' Redis failing, and the admission gauges read at a scrape.
 *
 * @internal
 */
export class TenancyMetrics {
  readonly #queueWait: Histogram<'tenant'>;
  readonly #tenantRequests: Counter<'tenant' | 'outcome'>;
  readonly #tenantTokens: Counter<'tenant'>;
  readonly #redisFailures: Counter;

  /** Registers them in `registers`, the gauges reading `admission` (none: zeros, no limits). */
  constructor(registers: Registry[], admission: Admitting | undefined) {
    this.#queueWait = new Histogram({
      name: 'disagg_queue_wait_seconds',
      help: "How long an admitted request waited for a slot (0 when one was free), by tenant (the tenants file's names, default, or other)",
      labelNames: ['tenant'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#tenantRequests = new Counter({
      name: 'disagg_tenant_requests_total',
      help: "Generation requests by tenant and what admission did: admitted, or refused by a limit (requests_per_minute, tokens_per_minute, max_concurrent: the tenant's own; capacity: the proxy's slots and queue full; shed: its place given to a higher priority; queue_timeout: a wait past its band's time-to-live; limits_unavailable: Redis unreachable with --redis-failure closed); preempted: admitted, then its slot given to a higher priority while under way (--preempt); slo: admitted, then refused as sheddable once no worker was predicted to serve it within its service levels (both counted besides their admitted)",
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
    registerAdmissionGauges(registers, admission);
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
}

/** The gauges read off admission when `/metrics` is scraped. */
function registerAdmissionGauges(registers: Registry[], admission: Admitting | undefined): void {
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
}
