import { describe, expect, it } from 'vitest';
import { type PlanFleet, searchPlan } from '../../src/cli/plan-search.js';
import { ROUTING_BASELINES } from '../../src/cli/simulate-args.js';
import { simulatedSettings } from '../../src/cli/simulate-fleet.js';
import { requestsOf, type SimulationResult, simulateOnce } from '../../src/cli/simulate-run.js';
import { loadServeConfig } from '../../src/server/config.js';
import { DEFAULT_PROFILE, findProfile } from '../../src/simulation/profiles.js';

const profile = findProfile(DEFAULT_PROFILE);
if (profile === undefined) throw new Error('the default profile is built in');
const slo = { ttftMs: 2000, itlMs: 50 };

function run(
  requests: Parameters<typeof simulateOnce>[0],
  routing: string,
  serveArgs: string[] = [],
  shape = { prefill: 2, decode: 2 },
) {
  return simulateOnce(requests, {
    shape,
    profile: profile as NonNullable<typeof profile>,
    routing,
    serveArgs,
    slo,
    seed: 3,
  });
}

describe('a simulated fleet routed by the pipeline', () => {
  it("routing on the engines' KV events finds more of agent sessions' prefixes cached than random routing", async () => {
    const requests = await requestsOf({
      workload: 'agent-sessions',
      trace: undefined,
      requests: 400,
      seed: 1,
      rateScale: 1,
    });
    const random = await run(requests, 'random');
    const precise = await run(requests, 'disagg', [
      '--prefill-policy',
      'precise-prefix',
      '--decode-policy',
      'precise-prefix',
    ]);
    expect(precise.completed).toBe(400);
    expect(precise.prefix_hit_rate).toBeGreaterThan(random.prefix_hit_rate + 0.1);
    // What decode already holds is not sent again: less KV crosses the link.
    expect(precise.kv_transfer_gb).toBeLessThan(random.kv_transfer_gb);
  });

  it('session routing keeps each agent session on one decode worker: its later turns find their prefix', async () => {
    const requests = await requestsOf({
      workload: 'agent-sessions',
      trace: undefined,
      requests: 400,
      seed: 1,
      rateScale: 1,
    });
    const leastLoaded = await run(requests, 'disagg', ['--selection', 'least-in-flight']);
    const sessions = await run(requests, 'disagg', ['--prefill-policy', 'session', '--decode-policy', 'session']);
    expect(sessions.prefix_hit_rate).toBeGreaterThan(leastLoaded.prefix_hit_rate);
  });

  it('replays 5,000 requests over 16 workers the same way twice for a seed', async () => {
    const requests = await requestsOf({
      workload: 'bursty-chat',
      trace: undefined,
      requests: 5000,
      seed: 5,
      rateScale: 1,
    });
    const shape = { prefill: 8, decode: 8 };
    const first = await run(requests, 'random', [], shape);
    const second = await run(requests, 'random', [], shape);
    expect(second).toEqual(first);
    expect(first.completed).toBe(5000);
  });
});

describe('the plan search', () => {
  /** A fleet passes with at least `p` prefill and `d` decode workers (more never hurts). */
  function needs(p: number, d: number) {
    const tried: string[] = [];
    const simulate = async (fleet: PlanFleet): Promise<SimulationResult> => {
      tried.push(`${fleet.prefill}P${fleet.decode}D`);
      const passes = fleet.prefill >= p && fleet.decode >= d;
      return {
        requests: 10,
        completed: 10,
        slo_attainment: passes ? 1 : 0.5,
        goodput_rps: passes ? 10 : 5,
      } as SimulationResult;
    };
    return { simulate, tried };
  }

  it('finds the fleet of the fewest GPUs that passes; a worker fewer of either kind does not', async () => {
    const { simulate, tried } = needs(3, 5);
    const answer = await searchPlan({
      profiles: [{ name: 'p', gpusPerWorker: 1 }],
      gpus: 16,
      attainment: 0.95,
      aggregated: false,
      simulate,
    });
    expect(answer.best?.fleet).toMatchObject({ prefill: 3, decode: 5 });
    expect(answer.fewer.prefill).toMatchObject({ fleet: { prefill: 2, decode: 5 }, passes: false });
    expect(answer.fewer.decode).toMatchObject({ fleet: { prefill: 3, decode: 4 }, passes: false });
    // Bisection, not every fleet of the budget.
    expect(tried.length).toBeLessThan(40);
    expect(new Set(tried).size).toBe(tried.length);
  });

  it('counts GPUs by the profile: a wider worker fits fewer of them in the budget', async () => {
    const { simulate } = needs(1, 2);
    const answer = await searchPlan({
      profiles: [
        { name: 'tp4', gpusPerWorker: 4 },
        { name: 'tp2', gpusPerWorker: 2 },
      ],
      gpus: 8,
      attainment: 0.9,
      aggregated: false,
      simulate,
    });
    expect(answer.best?.fleet).toMatchObject({ profile: 'tp2', prefill: 1, decode: 2 });
  });

  it('finds none when no fleet within the budget passes', async () => {
    const { simulate } = needs(4, 4);
    const answer = await searchPlan({
      profiles: [{ name: 'p', gpusPerWorker: 1 }],
      gpus: 6,
      attainment: 0.9,
      aggregated: true,
      simulate,
    });
    expect(answer.best).toBeUndefined();
  });
});

describe("the baselines: their anchors' settings alone", () => {
  it.each(['random', 'round-robin', 'llm-d'])(
    '%s takes none of disagg serve’s own defaults: no P/D decider, no SLO filter, no SLO scorer',
    (name) => {
      const baseline = ROUTING_BASELINES[name] as { args: readonly string[] };
      const settings = simulatedSettings({ prefill: 2, decode: 2 }, 'vllm', baseline.args, (args) =>
        loadServeConfig(args, {}),
      );
      expect(settings.routing.deciders).toEqual([]);
      for (const policy of [settings.prefillPolicy, settings.decodePolicy]) {
        if (policy !== 'scored') continue;
        expect(settings.routing.filters).toEqual([]);
        expect(settings.routing.scorers.map((scorer) => scorer.name)).not.toContain('slo-headroom');
      }
    },
  );
});
