// `disagg plan`: how many prefill and decode workers a workload needs to meet its service
// levels, found by simulating fleets within a GPU budget. Part of the command-line tool: it
// writes to the console.

import type { EngineProfile } from '../simulation/profile-types.js';
import { DEFAULT_PROFILE, readProfile } from '../simulation/profiles.js';
import { WORKLOADS } from '../simulation/workloads.js';
import { gpusOf, type PlanAnswer, type PlanTrial, searchPlan } from './plan-search.js';
import { parseSimulateArgs, SimulateUsageError } from './simulate-args.js';
import { runProblem, usageProblem } from './simulate-command.js';
import { requestsOf, simulateOnce } from './simulate-run.js';

/** The help text of `disagg plan`. */
export const PLAN_USAGE = `Usage: disagg plan (--trace FILE | --workload NAME) --gpus N [options] [disagg serve's routing flags]

The prefill and decode workers a workload needs: the fleet of the fewest GPUs (within --gpus)
whose simulation serves every request and meets both service levels for --attainment of them,
ties to the higher goodput. It prints every fleet it simulated, and the answer's neighbours
with a worker fewer of either kind, which do not meet them.

Options:
  --trace FILE | --workload NAME   the requests, as disagg simulate takes them (${Object.keys(WORKLOADS).join(', ')})
  --requests N                     a workload's requests (2000), or a trace's first N
  --gpus N                         the GPU budget (required)
  --profile NAME|FILE[,...]        the engines (${DEFAULT_PROFILE}); several profiles
                                   of one model at different tensor parallelism are
                                   compared (--list-profiles)
  --slo-ttft-ms N                  time to first token (2000)
  --slo-itl-ms N                   mean inter-token latency (50)
  --attainment X                   the share of requests that must meet both (0.95)
  --prefill 0                      also consider fleets without prefill workers (aggregated)
  --routing NAME                   the routing the fleets are simulated under (disagg)
  --rate-scale X, --seed N, --json as disagg simulate
  --help                           this text

Example:
  disagg plan --workload agent-sessions --requests 1000 --gpus 16 --slo-ttft-ms 1000 --slo-itl-ms 30
`;

/** Runs `disagg plan <args>`; resolves with the exit code (1 when no fleet within the budget passes). */
export async function plan(args: readonly string[]): Promise<number> {
  const started = performance.now();
  // `--attainment` is plan's own; the rest is simulate's.
  let attainment = 0.95;
  const rest: string[] = [];
  let asked: ReturnType<typeof parseSimulateArgs>;
  try {
    for (let i = 0; i < args.length; i++) {
      const arg = args[i] as string;
      if (arg === '--attainment' || arg.startsWith('--attainment=')) {
        const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : args[++i];
        attainment = Number(value);
        if (!(attainment > 0 && attainment <= 1)) {
          throw new SimulateUsageError(
            `--attainment takes a share above 0 and at most 1, got ${JSON.stringify(value)}`,
          );
        }
      } else rest.push(arg);
    }
    asked = parseSimulateArgs(rest, { profile: DEFAULT_PROFILE });
    if (asked !== 'help' && asked !== 'list-profiles') {
      if (asked.gpus === undefined) throw new SimulateUsageError('--gpus N is the budget the plan fits in: give it');
      if (asked.routings.length > 1) throw new SimulateUsageError('--routing takes one routing for a plan');
    }
  } catch (error) {
    return usageProblem(error, 'plan');
  }
  if (asked === 'help' || asked === 'list-profiles') {
    if (asked === 'help') console.log(PLAN_USAGE);
    else return (await import('./simulate-command.js')).simulate(['--list-profiles']);
    return 0;
  }
  const request = asked;
  let answer: PlanAnswer;
  try {
    const profiles: EngineProfile[] = [];
    for (const name of request.profile.split(',')) profiles.push(await readProfile(name.trim()));
    const requests = await requestsOf(request);
    const byName = new Map(profiles.map((profile) => [profile.name, profile]));
    answer = await searchPlan({
      profiles: profiles.map((profile) => ({ name: profile.name, gpusPerWorker: profile.tensorParallel })),
      gpus: request.gpus as number,
      attainment,
      aggregated: request.prefill === 0,
      simulate: (fleet) => {
        if (!request.json && process.stderr.isTTY) {
          process.stderr.write(`\rsimulating ${fleet.prefill}P + ${fleet.decode}D of ${fleet.profile}...`.padEnd(80));
        }
        return simulateOnce(requests, {
          shape: { prefill: fleet.prefill, decode: fleet.decode },
          profile: byName.get(fleet.profile) as EngineProfile,
          routing: request.routings[0] as string,
          serveArgs: request.serveArgs,
          slo: { ttftMs: request.sloTtftMs, itlMs: request.sloItlMs },
          seed: request.seed,
        });
      },
    });
  } catch (error) {
    return runProblem(error, 'plan');
  }
  if (!request.json && process.stderr.isTTY) process.stderr.write(`\r${''.padEnd(80)}\r`);
  const wallS = (performance.now() - started) / 1000;
  if (request.json) {
    console.log(JSON.stringify(planJson(answer, attainment, wallS), null, 2));
  } else {
    console.log(planText(answer, attainment, request.gpus as number, wallS));
  }
  return answer.best === undefined ? 1 : 0;
}

