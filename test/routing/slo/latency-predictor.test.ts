import { describe, expect, it } from 'vitest';
import type { EngineLoad } from '../../../src/protocol/engines/load-metrics.js';
import type { KvIndexView } from '../../../src/routing/kv-prefix.js';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { type LatencyFeatures, LatencyPredictor } from '../../../src/routing/slo/latency-predictor.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';

type W = { url: string };
const p0: W = { url: 'http://p0' };
const p1: W = { url: 'http://p1' };
const fresh: W = { url: 'http://p2' };

/** Prefill features of a prompt of `uncached` thousand tokens behind `queue` requests. */
function prefillAt(uncached: number, queue = 0): LatencyFeatures {
  return {
    role: 'prefill',
    uncachedTokens: uncached * 1000,
    queue,
    tokensInFlight: 0,
    running: queue,
    kvUsage: undefined,
  };
}

/** Teaches `worker` a TTFT of `perThousand` ms per thousand uncached tokens plus 20 ms per request queued. */
function teach(predictor: LatencyPredictor<W>, worker: W, perThousand: number, count = 30): void {
  for (let i = 0; i < count; i++) {
    const features = prefillAt(1 + (i % 4), i % 3);
    predictor.learnTtft(worker, features, 10 + perThousand * (1 + (i % 4)) + 20 * (i % 3));
  }
}

describe('LatencyPredictor', () => {
  it("predicts a worker's TTFT by its own fit once it has samples: a slow worker apart from a fast one", () => {
    const predictor = new LatencyPredictor<W>();
    teach(predictor, p0, 100);
    teach(predictor, p1, 400);
    expect(predictor.predict(p0, prefillAt(2, 1)).ttftMs).toBeCloseTo(230, 0);
    expect(predictor.predict(p1, prefillAt(2, 1)).ttftMs).toBeCloseTo(830, 0);
    expect(predictor.samples(p0)).toEqual({ ttft: 30, itl: 0 });
  });

  it("a worker without samples falls back to its pool's fit (all the role's workers' samples)", () => {
    const predictor = new LatencyPredictor<W>();
    teach(predictor, p0, 100);
    teach(predictor, p1, 100);
    expect(predictor.samples(fresh)).toEqual({ ttft: 0, itl: 0 });
    expect(predictor.predict(fresh, prefillAt(3)).ttftMs).toBeCloseTo(310, 0);
    // Decode's own pool has learned nothing: its TTFT is unknown.
    expect(predictor.predict(fresh, { ...prefillAt(3), role: 'decode' }).ttftMs).toBeUndefined();
  });

  it('predicts nothing until a fit has minSamples samples: the prediction is unknown, not 0', () => {
    const predictor = new LatencyPredictor<W>({ minSamples: 5 });
    teach(predictor, p0, 100, 4);
    expect(predictor.predict(p0, prefillAt(1))).toEqual({ ttftMs: undefined, itlMs: undefined });
    teach(predictor, p0, 100, 1);
    expect(predictor.predict(p0, prefillAt(1)).ttftMs).toBeDefined();
  });

  it('a prediction is never below 0', () => {
    const predictor = new LatencyPredictor<W>();
    for (let i = 0; i < 20; i++) predictor.learnTtft(p0, prefillAt(i % 5), 500 - 100 * (i % 5));
    expect(predictor.predict(p0, prefillAt(20)).ttftMs).toBe(0);
  });

  it("learns a decode worker's inter-token time from the requests running beside and its KV usage; prefill features predict none", () => {
    const predictor = new LatencyPredictor<W>();
    const d0: W = { url: 'http://d0' };
    for (let i = 0; i < 40; i++) {
      const running = i % 8;
      const kvUsage = (i % 5) / 5;
      predictor.learnItl(
        d0,
        { role: 'decode', uncachedTokens: 0, queue: running, tokensInFlight: 0, running, kvUsage },
        12 + 3 * running + 10 * kvUsage,
      );
    }
    const decodeAt = {
      role: 'decode' as const,
      uncachedTokens: 0,
      queue: 4,
      tokensInFlight: 0,
      running: 4,
      kvUsage: 0.5,
    };
    expect(predictor.predict(d0, decodeAt).itlMs).toBeCloseTo(29, 0);
    expect(predictor.predict(d0, prefillAt(1)).itlMs).toBeUndefined();
  });

  it('ignores a measurement that is negative or not finite', () => {
    const predictor = new LatencyPredictor<W>();
    predictor.learnTtft(p0, prefillAt(1), -3);
    predictor.learnTtft(p0, prefillAt(1), Number.NaN);
    predictor.learnItl(p0, prefillAt(1), Number.POSITIVE_INFINITY);
    expect(predictor.samples(p0)).toEqual({ ttft: 0, itl: 0 });
  });

  it("forget drops a worker's own fit; its pool's keeps what it taught", () => {
    const predictor = new LatencyPredictor<W>();
    teach(predictor, p0, 400);
    predictor.forget(p0);
    expect(predictor.samples(p0)).toEqual({ ttft: 0, itl: 0 });
    expect(predictor.predict(p0, prefillAt(1)).ttftMs).toBeCloseTo(410, 0);
  });

  it('refuses a minSamples that is not a positive whole number', () => {
    expect(() => new LatencyPredictor<W>({ minSamples: 0 })).toThrow(/minSamples/);
    expect(() => new LatencyPredictor<W>({ forgetting: 2 })).toThrow(/forgetting/);
  });
});

