import type { LoadView, RoutingPolicy } from './routing-policy.js';

/**
 * The candidate with the fewest requests in flight. Ties rotate: the search starts one place
 * further each time, so that equally idle workers share the load instead of the first taking it all.
 *
 * @example
 * new WorkerPool(workers, { selection: leastInFlight() }); // the same as selection: 'least-in-flight'
 */
export function leastInFlight<W>(): RoutingPolicy<W> {
  let turn = 0;
  return {
    name: 'least-in-flight',
    select(candidates: readonly W[], load: LoadView<W>): W {
      const start = turn % candidates.length;
      let best = candidates[start] as W;
      for (let offset = 1; offset < candidates.length; offset++) {
        const worker = candidates[(start + offset) % candidates.length] as W;
        if (load.inFlight(worker) < load.inFlight(best)) best = worker;
      }
      turn = (start + 1) % candidates.length;
      return best;
    },
  };
}
