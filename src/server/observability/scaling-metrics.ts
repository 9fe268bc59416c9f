import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { FlowEvent } from '../../flow/events.js';
import type { EngineLoad } from '../../protocol/engines/load-metrics.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import { HandoffBook } from '../../scaling/handoff-book.js';
import { ReservedDecodes } from '../../scaling/reserved-decodes.js';
import {
  effectiveSaturation,
  SATURATION_DEFAULTS,
  type SaturationLimits,
  sideSaturation,
} from '../../scaling/stage-saturation.js';
import { LATENCY_BUCKETS } from './request-metrics.js';

type Worker = { url: string };
/** A pool as the scaling signals read it: its first model's name and its two sides. */
type ScaledPool = { model?: string | undefined; prefill: WorkerPool<Worker>; decode: WorkerPool<Worker> };

/** The `pool` label of a pool: its first model's name, `default` for the pool of every other model. */
export function poolLabel(pool: { model?: string | undefined } | undefined): string {
  return typeof pool?.model === 'string' ? pool.model : 'default';
}

/** What the saturation reads: each worker's engine (fresh, or undefined) and the limits of 1.0. */
export interface SaturationReadings {
  /** A worker's engine load, or undefined where it is not read (or stale); none by default. */
  engineOf?: ((worker: Worker) => EngineLoad | undefined) | undefined;
  limits?: SaturationLimits | undefined;
}

/** Why a request was served by decode alone, as the label says it (bounded: `other` for a reason of a program's own). */
const AGGREGATED_REASONS: ReadonlySet<string> = new Set([
  'short-prompt',
  'decode-cached',
  'no-prefill-worker',
  'no-prefill-header',
  'migration',
  'passthrough',
  'skipPrefill',
]);

// Prompt and answer lengths in tokens, from a one-word reply to a 256 Ki context.
const INPUT_BUCKETS = [16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144];
const OUTPUT_BUCKETS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];

/**
 * The signals to size and scale the fleet by, per pool: each stage's saturation (1.0 its set
 * point), the requests and prompt tokens in flight per role, the handoffs outstanding (a
 * prefill's KV waiting for decode) and their age, the P/D decision of each request with its
 * reason, and the prompt and answer lengths.
 *
 * @internal
 */
export class ScalingMetrics {
  readonly #handoffs = new HandoffBook();
  readonly #reserved = new ReservedDecodes();
  readonly #decisions: Counter<'pool' | 'decision' | 'reason'>;
  readonly #handoffAge: Histogram<'pool' | 'end'>;
  readonly #input: Histogram<'pool'>;
  readonly #output: Histogram<'pool'>;

  /** Registers them in `registers`, the gauges reading `pools` at each scrape. */
  constructor(registers: Registry[], pools: readonly ScaledPool[], readings: SaturationReadings = {}) {
    const limits = readings.limits ?? SATURATION_DEFAULTS;
    const engineOf = readings.engineOf ?? (() => undefined);
    this.#decisions = new Counter({
      name: 'disagg_decisions_total',
      help: 'P/D decisions by pool: disaggregated (reason none), aggregated on decode alone and why (short-prompt, decode-cached, no-prefill-worker, no-prefill-header, migration, passthrough, skipPrefill, other), refused before any worker and why (no-worker, capacity, shed, queue_timeout, max_concurrent, requests_per_minute, tokens_per_minute, limits_unavailable, slo: a sheddable request no worker was predicted to serve within its service levels); a request retried from prefill is decided again',
      labelNames: ['pool', 'decision', 'reason'],
      registers,
    });
    this.#handoffAge = new Histogram({
      name: 'disagg_handoff_age_seconds',
      help: 'How long each handoff was outstanding (prefill done and holding the KV, decode not yet taking it), by pool and how it ended: claimed by decode, or released (given up: released, orphaned, retried)',
      labelNames: ['pool', 'end'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#input = new Histogram({
      name: 'disagg_input_sequence_tokens',
      help: "Prompt tokens of each answered request, as its worker's usage reported them, by pool",
      labelNames: ['pool'],
      buckets: INPUT_BUCKETS,
      registers,
    });
    this.#output = new Histogram({
      name: 'disagg_output_sequence_tokens',
      help: "Generated tokens of each answered request, as its worker's usage reported them, by pool",
      labelNames: ['pool'],
      buckets: OUTPUT_BUCKETS,
      registers,
    });
    registerScalingGauges(registers, pools, { handoffs: this.#handoffs, reserved: this.#reserved }, engineOf, limits);
  }

  /**
   * A listener for one request's flow events in `pool`: its P/D decision, its decode leg
   * reserved until dispatched (with its prompt's `tokens`, read when it is routed), its handoff.
   */
  listener(pool: string, tokens: () => number = () => 0): (event: FlowEvent) => void {
    const handoff = this.#handoffs.listener(pool, (age, end) => this.#handoffAge.observe({ pool, end }, age));
    const reserved = this.#reserved.listener(pool, tokens);
    return (event) => {
      handoff(event);
      reserved(event);
      if (event.type === 'routed') this.decided(pool, event.strategy, event.reason);
    };
  }

  /** A request of `pool` was routed: disaggregated (any strategy but `aggregated`), or aggregated for `reason`. */
  decided(pool: string, strategy: string, reason: string | undefined): void {
    if (strategy !== 'aggregated') this.#decisions.inc({ pool, decision: 'disaggregated', reason: 'none' });
    else {
      const label = reason !== undefined && AGGREGATED_REASONS.has(reason) ? reason : 'other';
      this.#decisions.inc({ pool, decision: 'aggregated', reason: label });
    }
  }

  /** A request of `pool` refused before any worker was called (a limit, or no worker in rotation). */
  refused(pool: string, reason: string): void {
    this.#decisions.inc({ pool, decision: 'refused', reason });
  }

  /** The usage an answered request's worker reported. */
  lengths(pool: string, usage: { prompt_tokens?: number; completion_tokens?: number }): void {
    const { prompt_tokens: prompt, completion_tokens: completion } = usage;
    if (typeof prompt === 'number' && Number.isFinite(prompt)) this.#input.observe({ pool }, prompt);
    if (typeof completion === 'number' && Number.isFinite(completion)) this.#output.observe({ pool }, completion);
  }
}

