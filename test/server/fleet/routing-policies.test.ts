import { describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import type { EngineLoad } from '../../../src/protocol/engines/load-metrics.js';
import { decidersOf } from '../../../src/routing/decider-plugins.js';
import { POLICY_NAMES } from '../../../src/routing/registry.js';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { LatencyPredictor } from '../../../src/routing/slo/latency-predictor.js';
import type { Selection } from '../../../src/routing/worker-pool.js';
import { consumedBy, poolDecider, routingServices, selectionFor } from '../../../src/server/fleet/routing-policies.js';
import type { ResolvedProxyOptions } from '../../../src/server/options.js';

vi.mock('../../../src/routing/cache-aware.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../../src/routing/cache-aware.js')>();
  return { ...original, cacheAware: vi.fn(original.cacheAware) };
});
const { cacheAware } = await import('../../../src/routing/cache-aware.js');

type W = { url: string };
const routing: ResolvedProxyOptions['routing'] = {
  cacheThreshold: 0.3,
  balanceAbsThreshold: 7,
  prefixWeight: 2,
  speculativeTtlMs: 2000,
  scorers: [{ name: 'load', weight: 1 }],
  filters: [],
  picker: { name: 'max-score' },
  engineLoadIntervalMs: 0,
  engineLoadStaleMs: 2000,
  balanceRelThreshold: 1.5,
  maxTreeChars: 4096,
  aggregateBelowChars: 0,
  aggregateCachedRatio: 0,
  deciders: [],
  sessionHeader: 'x-session-id',
  prefixKeyHeader: 'x-prefix-key',
};

describe('selectionFor', () => {
  it('each policy name gets a policy object of its own; cache-aware with the routing settings', () => {
    const first = selectionFor<W>('cache-aware', routing);
    expect(cacheAware).toHaveBeenCalledWith({
      cacheThreshold: 0.3,
      balanceAbsThreshold: 7,
      balanceRelThreshold: 1.5,
      maxTreeChars: 4096,
    });
    expect(first).toMatchObject({ name: 'cache-aware' });
    expect(selectionFor<W>('cache-aware', routing)).not.toBe(first);
    // Every plugin of the registry, by its own name, a new object per pool.
    for (const name of POLICY_NAMES) {
      const services = { kvIndex: () => undefined };
      const policy = selectionFor<W>(name, routing, services);
      expect(policy, name).toMatchObject({ name });
      expect(selectionFor<W>(name, routing, services), name).not.toBe(policy);
    }
  });
});

describe('poolDecider: the deciders --aggregate-below-chars and --aggregate-cached-ratio turn on', () => {
  const decode = () => new WorkerPool<W>([{ url: 'http://d0' }, { url: 'http://d1' }]);
  /** The pool's decider asked of a body (the built-in ones answer at once); undefined when none is configured. */
  const deciderOf = (given: ResolvedProxyOptions['routing'], pool: WorkerPool<W>, selection: Selection<W>) => {
    const decider = poolDecider<W>(given, { prefill: undefined, decode: pool }, selection, {});
    return decider === undefined ? undefined : (body: Record<string, unknown>) => decider(new RoutingInput(body));
  };

  it('none when both settings are off and no decider is listed', () => {
    expect(deciderOf(routing, decode(), 'least-in-flight')).toBeUndefined();
    expect(deciderOf(routing, decode(), selectionFor<W>('cache-aware', routing))).toBeUndefined();
  });

  it('decode-cached never answers where the decode policy knows no caches', () => {
    const cached = { ...routing, aggregateCachedRatio: 0.5 };
    expect(deciderOf(cached, decode(), 'least-in-flight')?.({ prompt: 'abc' })).toBeUndefined();
    // A policy object that knows nothing of caches (cachedShare is optional for plugins).
    const unaware = { name: 'unaware', select: (candidates: readonly W[]) => candidates[0] as W };
    expect(deciderOf(cached, decode(), unaware)?.({ prompt: 'abc' })).toBeUndefined();
  });

  it('an empty prompt is never served on decode alone for its cache: the policy is not asked about it', () => {
    const cachedShare = vi.fn(() => 1);
    const policy = { name: 'all-cached', select: (candidates: readonly W[]) => candidates[0] as W, cachedShare };
    const decide = deciderOf({ ...routing, aggregateCachedRatio: 0.5 }, decode(), policy);
    expect(decide?.({ prompt: '' })).toBeUndefined();
    expect(cachedShare).not.toHaveBeenCalled();
    expect(decide?.({ prompt: 'a' })).toBe('decode-cached');
  });

  it('a prompt shorter than aggregateBelowChars is served on decode alone; one that long is disaggregated', () => {
    const decide = deciderOf({ ...routing, aggregateBelowChars: 5 }, decode(), 'least-in-flight');
    expect(decide?.({ prompt: 'abcd' })).toBe('short-prompt');
    expect(decide?.({ prompt: '' })).toBe('short-prompt');
    expect(decide?.({ prompt: 'abcde' })).toBeUndefined();
  });

  it('a prompt a decode worker in rotation holds more than aggregateCachedRatio of is served on decode alone', () => {
    const pool = decode();
    const selection = selectionFor<W>('cache-aware', routing);
    const tree = (selection as unknown as { tree: { insert(text: string, worker: W): void } }).tree;
    const [d0] = pool.workers as [W, W];
    tree.insert('0123456789', d0);
    const decide = deciderOf({ ...routing, aggregateCachedRatio: 0.5 }, pool, selection);
    expect(decide?.({ prompt: '012345abcd' })).toBe('decode-cached');
    expect(decide?.({ prompt: '01234abcde' })).toBeUndefined();
    expect(decide?.({ prompt: '' })).toBeUndefined();
    pool.setAvailable(d0, false);
    expect(decide?.({ prompt: '0123456789' })).toBeUndefined();
  });

  it('the listed deciders are asked first, in order; a listed one takes its params over the setting that turns it on', () => {
    expect(
      decidersOf({ deciders: [{ name: 'decode-cached' }], aggregateBelowChars: 8, aggregateCachedRatio: 0.7 }),
    ).toEqual([
      { name: 'decode-cached', params: { cachedRatio: 0.7 } },
      { name: 'short-prompt', params: { belowChars: 8 } },
    ]);
    expect(
      decidersOf({
        deciders: [{ name: 'short-prompt', params: { belowChars: 3 } }],
        aggregateBelowChars: 8,
        aggregateCachedRatio: 0,
      }),
    ).toEqual([{ name: 'short-prompt', params: { belowChars: 3 } }]);
  });
});

