import type { RoutingPolicy } from './routing-policy.js';

/**
 * Each candidate in turn. The turn is the policy's own (one per pool), and counts positions in
 * the list of candidates it is given, so a worker out of rotation is skipped without a gap.
 *
 * @example
 * new WorkerPool(workers, { selection: roundRobin() }); // the same as selection: 'round-robin'
 */
export function roundRobin<W>(): RoutingPolicy<W> {
  let turn = 0;
  return {
    name: 'round-robin',
    select(candidates: readonly W[]): W {
      const worker = candidates[turn % candidates.length] as W;
      turn = (turn + 1) % candidates.length;
      return worker;
    },
  };
}
