// How many prefill and decode workers a workload needs: the smallest fleet, in GPUs, whose
// simulation meets the service levels for enough of its requests; among fleets of that size,
// the best goodput. More workers of a kind never make a fleet worse, so for each number of
// prefill workers the fewest decode workers that pass is found by bisection, and a fleet of
// the fewest GPUs is one where a worker fewer of either kind fails (it would have fewer GPUs).

import type { SimulationResult } from './simulate-run.js';

/** A fleet to try: prefill and decode workers of one profile. */
export interface PlanFleet {
  readonly prefill: number;
  readonly decode: number;
  readonly profile: string;
  /** GPUs per worker (the profile's tensor parallelism). */
  readonly gpusPerWorker: number;
}

/** One fleet simulated, and whether it met the plan's target. */
export interface PlanTrial {
  readonly fleet: PlanFleet;
  readonly result: SimulationResult;
  readonly passes: boolean;
}

/** What the search found: the fleet (none when none within the budget passes) and every trial. */
export interface PlanAnswer {
  readonly best: PlanTrial | undefined;
  /** Every fleet simulated, in the order tried. */
  readonly trials: readonly PlanTrial[];
  /** The best fleet with one prefill worker fewer, and with one decode worker fewer, where those were tried. */
  readonly fewer: { readonly prefill: PlanTrial | undefined; readonly decode: PlanTrial | undefined };
}

/** Options of {@link searchPlan}. */
export interface PlanSearch {
  /** The profiles (parallelisms) to try, each with its GPUs per worker. */
  readonly profiles: readonly { readonly name: string; readonly gpusPerWorker: number }[];
  /** The most GPUs a fleet may take. */
  readonly gpus: number;
  /** The share of requests (0-1) that must complete within both service levels. */
  readonly attainment: number;
  /** Whether to try fleets without prefill workers (every worker serving whole requests). */
  readonly aggregated: boolean;
  /** Simulates one fleet. */
  readonly simulate: (fleet: PlanFleet) => Promise<SimulationResult>;
}

/**
 * The fleet of the fewest GPUs within `gpus` whose simulation completes every request and
 * meets both service levels for `attainment` of them; ties to the higher goodput. Each fleet
 * is simulated once.
 *
 * @example
 * const answer = await searchPlan({ profiles: [{ name: 'p', gpusPerWorker: 1 }], gpus: 8, attainment: 0.9, aggregated: true, simulate });
 * answer.best?.fleet; // { prefill: 2, decode: 3, ... }
 */
export async function searchPlan(search: PlanSearch): Promise<PlanAnswer> {
  const trials: PlanTrial[] = [];
  const seen = new Map<string, PlanTrial>();
  const trial = async (fleet: PlanFleet): Promise<PlanTrial> => {
    const key = `${fleet.profile}:${fleet.prefill}:${fleet.decode}`;
    const known = seen.get(key);
    if (known !== undefined) return known;
    const result = await search.simulate(fleet);
    const passes = result.completed === result.requests && result.slo_attainment >= search.attainment;
    const done = { fleet, result, passes };
    seen.set(key, done);
    trials.push(done);
    return done;
  };
  let best: PlanTrial | undefined;
  for (const profile of search.profiles) {
    const workers = Math.floor(search.gpus / profile.gpusPerWorker);
    for (let prefill = search.aggregated ? 0 : 1; prefill < workers; prefill++) {
      const fleet = (decode: number): PlanFleet => ({
        prefill,
        decode,
        profile: profile.name,
        gpusPerWorker: profile.gpusPerWorker,
      });
      // Only fleets no larger than the best so far could replace it.
      const most = Math.min(
        workers - prefill,
        best === undefined ? workers : gpusOf(best.fleet) / profile.gpusPerWorker - prefill,
      );
      if (most < 1) break;
      if (!(await trial(fleet(most))).passes) continue;
      let low = 1;
      let high = most;
      while (low < high) {
        const middle = Math.floor((low + high) / 2);
        if ((await trial(fleet(middle))).passes) high = middle;
        else low = middle + 1;
      }
      const found = await trial(fleet(high));
      if (best === undefined || better(found, best)) best = found;
    }
  }
  const neighbour = (prefill: number, decode: number) =>
    best === undefined ? undefined : seen.get(`${best.fleet.profile}:${prefill}:${decode}`);
  const fewer = {
    prefill:
      best === undefined || best.fleet.prefill === 0 ? undefined : neighbour(best.fleet.prefill - 1, best.fleet.decode),
    decode: best === undefined ? undefined : neighbour(best.fleet.prefill, best.fleet.decode - 1),
  };
  // The answer's neighbours are simulated too, so that the table shows why it is the answer.
  if (best !== undefined) {
    const { prefill, decode, profile, gpusPerWorker } = best.fleet;
    if (fewer.prefill === undefined && prefill > (search.aggregated ? 0 : 1)) {
      fewer.prefill = await trial({ prefill: prefill - 1, decode, profile, gpusPerWorker });
    }
    if (fewer.decode === undefined && decode > 1)
      fewer.decode = await trial({ prefill, decode: decode - 1, profile, gpusPerWorker });
  }
  return { best, trials, fewer };
}

/** GPUs a fleet takes. */
export function gpusOf(fleet: PlanFleet): number {
  return (fleet.prefill + fleet.decode) * fleet.gpusPerWorker;
}

/** Fewer GPUs, else more goodput. */
function better(a: PlanTrial, b: PlanTrial): boolean {
  const ga = gpusOf(a.fleet);
  const gb = gpusOf(b.fleet);
  return ga < gb || (ga === gb && a.result.goodput_rps > b.result.goodput_rps);
}
