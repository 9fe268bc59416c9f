// What every built-in workload generator takes and how its requests become a trace.

import type { TraceRequest } from './trace.js';

/** A workload's settings, each given (see `WorkloadOptions` for their defaults). */
export interface WorkloadSettings {
  /** The seed of its randomness: the same seed, the same requests. */
  readonly seed: number;
  /** How many requests the trace holds. */
  readonly requests: number;
  /** The mean arrival rate of requests, per second. */
  readonly ratePerS: number;
  /**
   * A tenant's arrivals this many times as fast as its share of `ratePerS` (a workload of
   * several tenants: one of them floods the fleet); none by default.
   */
  readonly tenantRateScale?: Readonly<Record<string, number>> | undefined;
}

/** A built-in workload: its one-line description, its default rate, and its generator. */
export interface WorkloadShape {
  /** One line, for `--help` and `--list-workloads`. */
  readonly help: string;
  /** The mean arrival rate, requests per second, when none is given. */
  readonly defaultRatePerS: number;
  /** The tenants its requests name, where they name any (what `tenantRateScale` may scale). */
  readonly tenants?: readonly string[] | undefined;
  /**
   * At least `settings.requests` requests (in any order), such that no request it leaves out
   * would arrive before the first `settings.requests` of them.
   */
  readonly generate: (settings: WorkloadSettings) => TraceRequest[];
}

/**
 * The first `count` of `requests` by arrival, as a trace reads them: arrivals in whole ms, as
 * Mooncake's are, the first at 0, ties in the generator's order.
 *
 * @example
 * const trace = asTrace([{ arrivalMs: 40.4, inputTokens: 10, outputTokens: 1, blocks: [0] }], 1);
 * trace[0]?.arrivalMs; // 0
 */
export function asTrace(requests: readonly TraceRequest[], count: number): TraceRequest[] {
  const sorted = requests
    .map((request) => ({ ...request, arrivalMs: Math.round(request.arrivalMs) }))
    .sort((a, b) => a.arrivalMs - b.arrivalMs)
    .slice(0, count);
  const start = sorted[0]?.arrivalMs ?? 0;
  return sorted.map((request) => ({ ...request, arrivalMs: request.arrivalMs - start }));
}