const ROLES = ['prefill', 'decode'] as const;

/** The gauges read at a scrape: saturation per stage, in flight per role, handoffs outstanding. */
function registerScalingGauges(
  registers: Registry[],
  pools: readonly ScaledPool[],
  { handoffs, reserved }: { handoffs: HandoffBook; reserved: ReservedDecodes },
  engineOf: (worker: Worker) => EngineLoad | undefined,
  limits: SaturationLimits,
): void {
  // Each pool's two sides, worked out at a scrape (twice: both gauges show them).
  // A decode worker's load leaves out the legs routed to it whose prefill still runs.
  const saturations = () =>
    pools.map((pool) => {
      const label = poolLabel(pool);
      const { load } = pool.decode;
      const decodeLoad = {
        inFlight: (worker: Worker) => Math.max(0, load.inFlight(worker) - reserved.on(label, worker)),
      };
      return {
        pool: label,
        hasPrefill: pool.prefill.workers.length > 0,
        prefill: sideSaturation('prefill', pool.prefill.available, pool.prefill.load, engineOf, limits),
        decode: sideSaturation('decode', pool.decode.available, decodeLoad, engineOf, limits),
      };
    });
  new Gauge({
    name: 'disagg_stage_saturation',
    help: "How loaded each stage of a pool is, 1.0 its set point (not clamped): prefill and decode, the mean of their workers in rotation (each its engine's queue against --saturation-queue-depth or KV cache against --saturation-kv-usage where read, else its requests in flight, every replica's, against --saturation-prefill-requests or --saturation-decode-requests); effective, the busier of the two (decode alone without prefill workers). A side with no worker in rotation reads 1.0",
    labelNames: ['pool', 'stage'],
    registers,
    collect() {
      this.reset();
      for (const side of saturations()) {
        this.set({ pool: side.pool, stage: 'prefill' }, side.prefill.value);
        this.set({ pool: side.pool, stage: 'decode' }, side.decode.value);
        this.set(
          { pool: side.pool, stage: 'effective' },
          effectiveSaturation(side.prefill.value, side.decode.value, side.hasPrefill),
        );
      }
    },
  });
  new Gauge({
    name: 'disagg_saturation_workers',
    help: "Workers in rotation whose saturation was read from their engine's /metrics (engine) or from their requests in flight (in-flight), by pool and stage: where engine readings go stale, in-flight rises",
    labelNames: ['pool', 'stage', 'source'],
    registers,
    collect() {
      this.reset();
      for (const side of saturations()) {
        for (const stage of ROLES) {
          for (const [source, count] of Object.entries(side[stage].workers)) {
            this.set({ pool: side.pool, stage, source }, count);
          }
        }
      }
    },
  });
  // In flight per role: the pools' leases, less the decode legs still waiting for their prefill.
  const inFlightGauges = [
    {
      name: 'disagg_inflight_requests',
      help: "This replica's requests under way per pool and role: a prefill leg until prefill completes, a decode leg from its dispatch until its stream ends. Sum over replicas",
      read: (side: WorkerPool<Worker>) => side.requestsInFlight,
      reservedOf: (label: string) => reserved.of(label).requests,
    },
    {
      name: 'disagg_inflight_prompt_tokens',
      help: "Prompt tokens of this replica's requests under way per pool and role (by the router's tokenizer, else a quarter of the prompt's text): the backlog that, divided by a worker's measured prompt tokens per second, says how long a new prompt waits. Sum over replicas",
      read: (side: WorkerPool<Worker>) => side.promptTokensInFlight,
      reservedOf: (label: string) => reserved.of(label).tokens,
    },
  ];
  for (const { name, help, read, reservedOf } of inFlightGauges) {
    new Gauge({
      name,
      help,
      labelNames: ['pool', 'role'],
      registers,
      collect() {
        this.reset();
        for (const pool of pools) {
          const label = poolLabel(pool);
          this.set({ pool: label, role: 'prefill' }, read(pool.prefill));
          this.set({ pool: label, role: 'decode' }, read(pool.decode) - reservedOf(label));
        }
      },
    });
  }
  // The handoffs: one series per pool, whatever the book holds of it now.
  const handoffGauges = [
    {
      name: 'disagg_handoffs_outstanding',
      help: "This replica's handoffs outstanding per pool: prefill done and holding the KV, decode not yet taking it (KV waiting on decode). Sum over replicas",
      read: (pool: string) => handoffs.outstanding(pool),
    },
    {
      name: 'disagg_handoff_oldest_seconds',
      help: "The age of this replica's oldest outstanding handoff per pool, 0 with none: a handoff aging now, before the histogram hears of it",
      read: (pool: string) => handoffs.oldestSeconds(pool),
    },
  ];
  for (const { name, help, read } of handoffGauges) {
    new Gauge({
      name,
      help,
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const pool of namesOf(pools, handoffs)) this.set({ pool }, read(pool));
      },
    });
  }
}

/** Every pool's label, and any other a handoff was booked under. */
function namesOf(pools: readonly ScaledPool[], handoffs: HandoffBook): string[] {
  return [...new Set([...pools.map(poolLabel), ...handoffs.pools])];
}
