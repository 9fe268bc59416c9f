import type { KvBlockIndex } from '../kv/block-index.js';
import type { RoutingInput } from './routing-input.js';
import type { LoadView, RoutingPolicy } from './routing-policy.js';
import { loadScorer, type Scorer, scoredPolicy } from './scoring.js';

/**
 * Where a KV-aware scorer finds the engines' blocks: the index the proxy (or your router)
 * feeds from their KV events, or undefined while there is none yet (every score is then 0).
 */
export type KvIndexSource<W> = () => KvBlockIndex<W> | undefined;

/**
 * Prefix overlap as the engines report it: each candidate scores the share of the request's
 * prompt tokens it holds in whole KV blocks from the start, read from the block index (the
 * engines' own events, so every router replica scores alike). 0 for a request without token ids.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: kvPrefixScorer(() => index), weight: 2 }, { scorer: loadScorer(), weight: 1 }] });
 */
export function kvPrefixScorer<W>(index: KvIndexSource<W>): Scorer<W> {
  return {
    name: 'kv-prefix',
    score(candidates: readonly W[], _load: LoadView<W>, input: RoutingInput | undefined): readonly number[] {
      const tokens = input?.tokenIds;
      const known = index();
      if (tokens === undefined || tokens.length === 0 || known === undefined) return candidates.map(() => 0);
      const overlap = known.overlap(tokens, candidates);
      return candidates.map((worker) => (overlap.get(worker) ?? 0) / tokens.length);
    },
  };
}

/** Options of {@link precisePrefix}. */
export interface PrecisePrefixOptions {
  /** The weight of prefix overlap against load (1). Default 2, as llm-d weighs its prefix scorer. */
  prefixWeight?: number;
}

/**
 * Routing on what the engines hold: KV prefix overlap from their events ({@link kvPrefixScorer})
 * weighed against load (requests in flight from this router), the highest total wins, ties to
 * the less loaded. Its `cachedShare` is the best overlap, for conditional disaggregation.
 */
export function precisePrefix<W>(index: KvIndexSource<W>, options: PrecisePrefixOptions = {}): RoutingPolicy<W> {
  const prefix = kvPrefixScorer(index);
  const policy = scoredPolicy<W>({
    name: 'precise-prefix',
    scorers: [
      { scorer: prefix, weight: options.prefixWeight ?? 2 },
      { scorer: loadScorer(), weight: 1 },
    ],
  });
  return {
    ...policy,
    cachedShare(candidates: readonly W[], input: RoutingInput): number {
      const scores = prefix.score(candidates, { inFlight: () => 0 }, input);
      return scores.length === 0 ? 0 : Math.max(...scores);
    },
  };
}