describe("prefill-busy: the prompt computed on decode rather than queued behind every prefill worker's (Dynamo's isl_or_load)", () => {
  const busy = { ...routing, deciders: [{ name: 'prefill-busy' }] };
  function pools() {
    const prefill = new WorkerPool<W>([{ url: 'http://p0' }, { url: 'http://p1' }]);
    const decode = new WorkerPool<W>([{ url: 'http://d0' }]);
    return { prefill, decode };
  }
  const ask = (decider: ReturnType<typeof poolDecider<W>>) => decider?.(new RoutingInput({ prompt: 'Hello' }));

  it('disaggregates while some prefill worker has fewer than inFlight (2) requests under way; serves on decode alone once each has them', () => {
    const { prefill, decode } = pools();
    const decider = poolDecider<W>(busy, { prefill, decode }, 'least-in-flight', {});
    const leases = [prefill.acquire(), prefill.acquire(), prefill.acquire()];
    // p0 2, p1 1: p1 has room.
    expect(ask(decider)).toBeUndefined();
    leases.push(prefill.acquire());
    expect(ask(decider)).toBe('prefill-busy');
    leases[0]?.release('success');
    expect(ask(decider)).toBeUndefined();
  });

  it('takes its inFlight param, and counts an engine’s own queue where it is read (another router’s requests are there too)', () => {
    const { prefill, decode } = pools();
    const one = { ...routing, deciders: [{ name: 'prefill-busy', params: { inFlight: 1 } }] };
    const loads = new Map<W, { waiting: number; running: number; kvUsage: number }>();
    const decider = poolDecider<W>(one, { prefill, decode }, 'least-in-flight', {
      engineLoad: (worker) => loads.get(worker),
    });
    prefill.acquire();
    expect(ask(decider)).toBeUndefined();
    const [, p1] = prefill.workers as [W, W];
    loads.set(p1, { waiting: 1, running: 0, kvUsage: 0.1 });
    expect(ask(decider)).toBe('prefill-busy');
  });

  it('never answers without a prefill worker in rotation: the scheduler’s no-prefill-worker says why', () => {
    const { prefill, decode } = pools();
    const decider = poolDecider<W>(busy, { prefill, decode }, 'least-in-flight', {});
    for (const worker of prefill.workers) prefill.setAvailable(worker, false);
    expect(ask(decider)).toBeUndefined();
  });
});

