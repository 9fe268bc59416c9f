import { describeValue } from '../util/describe-value.js';
import { PrefixTree } from './prefix-tree.js';
import type { RoutingInput } from './routing-input.js';
import { type LoadView, leastLoaded, type RoutingPolicy } from './routing-policy.js';

/** Options of {@link cacheAware}; the defaults are vllm-project/router's. */
export interface CacheAwareOptions {
  /**
   * The share of a request's routing text a worker must already hold for the request to go
   * there (the longest match wins); below it the least loaded worker gets it. 0.5 by default.
   */
  cacheThreshold?: number | undefined;
  /**
   * Load is imbalanced, and the least loaded worker gets the request whatever the caches hold,
   * when the busiest worker has more than `balanceAbsThreshold` requests in flight over the
   * idlest (32 by default) and more than `balanceRelThreshold` times its count (1.1 by default).
   */
  balanceAbsThreshold?: number | undefined;
  balanceRelThreshold?: number | undefined;
  /** Characters of routing text remembered per worker, least recently used dropped first; 8 Mi by default. */
  maxTreeChars?: number | undefined;
}

/** The defaults of {@link cacheAware}. */
export const CACHE_AWARE_DEFAULTS: Readonly<Required<CacheAwareOptions>> = Object.freeze({
  cacheThreshold: 0.5,
  balanceAbsThreshold: 32,
  balanceRelThreshold: 1.1,
  maxTreeChars: 8 * 1024 * 1024,
});

/**
 * Cache-aware routing: the router keeps an approximate prefix tree of the routing texts it
 * sent to each worker ({@link PrefixTree}), standing in for the workers' prefix caches.
 * A request goes to the candidate holding the longest prefix of its text when that prefix is
 * more than `cacheThreshold` of it (ties: the less loaded); otherwise to the least loaded
 * candidate (ties: the one remembered holding least, which has the most room). When load is
 * imbalanced (both thresholds exceeded) the least loaded wins outright. The text is recorded
 * for the worker once its leg succeeded (`completed`): a worker that failed the request (and
 * whose retry went elsewhere) is not taken for holding it. A worker that leaves the rotation is
 * forgotten.
 *
 * A request without routing text (no prompt or messages) goes to the least loaded worker.
 *
 * @example
 * new WorkerPool(workers, { selection: cacheAware({ cacheThreshold: 0.3 }) });
 *
 * @throws {TypeError} for a threshold that is not a number in its range.
 */
export function cacheAware<W>(options: CacheAwareOptions = {}): RoutingPolicy<W> & { readonly tree: PrefixTree<W> } {
  const settings = checkOptions(options);
  const tree = new PrefixTree<W>(settings.maxTreeChars);
  const roomier = (worker: W) => tree.sizeOf(worker);
  return {
    name: 'cache-aware',
    tree,
    select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W {
      const text = input?.text ?? '';
      if (text === '') return leastLoaded(candidates, load, roomier);
      let chosen: W;
      if (imbalanced(candidates, load, settings)) chosen = leastLoaded(candidates, load, roomier);
      else {
        const { length, workers } = tree.match(text, candidates);
        chosen =
          length / text.length > settings.cacheThreshold
            ? leastLoaded(workers, load)
            : leastLoaded(candidates, load, roomier);
      }
      return chosen;
    },
    completed(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void {
      const text = input?.text ?? '';
      if (outcome === 'success' && text !== '') tree.insert(text, worker);
    },
    cachedShare(candidates: readonly W[], input: RoutingInput): number {
      const text = input.text;
      return text === '' ? 0 : tree.match(text, candidates).length / text.length;
    },
    forget(worker: W): void {
      tree.remove(worker);
    },
  };
}

function imbalanced<W>(candidates: readonly W[], load: LoadView<W>, settings: Required<CacheAwareOptions>): boolean {
  let min = Number.POSITIVE_INFINITY;
  let max = 0;
  for (const worker of candidates) {
    const inFlight = load.inFlight(worker);
    if (inFlight < min) min = inFlight;
    if (inFlight > max) max = inFlight;
  }
  return max - min > settings.balanceAbsThreshold && max > min * settings.balanceRelThreshold;
}

function checkOptions(options: CacheAwareOptions): Required<CacheAwareOptions> {
  const settings = { ...CACHE_AWARE_DEFAULTS, ...stripUndefined(options) };
  const checks: Array<[keyof CacheAwareOptions, (value: number) => boolean, string]> = [
    ['cacheThreshold', (v) => v >= 0 && v <= 1, 'a number from 0 to 1'],
    ['balanceAbsThreshold', (v) => v >= 0, 'a number of requests, 0 or more'],
    ['balanceRelThreshold', (v) => v >= 1, 'a ratio of 1 or more'],
    ['maxTreeChars', (v) => Number.isInteger(v) && v > 0, 'a positive whole number of characters'],
  ];
  for (const [key, valid, expected] of checks) {
    const value = settings[key];
    if (typeof value !== 'number' || Number.isNaN(value) || !valid(value)) {
      throw new TypeError(`cacheAware: ${key} must be ${expected}, got ${describeValue(value)}`);
    }
  }
  return settings;
}

function stripUndefined(options: CacheAwareOptions): CacheAwareOptions {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options ?? {})) if (value !== undefined) out[key] = value;
  return out;
}
