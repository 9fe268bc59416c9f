import { describe, expect, it } from 'vitest';
import { FILTER_NAMES, filterPlugin } from '../../../src/routing/filter-plugins.js';
import { SCORER_NAMES, scoredFrom, scorerPlugin } from '../../../src/routing/plugins.js';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import {
  type LatencyFeatures,
  type LatencyPrediction,
  LatencyPredictor,
  type LatencyRole,
} from '../../../src/routing/slo/latency-predictor.js';
import { sloFeasibleFilter, sloHeadroomScorer } from '../../../src/routing/slo/slo-plugins.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';

type W = { url: string };
const fast: W = { url: 'http://fast' };
const slow: W = { url: 'http://slow' };
const middling: W = { url: 'http://middling' };
const unknown: W = { url: 'http://unknown' };
const idle = { inFlight: () => 0 };

/** A request with a 400-character prompt and, when given, service levels. */
function request(levels?: { ttftMs?: number; itlMs?: number }): RoutingInput {
  const input = new RoutingInput({ prompt: 'x'.repeat(400) });
  if (levels !== undefined) input.serviceLevels = levels;
  return input;
}

/** A predictor taught, for the request's features, each worker's TTFT (and inter-token time) in ms. */
function taught(
  role: LatencyRole,
  latencies: ReadonlyArray<[W, { ttft?: number; itl?: number }]>,
  minSamples = 5,
): LatencyPredictor<W> {
  const predictor = new LatencyPredictor<W>({ minSamples });
  for (const [worker, { ttft, itl }] of latencies) {
    const features = predictor.features(worker, request(), role, idle);
    for (let i = 0; i < 10; i++) {
      if (ttft !== undefined) predictor.learnTtft(worker, features, ttft);
      if (itl !== undefined) predictor.learnItl(worker, features, itl);
    }
  }
  return predictor;
}

describe('slo-headroom', () => {
  it('ranks the workers by their headroom under the TTFT target on a prefill pool', () => {
    const predictor = taught('prefill', [
      [fast, { ttft: 100 }],
      [middling, { ttft: 400 }],
      [slow, { ttft: 900 }],
    ]);
    const [f, m, s] = sloHeadroomScorer(predictor, 'prefill').score(
      [fast, middling, slow],
      idle,
      request({ ttftMs: 500 }),
    ) as number[];
    // Headroom 0.8, 0.2 and -0.8 of the target: 0.9, 0.6 and 0.1.
    expect(f).toBeCloseTo(0.9, 3);
    expect(m).toBeCloseTo(0.6, 3);
    expect(s).toBeCloseTo(0.1, 3);
  });

  it('when every worker is predicted to miss the target, the least late scores 1 and the latest 0, rather than all 0 and the choice left to load', () => {
    // A long prompt on a loaded pool: 2.5, 4 and 8 times its 500 ms target.
    const predictor = taught('prefill', [
      [fast, { ttft: 1250 }],
      [middling, { ttft: 2000 }],
      [slow, { ttft: 4000 }],
    ]);
    const [f, m, s] = sloHeadroomScorer(predictor, 'prefill').score(
      [fast, middling, slow],
      idle,
      request({ ttftMs: 500 }),
    ) as number[];
    expect(f).toBeCloseTo(1, 3);
    expect(m).toBeCloseTo(2000 / 2750, 3);
    expect(s).toBeCloseTo(0, 3);
  });

  it('without service levels, prefers the lowest predicted latency', () => {
    const predictor = taught('prefill', [
      [fast, { ttft: 99 }],
      [slow, { ttft: 399 }],
    ]);
    const scores = sloHeadroomScorer(predictor, 'prefill').score([slow, fast], idle, request());
    expect(scores[1]).toBeCloseTo(1, 3);
    expect(scores[0]).toBeCloseTo(0.25, 3);
  });

  it('a worker with no prediction yet scores between the predicted ones (neither best nor worst), and 0.5 when none is predicted', () => {
    // Ten samples a worker, twenty in the pool: too few for any fit at 25.
    const early = taught(
      'prefill',
      [
        [fast, { ttft: 100 }],
        [slow, { ttft: 900 }],
      ],
      25,
    );
    expect(sloHeadroomScorer(early, 'prefill').score([fast, slow], idle, request({ ttftMs: 500 }))).toEqual([0.5, 0.5]);
    // A predictor that knows two workers and not a third (the built-in one falls back to the pool's fit).
    class PartlyKnown extends LatencyPredictor<W> {
      override predict(worker: W, features: LatencyFeatures): LatencyPrediction {
        return worker === unknown ? { ttftMs: undefined, itlMs: undefined } : super.predict(worker, features);
      }
    }
    const partly = new PartlyKnown();
    for (const [worker, ms] of [
      [fast, 100],
      [slow, 900],
    ] as const) {
      const features = partly.features(worker, request(), 'prefill', idle);
      for (let i = 0; i < 10; i++) partly.learnTtft(worker, features, ms);
    }
    const scores = sloHeadroomScorer(partly, 'prefill').score([fast, unknown, slow], idle, request({ ttftMs: 500 }));
    expect(scores[1]).toBeCloseTo(((scores[0] as number) + (scores[2] as number)) / 2, 5);
    expect(scores[0]).toBeGreaterThan(scores[1] as number);
    expect(scores[2]).toBeLessThan(scores[1] as number);
  });

  it('on a decode pool judges the inter-token time once a prefill leg was picked, and the TTFT too for a request served on decode alone', () => {
    // fast decodes quickly but computes prompts slowly; slow the other way round.
    const predictor = taught('decode', [
      [fast, { ttft: 900, itl: 20 }],
      [slow, { ttft: 100, itl: 60 }],
    ]);
    const scorer = sloHeadroomScorer(predictor, 'decode');
    const disaggregated = request({ ttftMs: 500, itlMs: 100 });
    disaggregated.notePicked('prefill', { url: 'http://prefill' });
    const [afterPrefill, slowAfterPrefill] = scorer.score([fast, slow], idle, disaggregated) as number[];
    expect(afterPrefill).toBeGreaterThan(slowAfterPrefill as number);
    const [alone, slowAlone] = scorer.score([fast, slow], idle, request({ ttftMs: 500, itlMs: 100 })) as number[];
    expect(alone).toBeLessThan(slowAlone as number);
  });
});