describe('LatencyPredictor.features', () => {
  const prompt = { prompt: Array.from({ length: 800 }, (_, i) => i) };

  it("the uncached tokens are the prompt's less what the KV index says the worker holds, or what a policy noted for it", () => {
    const index: KvIndexView<W> = {
      scopeOf: () => undefined,
      overlap: (_tokens, candidates) => new Map(candidates.map((worker) => [worker, worker === p0 ? 512 : 0])),
      expect: () => {},
    };
    const predictor = new LatencyPredictor<W>({ kvIndex: () => index });
    const input = new RoutingInput(prompt);
    expect(predictor.features(p0, input, 'prefill').uncachedTokens).toBe(288);
    expect(predictor.features(p1, input, 'prefill').uncachedTokens).toBe(800);
    // precise-prefix noted what it expected before its speculative entry makes the index say all.
    input.notePredictedCached(p1, 256);
    expect(predictor.features(p1, input, 'prefill').uncachedTokens).toBe(544);
    expect(new LatencyPredictor<W>().features(p0, new RoutingInput(prompt), 'prefill').uncachedTokens).toBe(800);
  });

  it("the queue is the work besides this request: the pool's leases and their prompt tokens, less this request's once it is counted", () => {
    const pool = new WorkerPool([p0], { promptTokens: (input) => input?.promptTokens ?? 0 });
    const predictor = new LatencyPredictor<W>();
    const other = pool.acquire(undefined, new RoutingInput({ prompt: Array.from({ length: 300 }, () => 1) }));
    const input = new RoutingInput(prompt);
    const scoring = predictor.features(p0, input, 'prefill', pool.load);
    expect(scoring).toMatchObject({ queue: 1, tokensInFlight: 300, running: 1 });
    const lease = pool.acquire(undefined, input);
    expect(predictor.features(p0, input, 'prefill', pool.load, { counted: true })).toEqual(scoring);
    lease.release();
    other.release();
    expect(pool.promptTokens(p0)).toBe(0);
  });

  it("the engine's own load counts where it says more (other routers' requests), with its KV usage", () => {
    const loads = new Map<W, EngineLoad>([[p0, { waiting: 3, running: 2, kvUsage: 0.4 }]]);
    const predictor = new LatencyPredictor<W>({ engineLoad: (worker) => loads.get(worker) });
    const pool = new WorkerPool([p0, p1]);
    pool.acquire();
    pool.acquire();
    const input = new RoutingInput(prompt);
    expect(predictor.features(p0, input, 'decode', pool.load)).toMatchObject({ queue: 5, running: 2, kvUsage: 0.4 });
    expect(predictor.features(p1, input, 'decode', pool.load)).toMatchObject({
      queue: 1,
      running: 1,
      kvUsage: undefined,
    });
  });
});
