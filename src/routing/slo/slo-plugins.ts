// The SLO-aware scorer and filter, as llm-d's predicted-latency scorer and SLO-headroom filter:
// both read each candidate's predicted latency (`LatencyPredictor`) against the request's
// service levels. Which latencies a pool answers for depends on its leg: a prefill worker the
// time to first token; a decode worker the inter-token time, and the first token too when it
// serves the request alone (no prefill leg was picked).

import type { RoutingInput, ServiceLevelTargets } from '../routing-input.js';
import type { LoadView } from '../routing-policy.js';
import type { Filter, Scorer } from '../scoring.js';
import type { Consumption, RoutingServices } from '../services.js';
import type { LatencyPrediction, LatencyPredictor, LatencyRole } from './latency-predictor.js';

/** One latency a service level sets a target for. */
type Metric = 'ttft' | 'itl';

const PREDICTED: Record<Metric, keyof LatencyPrediction> = { ttft: 'ttftMs', itl: 'itlMs' };
const TARGET: Record<Metric, keyof ServiceLevelTargets> = { ttft: 'ttftMs', itl: 'itlMs' };

/**
 * The latencies a pool of `role` answers for in `input`'s request: prefill, the first token;
 * decode, the gaps between tokens, and the first token when no prefill leg was picked. A pool
 * of no known role serves whole requests: both.
 */
function metricsOf(role: LatencyRole | undefined, input: RoutingInput | undefined): readonly Metric[] {
  if (role === 'prefill') return ['ttft'];
  if (role === 'decode' && input?.picked.has('prefill') === true) return ['itl'];
  return ['ttft', 'itl'];
}

/** The target of `metric` in `levels`, when it sets a usable one (a positive number of ms). */
function targetOf(levels: ServiceLevelTargets | undefined, metric: Metric): number | undefined {
  const target = levels?.[TARGET[metric]];
  return typeof target === 'number' && Number.isFinite(target) && target > 0 ? target : undefined;
}

/** Each candidate's prediction for `input` in a pool of `role`. */
function predictions<W extends { url: string }>(
  predictor: LatencyPredictor<W>,
  role: LatencyRole | undefined,
  candidates: readonly W[],
  load: LoadView<W>,
  input: RoutingInput | undefined,
): LatencyPrediction[] {
  const as = role ?? 'decode';
  return candidates.map((worker) => predictor.predict(worker, predictor.features(worker, input, as, load)));
}

/**
 * Prefers the worker whose predicted latency leaves the most headroom under the request's
 * service levels: each scores 0.5 plus half its smallest relative headroom over the targets it
 * answers for (1 − predicted / target), within 0 to 1, so that meeting a target scores above
 * 0.5 and missing it below. A request without a target for this pool's latencies, or one that
 * no candidate is predicted to meet, prefers the lowest predicted latency: without targets the
 * best scores 1, another best / its own; when every candidate misses them, the least late
 * scores 1 and the latest 0 (rather than all 0, which would leave the choice to the other
 * scorers, blind to how late each would be). A worker not yet
 * predicted (too few samples, its pool's too) scores midway between the others, neither best
 * nor worst, so that it is still tried.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: sloHeadroomScorer(predictor, 'prefill'), weight: 2 }, { scorer: loadScorer(), weight: 1 }] });
 */
export function sloHeadroomScorer<W extends { url: string }>(
  predictor: LatencyPredictor<W>,
  role?: LatencyRole,
): Scorer<W> {
  return {
    name: 'slo-headroom',
    score(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): readonly number[] {
      const metrics = metricsOf(role, input);
      const predicted = predictions(predictor, role, candidates, load, input);
      const targeted = metrics.filter((metric) => targetOf(input?.serviceLevels, metric) !== undefined);
      const headroom = predicted.map((prediction) => headroomScore(prediction, targeted, input?.serviceLevels));
      // No candidate predicted to meet the targets (a long prompt, a loaded pool): each would
      // score 0 and the scorer would say nothing, so the least late scores 1 and the latest 0,
      // spread as the load scorer spreads its counts (a pool's fewest requests in flight are
      // not its least work when the prompts differ a hundredfold).
      const scores =
        targeted.length === 0
          ? relativeScores(predicted, metrics, lowestOverOwn)
          : headroom.some((score) => score !== undefined && score >= 0.5)
            ? headroom
            : relativeScores(predicted, targeted, leastLate);
      const known = scores.filter((score): score is number => score !== undefined);
      const neutral = known.length === 0 ? 0.5 : (Math.min(...known) + Math.max(...known)) / 2;
      return scores.map((score) => score ?? neutral);
    },
  };
}

