import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import type { RoutingInput } from './routing-input.js';
import type { LoadView, RoutingPolicy } from './routing-policy.js';
import { loadScorer, type Scorer, scoredPolicy } from './scoring.js';

/**
 * What a KV-aware scorer asks of the engines' block index ({@link KvBlockIndex} answers it):
 * workers only go in, so that an index of any workers (a `KvFollower`'s) serves a pool of
 * workers with more fields.
 */
export interface KvIndexView<W> {
  scopeOf(body: Readonly<Record<string, unknown>>): string | undefined;
  overlap(tokens: readonly number[], candidates: readonly W[], scope?: string): { get(worker: W): number | undefined };
  expect(worker: W, tokens: readonly number[], ttlMs: number, scope?: string): void;
}

/**
 * Where a KV-aware scorer finds the engines' blocks: a function answering the index the proxy
 * (or your router) feeds from their KV events, or something holding it as `index` (a
 * `KvFollower` from `disagg/server`); undefined while there is none yet (every score is then 0).
 */
export type KvIndexSource<W> = (() => KvIndexView<W> | undefined) | { readonly index: KvIndexView<W> | undefined };

/** The index of `source` now, read on each use (a follower's index comes once it started). */
function reader<W>(source: KvIndexSource<W>): () => KvIndexView<W> | undefined {
  return typeof source === 'function' ? source : () => source.index;
}

/**
 * Prefix overlap as the engines report it: each candidate scores the share of the request's
 * prompt tokens it holds in whole KV blocks from the start, read from the block index (the
 * engines' own events, so every router replica scores alike). 0 for a request without token ids.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: kvPrefixScorer(() => index), weight: 2 }, { scorer: loadScorer(), weight: 1 }] });
 */
export function kvPrefixScorer<W>(
  source: KvIndexSource<NoInfer<W>>,
  options: { speculativeTtlMs?: number | undefined } = {},
): Scorer<W> {
  const ttl = options.speculativeTtlMs ?? 2000;
  const index = reader(source);
  return {
    name: 'kv-prefix',
    // The worker will hold the prompt's blocks once it computes them: expected until its
    // event says so, so that the next request sharing the prefix follows this one.
    routed(worker: W, input: RoutingInput | undefined): void {
      const tokens = input?.tokenIds;
      const known = index();
      if (input === undefined || tokens === undefined || tokens.length === 0 || known === undefined) return;
      const scope = known.scopeOf(input.body);
      // What it expects the worker to reuse, before the entry below counts the rest as held.
      input.notePredictedCached(worker, known.overlap(tokens, [worker], scope).get(worker) ?? 0);
      if (ttl > 0) known.expect(worker, tokens, ttl, scope);
    },
    score(candidates: readonly W[], _load: LoadView<W>, input: RoutingInput | undefined): readonly number[] {
      const tokens = input?.tokenIds;
      const known = index();
      if (tokens === undefined || tokens.length === 0 || known === undefined) return candidates.map(() => 0);
      // A LoRA adapter's or a salted request's blocks are its own.
      const overlap = known.overlap(tokens, candidates, input === undefined ? undefined : known.scopeOf(input.body));
      return candidates.map((worker) => (overlap.get(worker) ?? 0) / tokens.length);
    },
  };
}

/** A worker's own load as its engine last reported it, or undefined when not known (recently). */
export type EngineLoadSource<W> = (worker: W) => EngineLoad | undefined;

/**
 * The engine's queue: 1 for the candidate with the fewest requests waiting and running as its
 * engine reports them, falling to 0 for the most; 0.5 for one whose load is not known.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: engineQueueScorer((w) => loads.get(w)), weight: 1 }] });
 */
export function engineQueueScorer<W>(loadOf: EngineLoadSource<W>): Scorer<W> {
  return {
    name: 'engine-queue',
    score(candidates: readonly W[]): readonly number[] {
      const queues = candidates.map((worker) => {
        const load = loadOf(worker);
        return load === undefined ? undefined : load.waiting + load.running;
      });
      const known = queues.filter((queue): queue is number => queue !== undefined);
      const min = Math.min(...known);
      const max = Math.max(...known);
      return queues.map((queue) => (queue === undefined ? 0.5 : max === min ? 1 : (max - queue) / (max - min)));
    },
  };
}

/**
 * KV cache room: 1 minus the share of its KV cache the engine reports in use; 0.5 when not known.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: kvUsageScorer((w) => loads.get(w)), weight: 1 }] });
 */
export function kvUsageScorer<W>(loadOf: EngineLoadSource<W>): Scorer<W> {
  return {
    name: 'kv-usage',
    score(candidates: readonly W[]): readonly number[] {
      return candidates.map((worker) => {
        const load = loadOf(worker);
        return load === undefined ? 0.5 : 1 - Math.min(1, Math.max(0, load.kvUsage));
      });
    },
  };
}

/** Options of {@link precisePrefix}. */
export interface PrecisePrefixOptions<W = unknown> {
  /** The weight of prefix overlap against load (1). Default 2, as llm-d weighs its prefix scorer. */
  prefixWeight?: number | undefined;
  /**
   * How long a prompt just routed counts as held by its worker before the engine's store event
   * confirms it (a speculative entry); 0 for none. Default 2,000 ms.
   */
  speculativeTtlMs?: number | undefined;
  /**
   * The engines' own load (their `/metrics`): when given, their queue and KV usage are scored
   * too, each at weight 1, beside this router's requests in flight.
   */
  engineLoad?: EngineLoadSource<W> | undefined;
}

/**
 * Routing on what the engines hold: KV prefix overlap from their events ({@link kvPrefixScorer})
 * weighed against load (requests in flight from this router, and the engines' own queue and KV
 * usage when `engineLoad` reads them), the highest total wins, ties to the less loaded. Its
 * `cachedShare` is the best overlap, for conditional disaggregation.
 *
 * @example
 * const kv = new KvFollower({ port: 5557, replayPort: 5558 }); // from disagg/server
 * const pool = new WorkerPool(workers, { selection: precisePrefix(kv) });
 * await kv.start([pool]);
 * pool.acquire(undefined, new RoutingInput({ prompt: tokenIds }));
 */
export function precisePrefix<W>(
  source: KvIndexSource<NoInfer<W>>,
  options: PrecisePrefixOptions<W> = {},
): RoutingPolicy<W> {
  const prefix = kvPrefixScorer(source, {
    ...(options.speculativeTtlMs === undefined ? {} : { speculativeTtlMs: options.speculativeTtlMs }),
  });
  const policy = scoredPolicy<W>({
    name: 'precise-prefix',
    scorers: [
      { scorer: prefix, weight: options.prefixWeight ?? 2 },
      { scorer: loadScorer(), weight: 1 },
      ...(options.engineLoad === undefined
        ? []
        : [
            { scorer: engineQueueScorer(options.engineLoad), weight: 1 },
            { scorer: kvUsageScorer(options.engineLoad), weight: 1 },
          ]),
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
