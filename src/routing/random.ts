import type { RoutingPolicy } from './routing-policy.js';

/** Options of {@link random}. */
export interface RandomOptions {
  /** Numbers in [0, 1); `Math.random` by default (a seeded one for tests). */
  random?: (() => number) | undefined;
}

/**
 * A candidate drawn uniformly at random: no state, no coordination, the same spread on every
 * replica of a fleet (llm-d's random picker, SGLang's gateway's `random` policy). A baseline
 * for the others, and a fair choice for workers of equal speed under even traffic.
 *
 * @example
 * new WorkerPool(workers, { selection: random() });
 */
export function random<W>(options: RandomOptions = {}): RoutingPolicy<W> {
  const draw = options.random ?? Math.random;
  return {
    name: 'random',
    select(candidates: readonly W[]): W {
      return candidates[Math.floor(draw() * candidates.length)] as W;
    },
  };
}