/** 0.5 plus half the smallest relative headroom over `metrics`' targets, within 0 to 1; undefined when one is not predicted. */
function headroomScore(
  prediction: LatencyPrediction,
  metrics: readonly Metric[],
  levels: ServiceLevelTargets | undefined,
): number | undefined {
  let headroom = Number.POSITIVE_INFINITY;
  for (const metric of metrics) {
    const predicted = prediction[PREDICTED[metric]];
    const target = targetOf(levels, metric) as number;
    if (predicted === undefined) return undefined;
    headroom = Math.min(headroom, 1 - predicted / target);
  }
  return Math.min(1, Math.max(0, 0.5 + headroom / 2));
}

/** The lowest and highest of a latency predicted among the candidates, undefined where none is. */
interface Span {
  readonly low: number;
  readonly high: number;
}

/**
 * Each candidate's score against the others': per latency, `score` of its prediction within
 * the candidates' span, the worst latency counting; undefined for a candidate with a latency
 * not predicted.
 */
function relativeScores(
  predicted: readonly LatencyPrediction[],
  metrics: readonly Metric[],
  score: (value: number, span: Span) => number,
): (number | undefined)[] {
  const spans = metrics.map((metric): Span | undefined => {
    const known = predicted
      .map((prediction) => prediction[PREDICTED[metric]])
      .filter((value): value is number => value !== undefined);
    return known.length === 0 ? undefined : { low: Math.min(...known), high: Math.max(...known) };
  });
  return predicted.map((prediction) => {
    let worst = 1;
    for (const [i, metric] of metrics.entries()) {
      const value = prediction[PREDICTED[metric]];
      const span = spans[i];
      if (value === undefined || span === undefined) return undefined;
      worst = Math.min(worst, score(value, span));
    }
    return worst;
  });
}

/** Spread from 1 (the lowest prediction) to 0 (the highest); 1 where they are all equal. */
const leastLate = (value: number, { low, high }: Span) => (high > low ? (high - value) / (high - low) : 1);

/** The lowest prediction over this one (1 ms added to both, so that a prediction of 0 is not infinitely better). */
const lowestOverOwn = (value: number, { low }: Span) => (low + 1) / (value + 1);

/**
 * Drops the workers predicted to miss the request's service levels for this pool's latencies
 * (see {@link sloHeadroomScorer} for which). When it would drop them all, it keeps them all (the
 * request is served best effort) and notes the leg unmeetable on the request
 * (`RoutingInput.noteUnmeetable`: `prefill`, or `decode` for a decode pool or one of no known
 * role), what lets the router shed a sheddable request. A request without a target for them, or
 * a worker not yet predicted, is never dropped.
 *
 * @example
 * scoredPolicy({ filters: [sloFeasibleFilter(predictor, 'decode')], scorers: [{ scorer: loadScorer(), weight: 1 }] });
 */
export function sloFeasibleFilter<W extends { url: string }>(
  predictor: LatencyPredictor<W>,
  role?: LatencyRole,
): Filter<W> {
  return {
    name: 'slo-feasible',
    filter(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): readonly W[] {
      const levels = input?.serviceLevels;
      if (input === undefined || levels === undefined) return candidates;
      const targeted = metricsOf(role, input).filter((metric) => targetOf(levels, metric) !== undefined);
      if (targeted.length === 0) return candidates;
      const predicted = predictions(predictor, role, candidates, load, input);
      const kept = candidates.filter((_worker, i) =>
        targeted.every((metric) => {
          const value = (predicted[i] as LatencyPrediction)[PREDICTED[metric]];
          return value === undefined || value <= (targetOf(levels, metric) as number);
        }),
      );
      if (kept.length > 0) return kept;
      input.noteUnmeetable(role ?? 'decode');
      return candidates;
    },
  };
}

/**
 * What the predicted-latency plugins read: the workers' predicted latency (learned from the
 * requests served), and, where the router has them, the engines' KV blocks (what a prompt finds
 * cached) and their own load (other routers' requests too).
 *
 * @internal
 */
export const LATENCY_CONSUMES: Consumption = { latency: 'required', 'kv-index': 'optional', 'engine-load': 'optional' };

/**
 * The router's latency predictor, or a TypeError naming the plugin (only a router that builds
 * the services without it: the proxy builds one for any plugin that declares `latency`).
 *
 * @internal
 */
export function latencyOf<W extends { url: string }>(
  services: RoutingServices<W>,
  plugin: string,
): LatencyPredictor<W> {
  if (services.latency === undefined) {
    throw new TypeError(
      `The ${plugin} plugin reads the workers' predicted latency (services.latency, a LatencyPredictor), which this router does not have`,
    );
  }
  return services.latency as LatencyPredictor<W>;
}
