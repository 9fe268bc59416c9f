import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { KvTreeEvent } from '../../src/simulation/kv-tree.js';
import { decodeStepMs, prefillMs, transferMs } from '../../src/simulation/profile-timing.js';
import type { EngineProfile } from '../../src/simulation/profile-types.js';
import { replay, type SimDecision, type SimRouter } from '../../src/simulation/replay.js';
import { SimEngine } from '../../src/simulation/sim-engine.js';
import type { TraceRequest } from '../../src/simulation/trace.js';
import { VirtualClock } from '../../src/simulation/virtual-clock.js';
import { ARITHMETIC_PROFILE, traceRequest } from './sim-fixtures.js';

const NO_SLO = { ttftMs: Number.POSITIVE_INFINITY, itlMs: Number.POSITIVE_INFINITY };
const lease = (worker: string) => ({ worker, release: () => {} });

/** Every request disaggregated on P then D, or served whole on D. */
function fixed(strategy: 'disaggregated' | 'aggregated'): SimRouter {
  return {
    route: (): SimDecision =>
      strategy === 'disaggregated'
        ? { strategy, prefill: lease('P'), decode: lease('D') }
        : { strategy, reason: 'test', decode: lease('D') },
  };
}

function fleet(profile: EngineProfile = ARITHMETIC_PROFILE, onEvent?: (worker: string, event: KvTreeEvent) => void) {
  const clock = new VirtualClock();
  const engines = new Map(
    ['P', 'D'].map((worker) => [
      worker,
      new SimEngine({ profile, clock, onKvEvent: onEvent === undefined ? undefined : (e) => onEvent(worker, e) }),
    ]),
  );
  return { clock, engines };
}

describe('a simulated engine keeps its profile’s time', () => {
  it('one request on an idle fleet takes the prefill, the transfer and each decode step of the profile', async () => {
    const { clock, engines } = fleet();
    const request = traceRequest(0, [1, 2, 3, 4, 5, 6, 7, 8], 10, 4000);
    const summary = await replay({ requests: [request], engines, router: fixed('disaggregated'), slo: NO_SLO, clock });
    const p = ARITHMETIC_PROFILE;
    // Chunks of the step's token budget: one, at 4,000 tokens.
    const prefill = prefillMs(p, 0, 4000);
    const transfer = transferMs(p, 4000);
    let decode = 0;
    for (let i = 0; i < 10; i++) decode += decodeStepMs(p, 1, 4000 + i);
    const firstStep = decodeStepMs(p, 1, 4000);
    expect(summary.ttft_ms.p50).toBeCloseTo(prefill + transfer + firstStep, 6);
    expect(summary.simulated_s * 1000).toBeCloseTo(prefill + transfer + decode, 6);
    expect(summary.kv_transfer_gb).toBeCloseTo((4000 * p.kvBytesPerToken) / 1e9, 9);
  });

  it('a prompt longer than the step’s token budget is computed in chunks, each after the cached tokens before it', async () => {
    const { clock, engines } = fleet();
    const blocks = Array.from({ length: 40 }, (_, i) => i + 1);
    const summary = await replay({
      requests: [traceRequest(0, blocks, 1, 20_000)],
      engines,
      router: fixed('aggregated'),
      slo: NO_SLO,
      clock,
    });
    const p = ARITHMETIC_PROFILE;
    const expected = prefillMs(p, 0, 8192) + prefillMs(p, 8192, 8192) + prefillMs(p, 16_384, 20_000 - 16_384);
    // The step that computes the last chunk samples the first token.
    expect(summary.ttft_ms.p50).toBeCloseTo(expected, 6);
    expect(engines.get('D')?.counters.steps).toBe(3);
  });

  it('saturation throughput is the profile’s: a full batch of decodes makes maxRunning tokens per step', () => {
    // A link fast enough that the batch is full from the first step.
    const p = { ...ARITHMETIC_PROFILE, maxRunning: 32, transferGBps: 1e12 };
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile: p, clock });
    for (let i = 0; i < 32; i++)
      engine.submit({ blocks: [1000 + i], inputTokens: 512, outputTokens: 200, kind: 'decode' });
    clock.run();
    // 32 sequences decode 200 tokens each at contexts 512 to 711: the profile's batch of 32 at 611.5 on average.
    const profiled = (32 * 1000) / decodeStepMs(p, 32, 611.5);
    const measured = (32 * 200 * 1000) / engine.counters.busyMs;
    expect(Math.abs(measured - profiled) / profiled).toBeLessThan(0.01);
    expect(engine.counters.decodedTokens).toBe(32 * 200);
  });
});

