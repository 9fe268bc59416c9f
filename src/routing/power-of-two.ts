import type { LoadView, RoutingPolicy } from './routing-policy.js';

/** Options of {@link powerOfTwo}. */
export interface PowerOfTwoOptions {
  /** Numbers in [0, 1), for the two draws; `Math.random` by default (a seeded one for tests). */
  random?: (() => number) | undefined;
}

/**
 * Power of two choices: two distinct candidates drawn at random, the one with fewer requests
 * in flight wins (the first drawn on a tie). Close to least-in-flight's balance without every
 * router of a fleet piling onto the same least loaded worker at once.
 *
 * @example
 * new WorkerPool(workers, { selection: powerOfTwo() });
 */
export function powerOfTwo<W>(options: PowerOfTwoOptions = {}): RoutingPolicy<W> {
  const random = options.random ?? Math.random;
  return {
    name: 'power-of-two',
    select(candidates: readonly W[], load: LoadView<W>): W {
      if (candidates.length === 1) return candidates[0] as W;
      const first = Math.floor(random() * candidates.length);
      let second = Math.floor(random() * (candidates.length - 1));
      if (second >= first) second++;
      const a = candidates[first] as W;
      const b = candidates[second] as W;
      return load.inFlight(b) < load.inFlight(a) ? b : a;
    },
  };
}
