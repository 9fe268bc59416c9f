// How loaded a stage of a pool is, as one number with 1.0 its set point: what an autoscaler
// holds a Deployment to and what an alert compares. The engines' own load where the router
// reads it (llm-d's utilization detector: the queue against a depth, the KV cache against a
// usage), else the requests in flight against what one worker takes.
import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import type { LoadView } from '../routing/routing-policy.js';

/** A pool's stage: its two sides, and the one a request meets (the busier of the two). */
export type Stage = 'prefill' | 'decode' | 'effective';

/** Where a worker's saturation came from: its engine's `/metrics`, or the requests in flight on it. */
export type SaturationSource = 'engine' | 'in-flight';

/**
 * What makes a worker saturated (1.0). Defaults: {@link SATURATION_DEFAULTS}.
 */
export interface SaturationLimits {
  /** Requests waiting in an engine's queue at the set point (llm-d's `queueDepthThreshold`, 5). */
  readonly queueDepth: number;
  /** The share of an engine's KV cache in use at the set point (llm-d's `kvCacheUtilThreshold`, 0.8). */
  readonly kvUsage: number;
  /** Requests in flight on one prefill worker at the set point, where no engine reading is had. */
  readonly prefillRequests: number;
  /** Requests in flight on one decode worker at the set point, where no engine reading is had. */
  readonly decodeRequests: number;
}

/**
 * The limits when none are given: llm-d's thresholds for the engines' readings; for the
 * requests in flight, 8 prompts on a prefill worker (a few of vLLM's 8,192-token batches of
 * 2,000-token prompts) and 256 on a decode worker (vLLM's and SGLang's smallest default
 * batch). Measure your own and set them.
 */
export const SATURATION_DEFAULTS: SaturationLimits = Object.freeze({
  queueDepth: 5,
  kvUsage: 0.8,
  prefillRequests: 8,
  decodeRequests: 256,
});

/** One worker's saturation, and what it was read from. */
export interface WorkerSaturation {
  readonly value: number;
  readonly source: SaturationSource;
}

/**
 * One worker's saturation: by its engine's reading when there is one (the greater of its queue
 * against `queueDepth` and its KV cache against `kvUsage`), else by its requests in flight
 * against the role's capacity. Not clamped: 2.0 is twice the set point.
 *
 * @example
 * workerSaturation('decode', { waiting: 10, running: 30, kvUsage: 0.4 }, 0, SATURATION_DEFAULTS); // { value: 2, source: 'engine' }
 * workerSaturation('decode', undefined, 128, SATURATION_DEFAULTS); // { value: 0.5, source: 'in-flight' }
 */
export function workerSaturation(
  role: 'prefill' | 'decode',
  engine: EngineLoad | undefined,
  inFlight: number,
  limits: SaturationLimits,
): WorkerSaturation {
  if (engine !== undefined) {
    return { value: Math.max(engine.waiting / limits.queueDepth, engine.kvUsage / limits.kvUsage), source: 'engine' };
  }
  const capacity = role === 'prefill' ? limits.prefillRequests : limits.decodeRequests;
  return { value: inFlight / capacity, source: 'in-flight' };
}

/** A side's saturation, and how many of its workers each source gave it. */
export interface SideSaturation {
  readonly value: number;
  readonly workers: Readonly<Record<SaturationSource, number>>;
}

/**
 * The saturation of one side of a pool: the mean of its workers in rotation (so a side of
 * four at 1.5 needs six to be at its set point). A side with none in rotation reads 1.0, as
 * llm-d's does: it takes nothing more; `workers` (all zero) tells that case apart.
 *
 * @param load the requests in flight per worker as the router's policy sees them (every
 *   replica's where they share them, so that each replica reports the same).
 * @param engineOf a worker's engine reading, fresh, or undefined.
 */
export function sideSaturation<W>(
  role: 'prefill' | 'decode',
  available: readonly W[],
  load: LoadView<W>,
  engineOf: (worker: W) => EngineLoad | undefined,
  limits: SaturationLimits,
): SideSaturation {
  const workers = { engine: 0, 'in-flight': 0 };
  if (available.length === 0) return { value: 1, workers };
  let sum = 0;
  for (const worker of available) {
    const each = workerSaturation(role, engineOf(worker), load.inFlight(worker), limits);
    sum += each.value;
    workers[each.source] += 1;
  }
  return { value: sum / available.length, workers };
}

/**
 * The stage a request of the pool meets: the busier side, or decode alone for a pool without
 * prefill workers (its requests are served aggregated there).
 */
export function effectiveSaturation(prefill: number, decode: number, hasPrefill: boolean): number {
  return hasPrefill ? Math.max(prefill, decode) : decode;
}
