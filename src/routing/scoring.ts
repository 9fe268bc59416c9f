import { PrefixTree } from './prefix-tree.js';
import type { RoutingInput } from './routing-input.js';
import type { LoadView, RoutingPolicy } from './routing-policy.js';

/**
 * Narrows the candidates of one request (workers that cannot serve it, or should not): never
 * returns an empty list on purpose; when it would, the policy goes on with the list it was given.
 */
export interface Filter<W> {
  readonly name: string;
  filter(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): readonly W[];
}

/**
 * Scores each candidate from 0 (worst) to 1 (best) for one request, one score per candidate in
 * their order. A scorer only scores: what it learns, it learns in `completed` (the leg's
 * outcome) and `forget` (a worker gone), as llm-d's scorers keep state changes in request hooks.
 */
export interface Scorer<W> {
  readonly name: string;
  score(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): readonly number[];
  /** The request was routed to `worker` (see {@link RoutingPolicy.routed}). */
  routed?(worker: W, input: RoutingInput | undefined): void;
  completed?(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void;
  forget?(worker: W): void;
}

/** Chooses one candidate given their weighted scores (same order, never an empty list). */
export interface Picker<W> {
  readonly name: string;
  pick(candidates: readonly W[], scores: readonly number[], load: LoadView<W>): W;
}

/** The parts of a {@link scoredPolicy}. */
export interface ScoredPolicyParts<W> {
  /** For logs; `scored` by default. */
  name?: string | undefined;
  /** Applied in order before scoring. */
  filters?: ReadonlyArray<Filter<W>> | undefined;
  /** Each scorer's weight multiplies its scores; the sum is what the picker sees. */
  scorers: ReadonlyArray<{ scorer: Scorer<W>; weight: number }>;
  /** {@link maxScorePicker} by default. */
  picker?: Picker<W> | undefined;
}

/**
 * A routing policy made of parts, as llm-d's scheduler composes its plugins: filters narrow the
 * candidates, weighted scorers score them, a picker chooses. The choice, the leg's outcome
 * and a worker leaving reach every scorer that learns (`routed`, `completed`, `forget`).
 *
 * @example
 * // Cache affinity weighed against load, as llm-d's default profile weighs prefix and queue scorers.
 * new WorkerPool(workers, { selection: scoredPolicy({ scorers: [{ scorer: prefixScorer(), weight: 2 }, { scorer: loadScorer(), weight: 1 }] }) });
 *
 * @throws {TypeError} without a scorer, or for a weight that is not a positive finite number.
 */
export function scoredPolicy<W>(parts: ScoredPolicyParts<W>): RoutingPolicy<W> {
  if (parts.scorers.length === 0) throw new TypeError('scoredPolicy needs at least one scorer');
  for (const { scorer, weight } of parts.scorers) {
    if (!(Number.isFinite(weight) && weight > 0)) {
      throw new TypeError(
        `scoredPolicy: the weight of ${scorer.name} must be a positive number, got ${String(weight)}`,
      );
    }
  }
  const filters = parts.filters ?? [];
  const picker = parts.picker ?? maxScorePicker<W>();
  return {
    name: parts.name ?? 'scored',
    select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W {
      let left = candidates;
      for (const filter of filters) {
        const kept = filter.filter(left, load, input);
        if (kept.length > 0) left = kept;
      }
      if (left.length === 1) return left[0] as W;
      const total = new Array<number>(left.length).fill(0);
      for (const { scorer, weight } of parts.scorers) {
        const scores = scorer.score(left, load, input);
        for (let i = 0; i < left.length; i++) total[i] = (total[i] as number) + weight * clamp(scores[i]);
      }
      return picker.pick(left, total, load);
    },
    routed(worker: W, input: RoutingInput | undefined): void {
      for (const { scorer } of parts.scorers) scorer.routed?.(worker, input);
    },
    completed(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void {
      for (const { scorer } of parts.scorers) scorer.completed?.(worker, input, outcome);
    },
    forget(worker: W): void {
      for (const { scorer } of parts.scorers) scorer.forget?.(worker);
    },
  };
}

/**
 * The highest total score; ties go to the candidate with fewer requests in flight, and ties of
 * both rotate (the search starts one place further each time, as least-in-flight's does), so
 * that a run of new prompts no worker holds is spread rather than all sent to the first.
 */
export function maxScorePicker<W>(): Picker<W> {
  let turn = 0;
  return {
    name: 'max-score',
    pick(candidates: readonly W[], scores: readonly number[], load: LoadView<W>): W {
      const count = candidates.length;
      const start = turn % count;
      let best = start;
      for (let offset = 1; offset < count; offset++) {
        const i = (start + offset) % count;
        const score = scores[i] as number;
        const top = scores[best] as number;
        if (
          score > top ||
          (score === top && load.inFlight(candidates[i] as W) < load.inFlight(candidates[best] as W))
        ) {
          best = i;
        }
      }
      turn = (start + 1) % count;
      return candidates[best] as W;
    },
  };
}

/**
 * A candidate at random, each with a chance in proportion to its total score (llm-d's weighted
 * random picker): traffic leans toward the best without all of it going there, which spreads a
 * burst of similar requests that one worker would otherwise take whole. All totals 0: each
 * candidate alike. `random` is the source of numbers in [0, 1) (`Math.random` by default).
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: loadScorer(), weight: 1 }], picker: weightedRandomPicker() });
 */
export function weightedRandomPicker<W>(random: () => number = Math.random): Picker<W> {
  return {
    name: 'weighted-random',
    pick(candidates: readonly W[], scores: readonly number[]): W {
      const total = scores.reduce((sum, score) => sum + score, 0);
      if (!(total > 0)) return candidates[Math.floor(random() * candidates.length)] as W;
      let left = random() * total;
      for (let i = 0; i < candidates.length; i++) {
        left -= scores[i] as number;
        if (left < 0) return candidates[i] as W;
      }
      // Rounding left a sliver past the last: the last candidate with a score takes it.
      let last = candidates.length - 1;
      while (last > 0 && !((scores[last] as number) > 0)) last--;
      return candidates[last] as W;
    },
  };
}

/**
 * Load: 1 for the idlest candidate, falling linearly to 0 for the busiest (by requests in
 * flight from this router); all 1 when they are equally loaded.
 */
export function loadScorer<W>(): Scorer<W> {
  return {
    name: 'load',
    score(candidates: readonly W[], load: LoadView<W>): readonly number[] {
      const counts = candidates.map((worker) => load.inFlight(worker));
      const min = Math.min(...counts);
      const max = Math.max(...counts);
      return counts.map((count) => (max === min ? 1 : (max - count) / (max - min)));
    },
  };
}

/** Options of {@link prefixScorer}. */
export interface PrefixScorerOptions {
  /** Characters of prompts remembered per worker, least recently used dropped first; 8 Mi by default. */
  maxTreeChars?: number | undefined;
}

/**
 * Prefix affinity: the candidates believed to hold the longest prefix of the request's routing
 * text score the share of it they hold, the others 0; from a prefix tree of the texts of the
 * legs each served successfully (this router's view, as cache-aware keeps it). Learns in
 * `completed` on success; forgets a worker that leaves.
 */
export function prefixScorer<W>(options: PrefixScorerOptions = {}): Scorer<W> {
  const tree = new PrefixTree<W>(options.maxTreeChars ?? 8 * 1024 * 1024);
  return {
    name: 'prefix',
    score(candidates: readonly W[], _load: LoadView<W>, input: RoutingInput | undefined): readonly number[] {
      const text = input?.text ?? '';
      if (text === '') return candidates.map(() => 0);
      const { length, workers } = tree.match(text, candidates);
      const holders = new Set(workers);
      return candidates.map((worker) => (holders.has(worker) ? length / text.length : 0));
    },
    completed(worker: W, input: RoutingInput | undefined, outcome: 'success' | 'failure'): void {
      const text = input?.text ?? '';
      if (outcome === 'success' && text !== '') tree.insert(text, worker);
    },
    forget(worker: W): void {
      tree.remove(worker);
    },
  };
}

function clamp(score: number | undefined): number {
  if (score === undefined || Number.isNaN(score)) return 0;
  return score < 0 ? 0 : score > 1 ? 1 : score;
}