function trialJson(trial: PlanTrial | undefined) {
  if (trial === undefined) return null;
  const { fleet, result, passes } = trial;
  return {
    prefill: fleet.prefill,
    decode: fleet.decode,
    profile: fleet.profile,
    gpus: gpusOf(fleet),
    passes,
    slo_attainment: result.slo_attainment,
    goodput_rps: result.goodput_rps,
    goodput_per_gpu: result.goodput_rps / gpusOf(fleet),
    ttft_ms: result.ttft_ms,
    itl_ms: result.itl_ms,
  };
}

/** The answer as JSON: the plan, its neighbours with a worker fewer, every fleet tried. */
export function planJson(answer: PlanAnswer, attainment: number, wallS: number) {
  return {
    plan: trialJson(answer.best),
    attainment,
    one_fewer_prefill: trialJson(answer.fewer.prefill),
    one_fewer_decode: trialJson(answer.fewer.decode),
    searched: answer.trials.map(trialJson),
    wall_s: wallS,
  };
}

/** The answer as a table of every fleet tried, then the plan in a sentence. */
export function planText(answer: PlanAnswer, attainment: number, gpus: number, wallS: number): string {
  const pct = (value: number) => `${(value * 100).toFixed(1)}%`;
  const header = ['fleet', 'profile', 'GPUs', 'attained', 'TTFT p90 ms', 'ITL p90 ms', 'goodput/GPU', ''];
  const sorted = [...answer.trials].sort(
    (a, b) => gpusOf(a.fleet) - gpusOf(b.fleet) || a.fleet.prefill - b.fleet.prefill,
  );
  const rows = sorted.map(({ fleet, result, passes }) => [
    `${fleet.prefill}P + ${fleet.decode}D`,
    fleet.profile,
    String(gpusOf(fleet)),
    pct(result.slo_attainment),
    result.ttft_ms.p90.toFixed(0),
    result.itl_ms.p90.toFixed(1),
    (result.goodput_rps / gpusOf(fleet)).toFixed(3),
    answer.best === undefined || fleetOf(answer.best) !== fleetOf({ fleet }) ? (passes ? 'meets' : '') : '<- plan',
  ]);
  const all = [header, ...rows];
  const widths = header.map((_, c) => Math.max(...all.map((row) => (row[c] as string).length)));
  const table = all
    .map((row) =>
      row
        .map((cell, c) => cell.padEnd(widths[c] as number))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
  const best = answer.best;
  if (best === undefined) {
    return `${table}\n\nNo fleet within ${gpus} GPUs meets the service levels for ${pct(attainment)} of the requests (${wallS.toFixed(1)} s).`;
  }
  const fewer = [answer.fewer.prefill, answer.fewer.decode]
    .filter((trial): trial is PlanTrial => trial !== undefined)
    .map((trial) => `${trial.fleet.prefill}P + ${trial.fleet.decode}D attains ${pct(trial.result.slo_attainment)}`);
  return `${table}\n\nPlan: ${best.fleet.prefill} prefill + ${best.fleet.decode} decode workers of ${best.fleet.profile} (${gpusOf(best.fleet)} GPUs): ${pct(best.result.slo_attainment)} of requests within the service levels (target ${pct(attainment)})${fewer.length === 0 ? '' : `; with a worker fewer, ${fewer.join(', ')}`}. ${answer.trials.length} fleets simulated in ${wallS.toFixed(1)} s.`;
}

const fleetOf = (trial: Pick<PlanTrial, 'fleet'>) =>
  `${trial.fleet.profile}:${trial.fleet.prefill}:${trial.fleet.decode}`;
