import { describe, expect, it } from 'vitest';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { LatencyPredictor } from '../../../src/routing/slo/latency-predictor.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';
import type { ModelPool } from '../../../src/server/fleet/pool-set.js';
import { latencyFeed } from '../../../src/server/pipeline/latency-feed.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../../src/server/settings/worker-entries.js';
import { flowEvent } from '../../support/proxy-state.js';

type Worker = ProxyPrefillWorker | ProxyDecodeWorker;
const p0 = { url: 'http://p0' } as ProxyPrefillWorker;
const d0 = { url: 'http://d0' } as ProxyDecodeWorker;

/** A pool of one prefill and one decode worker, a predictor that predicts from one sample, and one request leased on both. */
function setup() {
  const tokens = (input: RoutingInput | undefined) => input?.promptTokens ?? 0;
  const prefill = new WorkerPool<ProxyPrefillWorker>([p0], { promptTokens: tokens });
  const decode = new WorkerPool<ProxyDecodeWorker>([d0], { promptTokens: tokens });
  const pool = { prefill, decode } as unknown as ModelPool;
  const predictor = new LatencyPredictor<Worker>({ minSamples: 1 });
  const input = new RoutingInput({ prompt: 'x'.repeat(4000) });
  prefill.acquire(undefined, input);
  decode.acquire(undefined, input);
  const feed = latencyFeed(predictor, pool, () => input);
  if (feed === undefined) throw new Error('a feed was expected');
  return { predictor, feed, input, pool };
}

describe('latencyFeed', () => {
  it("a disaggregated request teaches its prefill worker the TTFT from dispatch, read with the features at dispatch (this request's lease not counted as queue)", () => {
    const { predictor, feed, input, pool } = setup();
    feed.observe(
      flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0, elapsedMs: 5 }),
    );
    feed.observe(flowEvent({ type: 'firstToken', elapsedMs: 245 }));
    expect(predictor.samples(p0)).toEqual({ ttft: 1, itl: 0 });
    expect(predictor.samples(d0).ttft).toBe(0);
    const idle = predictor.features(p0, input, 'prefill', pool.prefill.load, { counted: true });
    expect(idle).toMatchObject({ queue: 0, tokensInFlight: 0, uncachedTokens: 1000 });
    expect(predictor.predict(p0, idle).ttftMs).toBeCloseTo(240, 0);
  });

  it('a request served on decode alone teaches its decode worker the TTFT', () => {
    const { predictor, feed } = setup();
    feed.observe(flowEvent({ type: 'routed', strategy: 'aggregated', reason: 'short-prompt', decodeWorker: d0 }));
    feed.observe(flowEvent({ type: 'firstToken', elapsedMs: 90 }));
    expect(predictor.samples(d0)).toEqual({ ttft: 1, itl: 0 });
    expect(predictor.samples(p0).ttft).toBe(0);
  });

  it('a successful stream teaches its decode worker the mean gap between chunks; a failed one, or one without gaps, nothing', () => {
    const served = setup();
    served.feed.observe(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    for (const seconds of [0.02, 0.04, 0.03]) served.feed.gap(seconds);
    served.feed.observe(flowEvent({ type: 'finished', outcome: 'success' }));
    expect(served.predictor.samples(d0)).toEqual({ ttft: 0, itl: 1 });
    const at = served.predictor.features(d0, served.input, 'decode', served.pool.decode.load, { counted: true });
    expect(served.predictor.predict(d0, at).itlMs).toBeCloseTo(30, 0);

    const failed = setup();
    failed.feed.observe(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    failed.feed.gap(0.02);
    failed.feed.observe(flowEvent({ type: 'finished', outcome: 'error' }));
    const whole = setup();
    whole.feed.observe(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    whole.feed.observe(flowEvent({ type: 'finished', outcome: 'success' }));
    expect([failed.predictor.samples(d0).itl, whole.predictor.samples(d0).itl]).toEqual([0, 0]);
  });

  it("a decode retry or a migration mixes in what is not the worker's: no sample of it", () => {
    const retried = setup();
    retried.feed.observe(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    retried.feed.observe(
      flowEvent({ type: 'decodeRetried', attempt: 1, error: new Error('down'), delayMs: 10, decodeWorker: d0 }),
    );
    retried.feed.observe(flowEvent({ type: 'firstToken', elapsedMs: 400 }));
    retried.feed.gap(0.02);
    retried.feed.observe(flowEvent({ type: 'finished', outcome: 'success' }));
    expect([retried.predictor.samples(p0), retried.predictor.samples(d0)]).toEqual([
      { ttft: 0, itl: 0 },
      { ttft: 0, itl: 0 },
    ]);
    const migrated = setup();
    migrated.feed.observe(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    migrated.feed.observe(flowEvent({ type: 'firstToken', elapsedMs: 40 }));
    migrated.feed.gap(0.02);
    migrated.feed.observe(
      flowEvent({
        type: 'migration',
        attempt: 1,
        reason: 'stream_error',
        outcome: 'migrated',
        error: new Error('reset'),
        generatedTokens: 1,
      }),
    );
    migrated.feed.gap(0.5);
    migrated.feed.observe(flowEvent({ type: 'finished', outcome: 'success' }));
    expect([migrated.predictor.samples(p0).ttft, migrated.predictor.samples(d0).itl]).toEqual([1, 0]);
  });

  it('there is no feed without a predictor (no plugin reads it) or without a pool', () => {
    const { pool, input } = setup();
    expect(latencyFeed(undefined, pool, () => input)).toBeUndefined();
    expect(latencyFeed(new LatencyPredictor<Worker>(), undefined, () => input)).toBeUndefined();
  });
});
