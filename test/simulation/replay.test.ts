import { describe, expect, it } from 'vitest';
import { replay, type SimRouter } from '../../src/simulation/replay.js';
import { SimEngine } from '../../src/simulation/sim-engine.js';
import { VirtualClock } from '../../src/simulation/virtual-clock.js';
import { ARITHMETIC_PROFILE, traceRequest } from './sim-fixtures.js';

const whole: SimRouter = {
  route: () => ({ strategy: 'aggregated', reason: 'test', decode: { worker: 'D', release: () => {} } }),
};

function run(requests: Parameters<typeof replay>[0]['requests'], slo = { ttftMs: 10_000, itlMs: 1000 }) {
  const clock = new VirtualClock();
  const engines = new Map([['D', new SimEngine({ profile: ARITHMETIC_PROFILE, clock })]]);
  return replay({ requests, engines, router: whole, slo, clock });
}

describe('a replay’s service levels', () => {
  it("holds each request to its own service levels where it names them, the run's otherwise", async () => {
    // Alone on the engine, each takes a 50 ms prefill and 10 ms steps: TTFT 50 ms.
    const summary = await run([
      traceRequest(0, [1, 2], 5),
      { ...traceRequest(10_000, [3, 4], 5), sloTtftMs: 10 },
      { ...traceRequest(20_000, [5, 6], 5), sloItlMs: 1 },
    ]);
    expect(summary.completed).toBe(3);
    expect(summary.slo_attainment).toBeCloseTo(1 / 3, 12);
    expect(summary).not.toHaveProperty('tenants');
  });

  it('reports each tenant apart once the requests name tenants, those that name none under default', async () => {
    const summary = await run([
      { ...traceRequest(0, [1, 2], 5), tenant: 'a' },
      { ...traceRequest(10_000, [3, 4], 5), tenant: 'a', sloTtftMs: 10 },
      { ...traceRequest(20_000, [5, 6], 5), tenant: 'b' },
      traceRequest(30_000, [7, 8], 5),
    ]);
    expect(summary.tenants).toMatchObject({
      a: { requests: 2, completed: 2, slo_attainment: 0.5 },
      b: { requests: 1, completed: 1, slo_attainment: 1 },
      default: { requests: 1, completed: 1, slo_attainment: 1 },
    });
    expect(summary.tenants?.a?.ttft_ms.p50).toBeGreaterThan(0);
  });
});

