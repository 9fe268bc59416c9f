import { hash32, workerId } from './hash.js';
import type { RoutingInput } from './routing-input.js';
import { type LoadView, leastLoaded, type RoutingPolicy } from './routing-policy.js';
import type { SessionBindingView } from './session-bindings.js';

/** The request header a proxy reads a session key from unless told another (`--session-header`). */
export const DEFAULT_SESSION_HEADER = 'x-session-id';

/** Options of {@link sessionAffinity}. */
export interface SessionAffinityOptions<W> {
  /** For requests without a session key; least in flight by default. */
  fallback?: RoutingPolicy<W> | undefined;
  /** A worker's stable name: its `url` by default (or the worker itself, for a string). */
  idOf?: ((worker: W) => string) | undefined;
  /**
   * Bindings every replica shares: a session goes to the worker it is bound to while that
   * worker is a candidate (the request's `sessionBindings`, looked up before routing), and a
   * session without one (or bound to a worker gone) is bound to the worker hashing chose.
   */
  bindings?: SessionBindingView<W> | undefined;
}

/**
 * Session affinity by rendezvous hashing: each request with a session key (see
 * {@link RoutingInput.sessionKey}) goes to the candidate whose name hashes highest with the
 * key, so a session stays on its worker, and when a worker joins or leaves only the sessions
 * it wins or held move. Requests without a key go to `fallback`, which hears of every leg
 * (`routed`, `completed`) and of a worker leaving, so that it learns what each worker holds.
 *
 * @example
 * new WorkerPool(workers, { selection: sessionAffinity({ fallback: cacheAware() }) });
 */
export function sessionAffinity<W>(options: SessionAffinityOptions<W> = {}): RoutingPolicy<W> {
  const fallback = options.fallback;
  const idOf = options.idOf ?? ((worker: W) => workerId(worker, 'sessionAffinity'));
  const seeds = new Map<W, number>();
  const bindings = options.bindings;
  return {
    name: 'session',
    select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W {
      const key = input?.sessionKey;
      if (key === undefined) {
        return fallback === undefined ? leastLoaded(candidates, load) : fallback.select(candidates, load, input);
      }
      const bound = bindings === undefined ? undefined : input?.sessionBindings?.[bindings.role];
      if (bound !== undefined) {
        const held = candidates.find((worker) => (bindings as SessionBindingView<W>).keyOf(worker) === bound);
        if (held !== undefined) return held;
      }
      let best = candidates[0] as W;
      let bestScore = -1;
      for (const worker of candidates) {
        let seed = seeds.get(worker);
        if (seed === undefined) {
          seed = hash32(idOf(worker));
          seeds.set(worker, seed);
        }
        const score = hash32(key, seed);
        if (score > bestScore) {
          best = worker;
          bestScore = score;
        }
      }
      return best;
    },
    // The fallback learns from every leg, whoever chose its worker: the worker holds the
    // prompt either way (a cache-aware fallback records it once the leg succeeded).
    routed(worker: W, input: RoutingInput | undefined): void {
      fallback?.routed?.(worker, input);
      const key = input?.sessionKey;
      if (bindings === undefined || key === undefined) return;
      // Looked up and not bound here (none yet, or a worker gone): bound now, first binding wins.
      const bound = input?.sessionBindings?.[bindings.role];
      const chosen = bindings.keyOf(worker);
      if (input?.sessionBindings !== undefined && bound !== chosen)
        bindings.store.bind(key, bindings.role, chosen, bound);
    },
    completed(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void {
      fallback?.completed?.(worker, input, outcome);
    },
    forget(worker: W): void {
      fallback?.forget?.(worker);
    },
  };
}
