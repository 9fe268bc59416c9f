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