describe('a simulated engine’s prefix cache', () => {
  it('a repeated prefix is a cache hit, until the blocks are evicted by others', async () => {
    // A cache of 32 blocks of 512 tokens.
    const p = { ...ARITHMETIC_PROFILE, kvCacheTokens: 16_384 };
    const shared = [1, 2, 3, 4, 5, 6, 7, 8];
    const requests: TraceRequest[] = [
      traceRequest(0, [...shared, 100], 1),
      traceRequest(10_000, [...shared, 101], 1),
      // Others' prompts, 40 blocks in all: more than the cache holds once the shared ones are idle.
      ...Array.from({ length: 5 }, (_, i) =>
        traceRequest(
          20_000 + i * 1000,
          Array.from({ length: 8 }, (_, j) => 1000 + i * 8 + j),
          1,
        ),
      ),
      traceRequest(60_000, [...shared, 102], 1),
    ];
    const cached: number[] = [];
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile: p, clock });
    for (const request of requests) {
      clock.at(request.arrivalMs, () =>
        engine.submit({ ...request, kind: 'whole' }, { admitted: (_at, tokens) => cached.push(tokens) }),
      );
    }
    clock.run();
    expect(cached[0]).toBe(0);
    expect(cached[1]).toBe(8 * 512);
    expect(cached[7]).toBe(0);
  });

  it('a whole prompt found cached still computes its last token', async () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile: ARITHMETIC_PROFILE, clock });
    const cached: number[] = [];
    for (const at of [0, 10_000]) {
      clock.at(at, () =>
        engine.submit(
          { blocks: [1, 2], inputTokens: 1024, outputTokens: 1, kind: 'whole' },
          { admitted: (_at, tokens) => cached.push(tokens) },
        ),
      );
    }
    clock.run();
    expect(cached).toEqual([0, 1023]);
  });
});

/** A random workload for the invariants: prompts sharing prefixes, under memory pressure. */
const workloads = fc.array(
  fc.record({
    at: fc.integer({ min: 0, max: 5000 }),
    prefix: fc.integer({ min: 0, max: 3 }),
    shared: fc.integer({ min: 0, max: 6 }),
    own: fc.integer({ min: 1, max: 6 }),
    tail: fc.integer({ min: 1, max: 511 }),
    output: fc.integer({ min: 1, max: 40 }),
  }),
  { minLength: 1, maxLength: 40 },
);

function toRequests(drawn: readonly Record<string, number>[]): TraceRequest[] {
  let next = 10_000;
  return drawn
    .map(({ at, prefix, shared, own, tail, output }) => {
      const blocks = [
        ...Array.from({ length: shared as number }, (_, i) => (prefix as number) * 100 + i),
        ...Array.from({ length: own as number }, () => next++),
      ];
      return traceRequest(at as number, blocks, output as number, (blocks.length - 1) * 512 + (tail as number));
    })
    .sort((a, b) => a.arrivalMs - b.arrivalMs);
}

describe('a simulated engine under memory pressure', () => {
  it('preempts the newest running request (vLLM) and recomputes it later, every answer still whole and once', () => {
    const profile = { ...ARITHMETIC_PROFILE, kvCacheTokens: 8192, maxBatchTokens: 1024 };
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile, clock });
    const tokens: number[][] = [];
    for (let i = 0; i < 4; i++) {
      tokens.push([]);
      const blocks = Array.from({ length: 4 }, (_, j) => 100 * i + j);
      engine.submit(
        { blocks, inputTokens: 2048, outputTokens: 300, kind: 'whole' },
        { token: (_at, index) => tokens[i]?.push(index) },
      );
    }
    clock.run();
    expect(engine.counters.preemptions).toBeGreaterThan(0);
    for (const each of tokens) expect(each).toEqual(Array.from({ length: 300 }, (_, i) => i));
    expect(engine.kv.privateUnits).toBe(0);
  });
});