describe('slo-feasible', () => {
  const predictor = taught('prefill', [
    [fast, { ttft: 100 }],
    [middling, { ttft: 450 }],
    [slow, { ttft: 900 }],
  ]);
  const filter = sloFeasibleFilter(predictor, 'prefill');

  it('drops a worker predicted to miss the TTFT target', () => {
    const input = request({ ttftMs: 500 });
    expect(filter.filter([fast, middling, slow], idle, input)).toEqual([fast, middling]);
    expect(input.unmeetable).toEqual([]);
  });

  it('keeps them all and notes the leg unmeetable when every worker is predicted to miss', () => {
    const input = request({ ttftMs: 50 });
    expect(filter.filter([fast, middling, slow], idle, input)).toEqual([fast, middling, slow]);
    expect(input.unmeetable).toEqual(['prefill']);
    const decode = taught('decode', [[fast, { itl: 80 }]]);
    const decodeInput = request({ itlMs: 50 });
    decodeInput.notePicked('prefill', slow);
    expect(sloFeasibleFilter(decode, 'decode').filter([fast], idle, decodeInput)).toEqual([fast]);
    expect(decodeInput.unmeetable).toEqual(['decode']);
  });

  it('drops nothing without service levels, without a target for its latency, or for a worker not yet predicted', () => {
    expect(filter.filter([fast, slow], idle, request())).toEqual([fast, slow]);
    expect(filter.filter([fast, slow], idle, undefined)).toEqual([fast, slow]);
    // An inter-token target says nothing of prefill.
    const itlOnly = request({ itlMs: 1 });
    expect(filter.filter([fast, slow], idle, itlOnly)).toEqual([fast, slow]);
    expect(itlOnly.unmeetable).toEqual([]);
    const empty = new LatencyPredictor<W>();
    expect(sloFeasibleFilter(empty, 'prefill').filter([fast, slow], idle, request({ ttftMs: 1 }))).toEqual([
      fast,
      slow,
    ]);
  });
});

describe('the SLO plugins in the registries', () => {
  it('slo-headroom is a scorer and slo-feasible a filter, each reading the predicted latency (and the KV index and engine load where there)', () => {
    expect(SCORER_NAMES).toContain('slo-headroom');
    expect(FILTER_NAMES).toContain('slo-feasible');
    const consumes = { latency: 'required', 'kv-index': 'optional', 'engine-load': 'optional' };
    expect(scorerPlugin('slo-headroom').consumes).toEqual(consumes);
    expect(filterPlugin('slo-feasible').consumes).toEqual(consumes);
  });

  it('a scored policy with them routes away from the worker predicted to miss, by the pool role its services name', () => {
    const policy = scoredFrom<W>(
      [{ name: 'slo-headroom' }, { name: 'load' }],
      { latency: predictor(), role: 'prefill' },
      { filters: [{ name: 'slo-feasible' }] },
    );
    const pool = new WorkerPool([slow, fast], { selection: policy });
    for (let i = 0; i < 4; i++) expect(pool.acquire(undefined, request({ ttftMs: 500 })).worker).toBe(fast);
  });

  it('refuses to be made without a latency predictor, saying what it reads', () => {
    expect(() => scoredFrom<W>([{ name: 'slo-headroom' }], {})).toThrow(
      /slo-headroom plugin reads the workers' predicted latency/,
    );
    expect(() => scoredFrom<W>([{ name: 'load' }], {}, { filters: [{ name: 'slo-feasible' }] })).toThrow(
      /slo-feasible plugin reads/,
    );
  });
});

function predictor(): LatencyPredictor<W> {
  return taught('prefill', [
    [fast, { ttft: 100 }],
    [slow, { ttft: 900 }],
  ]);
}
