import { describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import {
  type Filter,
  loadScorer,
  maxScorePicker,
  prefixScorer,
  type Scorer,
  scoredPolicy,
} from '../../src/routing/scoring.js';

const loadOf = (counts: Record<string, number>) => ({ inFlight: (worker: string) => counts[worker] ?? 0 });
const fixed = (name: string, scores: Record<string, number>): Scorer<string> => ({
  name,
  score: (candidates) => candidates.map((worker) => scores[worker] ?? 0),
});

describe('scoredPolicy: filters, weighted scorers, a picker', () => {
  it('the weighted sum decides: a strong scorer with a small weight loses to a weaker one weighed more', () => {
    const policy = scoredPolicy({
      scorers: [
        { scorer: fixed('a', { w0: 1, w1: 0 }), weight: 1 },
        { scorer: fixed('b', { w0: 0, w1: 0.6 }), weight: 2 },
      ],
    });
    expect(policy.select(['w0', 'w1'], loadOf({}), undefined)).toBe('w1');
  });

  it('filters narrow the candidates in order; one that would leave none is skipped', () => {
    const only = (keep: string[]): Filter<string> => ({
      name: 'only',
      filter: (c) => c.filter((w) => keep.includes(w)),
    });
    const policy = scoredPolicy({
      filters: [only(['w1', 'w2']), only(['w9'])],
      scorers: [{ scorer: fixed('a', { w0: 1, w1: 0.2, w2: 0.5 }), weight: 1 }],
    });
    expect(policy.select(['w0', 'w1', 'w2'], loadOf({}), undefined)).toBe('w2');
  });

  it('max-score ties go to the less loaded, then in turn: a run of prompts nobody holds is spread', () => {
    const picker = maxScorePicker<string>();
    expect(picker.pick(['w0', 'w1', 'w2'], [1, 1, 0.5], loadOf({ w0: 3, w1: 1 }))).toBe('w1');
    const fresh = maxScorePicker<string>();
    const picks = [0, 1, 2, 3].map(() => fresh.pick(['w0', 'w1', 'w2'], [1, 1, 1], loadOf({})));
    expect(picks).toEqual(['w0', 'w1', 'w2', 'w0']);
    // The higher score wins wherever the turn starts.
    expect([0, 1, 2].map(() => fresh.pick(['w0', 'w1', 'w2'], [0, 1, 0], loadOf({})))).toEqual(['w1', 'w1', 'w1']);
  });

  it('scores outside 0..1 are clamped, and weights must be positive', () => {
    const policy = scoredPolicy({
      scorers: [
        { scorer: fixed('wild', { w0: 50, w1: 0.9 }), weight: 1 },
        { scorer: fixed('b', { w1: 0.2 }), weight: 1 },
      ],
    });
    expect(policy.select(['w0', 'w1'], loadOf({}), undefined)).toBe('w1');
    expect(() => scoredPolicy({ scorers: [] })).toThrow('scoredPolicy needs at least one scorer');
    expect(() => scoredPolicy({ scorers: [{ scorer: loadScorer(), weight: 0 }] })).toThrow(
      'scoredPolicy: the weight of load must be a positive number, got 0',
    );
  });
});

describe('scoredPolicy: names, hooks and the single candidate', () => {
  it("is named as its parts say, 'scored' by default; the picker is 'max-score'", () => {
    const scorers = [{ scorer: loadScorer<string>(), weight: 1 }];
    expect(scoredPolicy({ scorers }).name).toBe('scored');
    expect(scoredPolicy({ name: 'mine', scorers }).name).toBe('mine');
    expect(maxScorePicker().name).toBe('max-score');
    expect(prefixScorer().name).toBe('prefix');
  });

  it('one candidate left after the filters is the answer, without asking the scorers', () => {
    const never: Scorer<string> = {
      name: 'never',
      score: () => {
        throw new Error('no score expected');
      },
    };
    const policy = scoredPolicy({
      filters: [{ name: 'w1 only', filter: (c) => c.filter((w) => w === 'w1') }],
      scorers: [{ scorer: never, weight: 1 }],
    });
    expect(policy.select(['w0', 'w1', 'w2'], loadOf({}), undefined)).toBe('w1');
  });

  it('the choice, the outcome and a worker leaving reach every scorer that listens; one that does not is passed over', () => {
    const heard: string[] = [];
    const listening: Scorer<string> = {
      name: 'listening',
      score: (c) => c.map(() => 0),
      routed: (worker) => heard.push(`routed ${worker}`),
      completed: (worker, _input, outcome) => heard.push(`${outcome} ${worker}`),
      forget: (worker) => heard.push(`forget ${worker}`),
    };
    const policy = scoredPolicy({
      scorers: [
        { scorer: loadScorer<string>(), weight: 1 },
        { scorer: listening, weight: 1 },
      ],
    });
    policy.routed?.('w1', undefined);
    policy.completed?.('w1', undefined, 'failure');
    policy.forget?.('w1');
    expect(heard).toEqual(['routed w1', 'failure w1', 'forget w1']);
  });

  it('a prefix scorer in a policy learns from completed legs and forgets a worker that left', () => {
    const policy = scoredPolicy({ scorers: [{ scorer: prefixScorer<string>(), weight: 1 }] });
    const input = new RoutingInput({ prompt: 'Plan a trip to Lisbon for three days' });
    expect(policy.select(['w0', 'w1'], loadOf({}), input)).toBe('w0');
    policy.completed?.('w1', input, 'success');
    expect(policy.select(['w0', 'w1'], loadOf({}), input)).toBe('w1');
    policy.forget?.('w1');
    expect(policy.select(['w0', 'w1'], loadOf({}), input)).toBe('w0');
  });
});

describe('scoredPolicy: scores out of range', () => {
  it('a negative score counts as 0', () => {
    const policy = scoredPolicy({
      scorers: [
        { scorer: fixed('a', { w0: -5, w1: 0 }), weight: 1 },
        { scorer: fixed('b', { w0: 1, w1: 0.6 }), weight: 1 },
      ],
    });
    expect(policy.select(['w0', 'w1'], loadOf({}), undefined)).toBe('w0');
  });

  it('a score that is not a number (NaN), or missing, counts as 0', () => {
    const nan: Scorer<string> = { name: 'nan', score: (c) => c.map((w) => (w === 'w0' ? Number.NaN : 0.5)) };
    expect(scoredPolicy({ scorers: [{ scorer: nan, weight: 1 }] }).select(['w0', 'w1'], loadOf({}), undefined)).toBe(
      'w1',
    );
    const short: Scorer<string> = { name: 'short', score: () => [] };
    const policy = scoredPolicy({
      scorers: [
        { scorer: short, weight: 1 },
        { scorer: fixed('b', { w1: 0.5 }), weight: 1 },
      ],
    });
    expect(policy.select(['w0', 'w1'], loadOf({}), undefined)).toBe('w1');
  });
});

describe('built-in scorers', () => {
  it('load: 1 for the idlest, 0 for the busiest, all 1 when even', () => {
    expect(loadScorer<string>().score(['a', 'b', 'c'], loadOf({ a: 0, b: 2, c: 4 }), undefined)).toEqual([1, 0.5, 0]);
    expect(loadScorer<string>().score(['a', 'b'], loadOf({}), undefined)).toEqual([1, 1]);
    expect(loadScorer<string>().score(['a', 'b', 'c'], loadOf({ a: 1, b: 2, c: 3 }), undefined)).toEqual([1, 0.5, 0]);
  });

  it('prefix: learns only from legs that succeeded, scores the share held, forgets a worker that left', () => {
    const scorer = prefixScorer<string>();
    const first = new RoutingInput({ prompt: 'You are a helpful assistant. Question one' });
    const next = new RoutingInput({ prompt: 'You are a helpful assistant. Question two' });
    scorer.completed?.('w1', first, 'failure');
    expect(scorer.score(['w0', 'w1'], loadOf({}), next)).toEqual([0, 0]);
    scorer.completed?.('w1', first, 'success');
    const [w0, w1] = scorer.score(['w0', 'w1'], loadOf({}), next);
    expect(w0).toBe(0);
    expect(w1).toBeGreaterThan(0.8);
    scorer.forget?.('w1');
    expect(scorer.score(['w0', 'w1'], loadOf({}), next)).toEqual([0, 0]);
  });

  it('prefix: a request without text, or without an input, scores 0 everywhere; a leg without an input teaches nothing', () => {
    const scorer = prefixScorer<string>();
    scorer.completed?.('w0', undefined, 'success');
    scorer.completed?.('w0', new RoutingInput({ model: 'm' }), 'success');
    expect(scorer.score(['w0', 'w1'], loadOf({}), undefined)).toEqual([0, 0]);
    expect(scorer.score(['w0', 'w1'], loadOf({}), new RoutingInput({ model: 'm' }))).toEqual([0, 0]);
  });

  it('prefix: remembers at most maxTreeChars per worker, the least recently used dropped first', () => {
    const scorer = prefixScorer<string>({ maxTreeChars: 10 });
    const [a, b] = [new RoutingInput({ prompt: 'AAAAAAAA' }), new RoutingInput({ prompt: 'BBBBBBBB' })];
    scorer.completed?.('w0', a, 'success');
    scorer.completed?.('w0', b, 'success'); // 16 > 10: A goes
    expect(scorer.score(['w0'], loadOf({}), a)).toEqual([0]);
    expect(scorer.score(['w0'], loadOf({}), b)).toEqual([1]);
  });

  it('in a pool, prefix against load: a conversation returns to the worker holding its start; an unrelated prompt goes to the idler worker', async () => {
    const pool = new WorkerPool(['w0', 'w1'], {
      selection: scoredPolicy({
        scorers: [
          { scorer: prefixScorer(), weight: 2 },
          { scorer: loadScorer(), weight: 1 },
        ],
      }),
    });
    const turn = (text: string) => new RoutingInput({ messages: [{ role: 'user', content: text }] });
    const first = pool.acquire(undefined, turn('Plan a trip to Lisbon for three days'));
    first.release('success');
    const again = pool.acquire(undefined, turn('Plan a trip to Lisbon for three days, and add a day in Porto'));
    expect(again.worker).toBe(first.worker);
    // While that worker is busy, a prompt nobody holds goes by load alone.
    const other = pool.acquire(undefined, turn('Translate this sentence into French'));
    expect(other.worker).not.toBe(first.worker);
    other.release('success');
    again.release('success');
  });
});