describe("predicted-wait: on decode when the prompt's wait on the best prefill worker exceeds what decode would take to compute it", () => {
  const waiting = { ...routing, deciders: [{ name: 'predicted-wait' }] };
  const tokensOf = (input: RoutingInput | undefined) => input?.promptTokens ?? 0;
  function pools() {
    const prefill = new WorkerPool<W>([{ url: 'http://p0' }, { url: 'http://p1' }], { promptTokens: tokensOf });
    const decode = new WorkerPool<W>([{ url: 'http://d0' }], { promptTokens: tokensOf });
    return { prefill, decode };
  }
  /** A prompt of `tokens` tokens, as the router counts a text's (4 characters a token). */
  const prompt = (tokens: number) => new RoutingInput({ prompt: 'x'.repeat(tokens * 4) });
  /**
   * A predictor that learnt prefill's TTFT as 100 ms, 50 ms per thousand uncached tokens and 40
   * per thousand prompt tokens queued ahead (and nothing yet of decode computing prompts).
   */
  function taught(worker: W): LatencyPredictor<W> {
    const predictor = new LatencyPredictor<W>();
    for (let i = 0; i < 40; i++) {
      const uncached = 1000 + ((i * 3137) % 20_000);
      const ahead = (i * 7919) % 60_000;
      const features = {
        role: 'prefill' as const,
        uncachedTokens: uncached,
        queue: i % 4,
        tokensInFlight: ahead,
        running: 0,
        kvUsage: undefined,
      };
      predictor.learnTtft(worker, features, 100 + 50 * (uncached / 1000) + 40 * (ahead / 1000));
    }
    return predictor;
  }

  it("serves on decode alone once the work ahead on every prefill worker would take longer than computing the prompt there (prefill's fit, idle, while decode has learnt none)", () => {
    const { prefill, decode } = pools();
    const [p0, p1] = prefill.workers as [W, W];
    const decider = poolDecider<W>(waiting, { prefill, decode }, 'least-in-flight', { latency: taught(p0) });
    // A 2,000-token prompt: 200 ms to compute on decode. 10,000 tokens ahead on p0 (400 ms of wait), 2,000 on p1 (80 ms).
    prefill.lease(p0, prompt(10_000));
    const short = prefill.lease(p1, prompt(2000));
    expect(decider?.(prompt(2000))).toBeUndefined();
    short.release('success');
    prefill.lease(p1, prompt(10_000));
    expect(decider?.(prompt(2000))).toBe('predicted-wait');
    // A 20,000-token prompt costs decode 1,100 ms: worth 400 ms of wait on prefill.
    expect(decider?.(prompt(20_000))).toBeUndefined();
  });

  it("disaggregates where prefill-busy's count would not: every prefill worker has two requests under way, but short ones", () => {
    const { prefill, decode } = pools();
    const [p0, p1] = prefill.workers as [W, W];
    const decider = poolDecider<W>(waiting, { prefill, decode }, 'least-in-flight', { latency: taught(p0) });
    for (const worker of [p0, p1, p0, p1]) prefill.lease(worker, prompt(200));
    expect(decider?.(prompt(2000))).toBeUndefined();
    const busy = poolDecider<W>(
      { ...routing, deciders: [{ name: 'prefill-busy' }] },
      { prefill, decode },
      'least-in-flight',
      {},
    );
    expect(busy?.(prompt(2000))).toBe('prefill-busy');
  });

  it("weighs decode's own fit once it has learnt from prompts it computed (a decode worker busy decoding computes them slower)", () => {
    const { prefill, decode } = pools();
    const [p0, p1] = prefill.workers as [W, W];
    const [d0] = decode.workers as [W];
    const predictor = taught(p0);
    for (let i = 0; i < 10; i++) {
      const features = predictor.features(d0, prompt(1000 + i * 500), 'decode', decode.load);
      predictor.learnTtft(d0, features, 1000 + i * 250);
    }
    const decider = poolDecider<W>(waiting, { prefill, decode }, 'least-in-flight', { latency: predictor });
    prefill.lease(p0, prompt(10_000));
    prefill.lease(p1, prompt(10_000));
    // 400 ms of wait on prefill; 1,500 ms to compute 2,000 tokens on decode as it has learnt.
    expect(decider?.(prompt(2000))).toBeUndefined();
  });

  it("is prefill-busy's rule until anything is predicted, and without a predictor at all", () => {
    const { prefill, decode } = pools();
    const cold = poolDecider<W>(waiting, { prefill, decode }, 'least-in-flight', {
      latency: new LatencyPredictor<W>(),
    });
    const none = poolDecider<W>(waiting, { prefill, decode }, 'least-in-flight', {});
    for (let i = 0; i < 3; i++) prefill.acquire();
    expect(cold?.(prompt(2000))).toBeUndefined();
    expect(none?.(prompt(2000))).toBeUndefined();
    prefill.acquire();
    expect(cold?.(prompt(2000))).toBe('prefill-busy');
    expect(none?.(prompt(2000))).toBe('prefill-busy');
  });
});

describe('routingServices: the predicted latency, for the plugins that declare it', () => {
  it("builds a latency predictor only where a plugin declares 'latency', reading the KV index and engine load it is given", () => {
    const loads = new Map<W, EngineLoad>([[{ url: 'http://d0' }, { waiting: 4, running: 3, kvUsage: 0.5 }]]);
    const worker = [...loads.keys()][0] as W;
    const engineLoad = { loadOf: (each: W) => loads.get(each) };
    expect(routingServices<W>({ 'engine-load': 'required' }, () => undefined, engineLoad).latency).toBeUndefined();
    const services = routingServices<W>(
      consumedBy({
        prefillPolicy: 'least-in-flight',
        decodePolicy: 'scored',
        customPolicies: { prefill: undefined, decode: undefined },
        routing: { ...routing, scorers: [{ name: 'slo-headroom' }], filters: [{ name: 'slo-feasible' }] },
      } as Parameters<typeof consumedBy>[0]),
      () => undefined,
      engineLoad,
    );
    expect(services.latency).toBeInstanceOf(LatencyPredictor);
    expect(services.latency?.features(worker, undefined, 'decode')).toMatchObject({
      queue: 7,
      running: 3,
      kvUsage: 0.5,
    });
  });
});