describe('a replay’s router that refuses, holds back, preempts and learns', () => {
  function fleet() {
    const clock = new VirtualClock();
    const engines = new Map([
      ['P', new SimEngine({ profile: ARITHMETIC_PROFILE, clock })],
      ['D', new SimEngine({ profile: ARITHMETIC_PROFILE, clock })],
    ]);
    return { clock, engines };
  }
  // Released once, as a pool's lease is.
  const lease = (worker: string, released: string[]) => {
    let done = false;
    return {
      worker,
      release: (outcome?: string) => {
        if (!done) released.push(`${worker}:${outcome ?? 'none'}`);
        done = true;
      },
    };
  };

  it('counts a refused request as shed, by why, never served and never good', async () => {
    const { clock, engines } = fleet();
    const router: SimRouter = {
      route: (request) =>
        request.tenant === 'batch'
          ? { strategy: 'refused', reason: 'slo' }
          : { strategy: 'aggregated', reason: 'test', decode: lease('D', []) },
    };
    const summary = await replay({
      requests: [{ ...traceRequest(0, [1], 5), tenant: 'batch' }, traceRequest(10, [2], 5)],
      engines,
      router,
      slo: { ttftMs: 10_000, itlMs: 1000 },
      clock,
    });
    expect(summary.shed).toEqual({ slo: 1 });
    expect(summary.completed).toBe(1);
    expect(summary.slo_attainment).toBe(0.5);
    expect(summary.tenants?.batch).toMatchObject({ requests: 1, completed: 0, shed: 1 });
  });

  it('serves a request whose routing answers later, from when it answers, its wait counted in its TTFT', async () => {
    const { clock, engines } = fleet();
    let admit: (() => void) | undefined;
    const router: SimRouter = {
      route: (_request, index) => {
        const decision = { strategy: 'aggregated' as const, reason: 'test', decode: lease('D', []) };
        if (index === 0) return { ...decision, decode: { worker: 'D', release: () => admit?.() } };
        return new Promise((resolve) => {
          admit = () => resolve(decision);
        });
      },
    };
    const summary = await replay({
      requests: [traceRequest(0, [1, 2], 5), traceRequest(0, [3, 4], 5)],
      engines,
      router,
      slo: { ttftMs: 10_000, itlMs: 1000 },
      clock,
    });
    expect(summary.completed).toBe(2);
    // The second waited for the first to end before its own prefill began.
    const alone = await run([traceRequest(0, [1, 2], 5)]);
    expect(summary.ttft_ms.p99).toBeGreaterThan(alone.ttft_ms.p99 * 2);
  });

  it('ends a preempted request, its decode aborted, its leases released without an outcome, the prefill’s KV let go', async () => {
    const { clock, engines } = fleet();
    const released: string[][] = [[], []];
    const endings: Array<{ preempt(): void }> = [];
    const router: SimRouter = {
      route: (_request, index, ending) => {
        endings.push(ending);
        const mine = released[index] as string[];
        return { strategy: 'disaggregated', prefill: lease('P', mine), decode: lease('D', mine) };
      },
      observe: (index, observation) => {
        // Once the first request streams, the router takes its place back.
        if (index === 0 && observation.type === 'firstToken') endings[0]?.preempt();
      },
    };
    const summary = await replay({
      requests: [
        { ...traceRequest(0, [1, 2], 50), tenant: 'low' },
        { ...traceRequest(0, [3], 5), tenant: 'high' },
      ],
      engines,
      router,
      slo: { ttftMs: 10_000, itlMs: 1000 },
      clock,
    });
    expect(summary.preempted).toBe(1);
    expect(summary.completed).toBe(1);
    expect(summary.tenants?.low).toMatchObject({ preempted: 1, completed: 0 });
    // Its prefill had done its part; its decode had not, and did nothing wrong.
    expect(released[0]).toEqual(['P:success', 'D:none']);
    expect(released[1]).toEqual(['P:success', 'D:success']);
    // Every block went back: nothing held by the preempted request on either engine.
    for (const engine of engines.values()) expect(engine.load().running + engine.load().waiting).toBe(0);
    // A preemption after the end does nothing.
    endings[0]?.preempt();
    expect(summary.preempted).toBe(1);
  });

  it('says a request is stoppable except while its KV is computed or sent: nothing cancels a prefill', async () => {
    const { clock, engines } = fleet();
    const seen: boolean[] = [];
    let ending: { readonly stoppable: boolean } | undefined;
    const router: SimRouter = {
      route: (_request, _index, given) => {
        ending = given;
        seen.push(given.stoppable);
        return { strategy: 'disaggregated', prefill: lease('P', []), decode: lease('D', []) };
      },
      observe: (_index, observation) => {
        if (observation.type === 'firstToken') seen.push(ending?.stoppable as boolean);
      },
    };
    clock.at(10, () => seen.push(ending?.stoppable as boolean));
    await replay({ requests: [traceRequest(0, [1, 2], 5)], engines, router, slo: { ttftMs: 1, itlMs: 1 }, clock });
    // Routed: nothing runs yet; 10 ms in, its prefill computes; at its first token decode holds its KV.
    expect(seen).toEqual([true, false, true]);
  });

  it('tells the router each served request’s first token and its end, with its TTFT and mean inter-token time', async () => {
    const { clock, engines } = fleet();
    const seen: string[] = [];
    const router: SimRouter = {
      route: () => ({ strategy: 'aggregated', reason: 'test', decode: lease('D', []) }),
      observe: (index, observation) =>
        seen.push(
          observation.type === 'firstToken'
            ? `${index} first ${observation.ttftMs}`
            : observation.type === 'finished'
              ? `${index} finished ${observation.tokens} ${observation.itlMs}`
              : `${index} handed off`,
        ),
    };
    await replay({ requests: [traceRequest(0, [1, 2], 5)], engines, router, slo: { ttftMs: 1, itlMs: 1 }, clock });
    expect(seen).toHaveLength(2);
    expect(seen[0]).toMatch(/^0 first \d/);
    expect(seen[1]).toMatch(/^0 finished 5 \d/);
  });
});
