import type { RoutingInput } from './routing-input.js';

/**
 * What a policy may ask of the pool it chooses for: each worker's requests in flight, and, where
 * the pool counts them (its `promptTokens` option), the prompt tokens of this router's leases on it.
 */
export interface LoadView<W> {
  inFlight(worker: W): number;
  promptTokens?(worker: W): number;
}

/**
 * A way of choosing a worker of a `WorkerPool` for a request, by more than the pool's own
 * counts: `select` gets the workers in rotation (never empty), the pool's load and the
 * request (undefined when the caller has none, as for a health probe) and returns one of the
 * candidates. `forget` is called when a worker leaves the rotation, so that what the policy
 * knows of it (a cache it no longer has) is not counted on when it comes back.
 *
 * Built in: {@link cacheAware}, {@link powerOfTwo}, {@link sessionAffinity}.
 */
export interface RoutingPolicy<W> {
  /** For logs and the `--help` text. */
  readonly name: string;
  select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W;
  forget?(worker: W): void;
  /**
   * `select` chose `worker` for this request and the pool leased it (llm-d's pre-request
   * hook): where a policy records what it expects of the worker now, such as a speculative
   * cache entry for the prompt it was just sent. `select` itself only chooses.
   */
  routed?(worker: W, input: RoutingInput | undefined): void;
  /**
   * The leg on `worker` that `select` chose it for is over: `success`, it did its part (it
   * holds the request's prompt now), or `failure`. Where a policy learns from outcomes (as
   * cache-aware records what a worker holds); `select` only chooses.
   */
  completed?(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void;
  /**
   * The largest share (0 to 1) of the request's routing text that the policy believes one of
   * `candidates` holds in its cache, for a policy that knows (cache-aware). Conditional
   * aggregation asks it whether decode alone would find the prompt computed already.
   */
  cachedShare?(candidates: readonly W[], input: RoutingInput): number;
}

/** The candidate with the fewest requests in flight; ties go to the lowest `tieBreak`, then to the first. */
export function leastLoaded<W>(candidates: readonly W[], load: LoadView<W>, tieBreak?: (worker: W) => number): W {
  let best = candidates[0] as W;
  let bestLoad = load.inFlight(best);
  for (let i = 1; i < candidates.length; i++) {
    const worker = candidates[i] as W;
    const inFlight = load.inFlight(worker);
    if (inFlight < bestLoad || (inFlight === bestLoad && tieBreak !== undefined && tieBreak(worker) < tieBreak(best))) {
      best = worker;
      bestLoad = inFlight;
    }
  }
  return best;
}
