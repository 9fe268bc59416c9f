import { Counter, collectDefaultMetrics, Registry } from 'prom-client';
import type { FlowEvent } from '../../flow/events.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import { PoolSet } from '../fleet/pool-set.js';
import { registerBuildInfo } from './build-info.js';
import { type CircuitState, FleetMetrics, type Named } from './fleet-metrics.js';
import { KvPredictionMetrics } from './kv-metrics.js';
import { RequestMetrics } from './request-metrics.js';
import { type SaturationReadings, ScalingMetrics } from './scaling-metrics.js';
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
  readonly #scaling: ScalingMetrics;
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
    /** What the stages' saturation reads: the engines' load where scraped, and the limits of 1.0. */
    saturation: SaturationReadings = {},
  ) {
    const registers = shared === undefined ? [this.registry] : [this.registry, shared];
    this.registers = registers;
    collectDefaultMetrics({ register: this.registry });
    registerBuildInfo(registers);
    this.#requests = new RequestMetrics(registers);
    this.#tenancy = new TenancyMetrics(registers, admission);
    const all = pools instanceof PoolSet ? pools.all() : [pools];
    this.#fleet = new FleetMetrics(registers, {
      pools: all,
      nameOf,
      circuitOf,
    });
    this.#kvPrediction = new KvPredictionMetrics(registers);
    this.#scaling = new ScalingMetrics(registers, all, saturation);
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

  /**
   * An event listener that feeds the metrics of one request of `pool` (its label, see
   * `poolLabel`) with a prompt of `tokens`: {@link RequestMetrics.listener}'s and {@link ScalingMetrics.listener}'s.
   */
  listener(pool = 'default', tokens?: () => number): (event: FlowEvent) => void {
    const requests = this.#requests.listener();
    const scaling = this.#scaling.listener(pool, tokens);
    return (event) => {
      requests(event);
      scaling(event);
    };
  }

  /** See {@link ScalingMetrics.decided}. */
  decided(pool: string, strategy: string, reason: string | undefined): void {
    this.#scaling.decided(pool, strategy, reason);
  }

  /** See {@link ScalingMetrics.refused}. */
  refused(pool: string, reason: string): void {
    this.#scaling.refused(pool, reason);
  }

  /** See {@link ScalingMetrics.lengths}. */
  lengths(pool: string, usage: Parameters<ScalingMetrics['lengths']>[1]): void {
    this.#scaling.lengths(pool, usage);
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
  legRetried(role: 'prefill' | 'decode', worker: string | undefined, outcome?: 'retried' | 'migrated'): void {
    this.#fleet.legRetried(role, worker, outcome);
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
