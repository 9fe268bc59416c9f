import { describeValue } from '../util/describe-value.js';
import type { RoutingInput } from './routing-input.js';
import { type LoadView, leastLoaded, type RoutingPolicy } from './routing-policy.js';

/** Options of {@link sessionAffinity}. */
export interface SessionAffinityOptions<W> {
  /** For requests without a session key; least in flight by default. */
  fallback?: RoutingPolicy<W>;
  /** A worker's stable name: its `url` by default (or the worker itself, for a string). */
  idOf?: (worker: W) => string;
}

/**
 * Session affinity by rendezvous hashing: each request with a session key (see
 * {@link RoutingInput.sessionKey}) goes to the candidate whose name hashes highest with the
 * key, so a session stays on its worker, and when a worker joins or leaves only the sessions
 * it wins or held move. Requests without a key go to `fallback`.
 *
 * @example
 * new WorkerPool(prefillUrls, { selection: sessionAffinity({ fallback: cacheAware() }) });
 */
export function sessionAffinity<W>(options: SessionAffinityOptions<W> = {}): RoutingPolicy<W> {
  const fallback = options.fallback;
  const idOf = options.idOf ?? defaultId;
  const seeds = new Map<W, number>();
  return {
    name: 'session',
    select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W {
      const key = input?.sessionKey;
      if (key === undefined) {
        return fallback === undefined ? leastLoaded(candidates, load) : fallback.select(candidates, load, input);
      }
      let best = candidates[0] as W;
      let bestScore = -1;
      for (const worker of candidates) {
        let seed = seeds.get(worker);
        if (seed === undefined) {
          seed = hash(idOf(worker), 0x811c9dc5);
          seeds.set(worker, seed);
        }
        const score = hash(key, seed);
        if (score > bestScore) {
          best = worker;
          bestScore = score;
        }
      }
      return best;
    },
    forget(worker: W): void {
      fallback?.forget?.(worker);
    },
  };
}

function defaultId(worker: unknown): string {
  if (typeof worker === 'string') return worker;
  const url = (worker as { url?: unknown } | null)?.url;
  if (typeof url === 'string') return url;
  throw new TypeError(
    `sessionAffinity needs a stable name for each worker: give workers a url, or pass idOf; got ${describeValue(worker)}`,
  );
}

/** FNV-1a over `text` from `seed`, then murmur3's finaliser for an even spread; unsigned 32 bits. */
function hash(text: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
