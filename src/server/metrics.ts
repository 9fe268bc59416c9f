import { Counter, collectDefaultMetrics, Registry } from 'prom-client';
import type { FlowEvent } from '../flow/events.js';
import type { WorkerPool } from '../routing/worker-pool.js';
import { type CircuitState, FleetMetrics, type Named } from './fleet-metrics.js';
import { KvPredictionMetrics } from './kv-metrics.js';
import { PoolSet } from './pool-set.js';
import { RequestMetrics } from './request-metrics.js';
import { type Admitting, TenancyMetrics } from './tenancy-metrics.js';

/**
 * The proxy's Prometheus metrics, in a registry of its own (so that an embedding application's
 * default registry is left alone): one handle over the concerns that each register their own
 * (`request-metrics`, `tenancy-metrics`, `fleet-metrics`, `kv-metrics`). A new concern
 * registers its metrics in {@link registers} beside them, as `registerKvMetrics` does.
 *
 * @internal
 */
export class ProxyMetrics {
  readonly registry = new Registry();
  /** Where each metric is registered: the proxy's registry, and the application's if given. */
  readonly registers: Registry[];
  readonly #requests: RequestMetrics;
  readonly #tenancy: TenancyMetrics;
  readonly #fleet: FleetMetrics;
  readonly #kvPrediction: KvPredictionMetrics;
  readonly #rewrites: Counter;

  constructor(
    /** The fleet, or one pool's two sides. */
    pools: PoolSet | { prefill: WorkerPool<Named>; decode: WorkerPool<Named> },
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
    this.#requests = new RequestMetrics(registers);
    this.#tenancy = new TenancyMetrics(registers, admission);
    this.#fleet = new FleetMetrics(registers, {
      pools: pools instanceof PoolSet ? pools.all() : [pools],
      nameOf,
      circuitOf,
    });
    this.#kvPrediction = new KvPredictionMetrics(registers);
    this.#rewrites = new Counter({
      name: 'disagg_model_rewrites_total',
      help: 'Requests whose model a rewrite rule sent as one of its targets (a canary), by the model asked for and the target chosen (the configured names only)',
      labelNames: ['model', 'target'],
      registers,
    });
  }

  /** A request for `model` was sent as `target` by a rewrite rule. */
  modelRewritten(model: string, target: string): void {
    this.#rewrites.inc({ model, target });
  }

  /** See {@link RequestMetrics.tokens}. */
  tokens(route: string, model: string, usage: Parameters<RequestMetrics['tokens']>[2]): void {
    this.#requests.tokens(route, model, usage);
  }

  /** See {@link RequestMetrics.listener}. */
  listener(): (event: FlowEvent) => void {
    return this.#requests.listener();
  }

  /** See {@link RequestMetrics.verdict}. */
  verdict(res: object, outcome: string, leg: string | undefined): void {
    this.#requests.verdict(res, outcome, leg);
  }

  /** See {@link RequestMetrics.answered}. */
  answered(...args: Parameters<RequestMetrics['answered']>): void {
    this.#requests.answered(...args);
  }

  /** See {@link RequestMetrics.retried}. */
  retried(leg: string): void {
    this.#requests.retried(leg);
  }

  /** See {@link RequestMetrics.migration}. */
  migration(reason: string, outcome: string): void {
    this.#requests.migration(reason, outcome);
  }

  /** See {@link RequestMetrics.interToken}. */
  interToken(seconds: number): void {
    this.#requests.interToken(seconds);
  }

  /** See {@link TenancyMetrics.queueWait}. */
  queueWait(seconds: number, tenant?: string): void {
    this.#tenancy.queueWait(seconds, tenant);
  }

  /** See {@link TenancyMetrics.tenantRequest}. */
  tenantRequest(tenant: string, outcome: string): void {
    this.#tenancy.tenantRequest(tenant, outcome);
  }

  /** See {@link TenancyMetrics.redisFailed}. */
  redisFailed(): void {
    this.#tenancy.redisFailed();
  }

  /** See {@link TenancyMetrics.tenantTokens}. */
  tenantTokens(tenant: string, tokens: number): void {
    this.#tenancy.tenantTokens(tenant, tokens);
  }

  /** See {@link FleetMetrics.legsFinished}. */
  legsFinished(...args: Parameters<FleetMetrics['legsFinished']>): void {
    this.#fleet.legsFinished(...args);
  }

  /** See {@link FleetMetrics.legRetried}. */
  legRetried(role: 'prefill' | 'decode', worker: string | undefined): void {
    this.#fleet.legRetried(role, worker);
  }

  /** See {@link FleetMetrics.workerFailed}. */
  workerFailed(role: 'prefill' | 'decode', worker: string, failureClass: string): void {
    this.#fleet.workerFailed(role, worker, failureClass);
  }

  /** See {@link FleetMetrics.membershipChanged}. */
  membershipChanged(role: string, change: string, source: string): void {
    this.#fleet.membershipChanged(role, change, source);
  }

  /** See {@link KvPredictionMetrics.observe}. */
  kvPrediction(worker: string, predicted: number, reported: number): void {
    this.#kvPrediction.observe(worker, predicted, reported);
  }
}