describe('a simulated engine whose callers leave', () => {
  it.each([
    ['waiting', 0],
    ['computing its prompt', 30],
    ['decoding', 400],
    ['receiving its KV', 1],
  ])('a job cancelled while %s ends at once, its blocks given back, and the others finish whole', (_phase, atMs) => {
    const profile = { ...ARITHMETIC_PROFILE, maxRunning: 1, transferGBps: 0.5 };
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile, clock });
    const kind = _phase === 'receiving its KV' ? 'decode' : 'whole';
    const tokens: number[][] = [[], [], []];
    const ended: number[] = [];
    // With one running at a time, the third waits behind the first two.
    const ids = [0, 1, 2].map((i) =>
      engine.submit(
        { blocks: [10 * i, 10 * i + 1], inputTokens: 1024, outputTokens: 50, kind },
        { token: (_at, index) => tokens[i]?.push(index), done: () => ended.push(i) },
      ),
    );
    const victim = _phase === 'waiting' ? 2 : 0;
    clock.at(atMs, () => engine.cancel(ids[victim] as number));
    clock.run();
    expect(ended.sort()).toEqual([0, 1, 2]);
    expect((tokens[victim] as number[]).length).toBeLessThan(50);
    for (const [i, each] of tokens.entries())
      if (i !== victim) expect(each).toEqual(Array.from({ length: 50 }, (_, k) => k));
    expect(engine.jobs).toBe(0);
    expect(engine.kv.privateUnits).toBe(0);
    expect([...engine.kv.nodes()].every((node) => node.refs === 0)).toBe(true);
  });

  it('cancelling a job that is done does nothing', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile: ARITHMETIC_PROFILE, clock });
    let ended = 0;
    const id = engine.submit(
      { blocks: [1], inputTokens: 100, outputTokens: 2, kind: 'whole' },
      { done: () => ended++ },
    );
    clock.run();
    engine.cancel(id);
    expect(ended).toBe(1);
  });
});

describe('a simulated engine’s state, at every step', () => {
  it('its KV events and its load metrics agree with its cache; every request ends with all its tokens; no block is stranded', async () => {
    await fc.assert(
      fc.asyncProperty(workloads, fc.boolean(), fc.constantFrom('vllm', 'sglang'), async (drawn, split, engine) => {
        // Small enough that requests preempt one another.
        const profile: EngineProfile = {
          ...ARITHMETIC_PROFILE,
          engine: engine as 'vllm' | 'sglang',
          kvCacheTokens: 8192,
          maxRunning: 8,
          maxBatchTokens: 1024,
        };
        const stored = new Map<string, Set<string>>([
          ['P', new Set()],
          ['D', new Set()],
        ]);
        const { clock, engines } = fleet(profile, (worker, event) => {
          const set = stored.get(worker) as Set<string>;
          if (event.kind === 'stored') {
            expect(set.has(event.node.handle)).toBe(false);
            set.add(event.node.handle);
          } else {
            expect(set.delete(event.node.handle)).toBe(true);
          }
        });
        const requests = toRequests(drawn);
        const tokens = new Map<number, number>();
        const router: SimRouter = {
          route: (_request, index, ending) => {
            tokens.set(index, 0);
            return fixed(split ? 'disaggregated' : 'aggregated').route(_request, index, ending);
          },
        };
        const check = () => {
          for (const [worker, sim] of engines) {
            const gpu = new Set([...sim.kv.nodes()].filter((n) => n.tier === 'gpu').map((n) => n.handle));
            expect(gpu).toEqual(stored.get(worker));
            expect(sim.kv.used).toBeLessThanOrEqual(sim.kv.capacity);
            const load = sim.load();
            expect(load.kvUsage).toBeCloseTo(sim.kv.used / sim.kv.capacity, 12);
            expect(load.running).toBeLessThanOrEqual(profile.maxRunning);
          }
        };
        // The replay's own clock, checked after every event it runs.
        const stepping = clock.step.bind(clock);
        clock.step = () => {
          const ran = stepping();
          check();
          return ran;
        };
        const summary = await replay({ requests, engines, router, slo: NO_SLO, clock });
        expect(clock.pending).toBe(0);
        expect(summary.completed).toBe(requests.length);
        expect(summary.ttft_ms.p50).toBeGreaterThan(0);
        for (const sim of engines.values()) {
          expect(sim.jobs).toBe(0);
          expect(sim.kv.privateUnits).toBe(0);
          expect([...sim.kv.nodes()].every((node) => node.refs === 0)).toBe(true);
        }
        const decoded = [...engines.values()].reduce((sum, sim) => sum + sim.counters.decodedTokens, 0);
        expect(decoded).toBe(requests.reduce((sum, r) => sum + r.outputTokens, 0));
      }),
      { numRuns: 60 },
    );
  });
});
