// Filters on the engines' own load, as llm-d's scheduler filters candidates before scoring them
// (its low-queue and KV-cache filters): a worker past a threshold is passed over while another
// is under it. A worker whose load is not known (not scraped yet, or stale) is kept: nothing
// says it is busy, and dropping it would empty the pool whenever scraping lags.
import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import type { EngineLoadSource } from './kv-prefix.js';
import type { Filter } from './scoring.js';

/**
 * Keeps the candidates whose engine reports at most `maxWaiting` requests waiting (its queue,
 * not those running); those it knows nothing of stay. When none would stay, the policy goes on
 * with them all (a {@link Filter} never empties the list).
 *
 * @example
 * scoredPolicy({ filters: [lowQueueFilter((w) => loads.get(w), 8)], scorers: [{ scorer: loadScorer(), weight: 1 }] });
 */
export function lowQueueFilter<W>(loadOf: EngineLoadSource<W>, maxWaiting: number): Filter<W> {
  return loadFilter('low-queue', loadOf, (load) => load.waiting <= maxWaiting);
}

/**
 * Keeps the candidates whose engine reports a KV cache usage (0 to 1) of at most `maxKvUsage`,
 * so that a request does not land on a worker about to preempt; those it knows nothing of stay.
 *
 * @example
 * scoredPolicy({ filters: [lowKvUsageFilter((w) => loads.get(w), 0.8)], scorers: [{ scorer: loadScorer(), weight: 1 }] });
 */
export function lowKvUsageFilter<W>(loadOf: EngineLoadSource<W>, maxKvUsage: number): Filter<W> {
  return loadFilter('low-kv-usage', loadOf, (load) => load.kvUsage <= maxKvUsage);
}

/** A filter keeping the candidates whose reading `keeps` accepts, and those without one. */
function loadFilter<W>(name: string, loadOf: EngineLoadSource<W>, keeps: (load: EngineLoad) => boolean): Filter<W> {
  return {
    name,
    filter(candidates: readonly W[]): readonly W[] {
      return candidates.filter((worker) => {
        const load = loadOf(worker);
        return load === undefined || keeps(load);
      });
    },
  };
}
