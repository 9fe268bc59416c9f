// `disagg simulate`: a trace or workload replayed on a simulated fleet that keeps time, under
// disagg serve's routing or a baseline's, and what users would have felt. Part of the
// command-line tool: it writes to the console.

import { DEFAULT_PROFILE, PROFILES, profileSummary, readProfile } from '../simulation/profiles.js';
import { WORKLOADS } from '../simulation/workloads.js';
import { DisaggError } from '../util/disagg-error.js';
import { settingProblems } from './serve-parts.js';
import { parseSimulateArgs, ROUTING_BASELINES, type SimulateRequest, SimulateUsageError } from './simulate-args.js';
import { resultTable } from './simulate-report.js';
import { requestsOf, type SimulationResult, simulateOnce } from './simulate-run.js';

/** The help text of `disagg simulate`. */
export const SIMULATE_USAGE = `Usage: disagg simulate (--trace FILE | --workload NAME) [options] [disagg serve's routing flags]

Replays requests on a simulated fleet of vLLM- or SGLang-shaped engines that keep time (queues,
a token budget per step, chunked prefill, KV blocks with prefix caching and eviction, P->D
transfers), on a virtual clock: an hour of traffic in seconds. The fleet is routed by disagg
serve's own pipeline (its settings, policies and deciders as the flags give them) or by a
baseline, and the summary says what users would have felt: time to first token, inter-token
latency, goodput within the service levels.

Options:
  --trace FILE            a Mooncake-format JSONL trace (timestamp, input_length,
                          output_length, hash_ids of 512-token blocks)
  --workload NAME         a built-in workload instead: ${Object.keys(WORKLOADS).join(', ')}
  --requests N            a workload's requests (2000), or a trace's first N (all)
  --prefill N             prefill workers (2; 0: every worker serves whole requests)
  --decode N              decode workers (2)
  --profile NAME|FILE     the engines' timing and memory (${DEFAULT_PROFILE});
                          --list-profiles lists the built-in ones
  --routing NAME[,NAME]   ${Object.keys(ROUTING_BASELINES).join(', ')} (disagg); several are
                          compared side by side on the same requests
  --slo-ttft-ms N         the time to first token a request must meet (2000)
  --slo-itl-ms N          the mean inter-token latency it must meet (50)
  --rate-scale X          the requests arrive X times as fast (1)
  --tenant-rate-scale T=X one tenant of a workload arrives X times as fast again
                          (mixed: batch=6 floods the fleet with its jobs)
  --seed N                the workload's and the random policies' seed (1)
  --json                  the summary as JSON (one object, or an array for several routings)
  --help                  this text

Every other flag is disagg serve's and routes the simulated fleet as it would the real one
(--decode-policy precise-prefix, --scorers, --deciders, ...; disagg serve --help).

Routings:
${Object.entries(ROUTING_BASELINES)
  .map(([name, { help }]) => `  ${name.padEnd(12)} ${help}`)
  .join('\n')}

Example:
  disagg simulate --workload agent-sessions --prefill 2 --decode 4 --routing random,disagg \\
    --decode-policy precise-prefix
`;

/** Runs `disagg simulate <args>`; resolves with the exit code. */
export async function simulate(args: readonly string[]): Promise<number> {
  const started = performance.now();
  let asked: ReturnType<typeof parseSimulateArgs>;
  try {
    asked = parseSimulateArgs(args, { profile: DEFAULT_PROFILE });
  } catch (error) {
    return usageProblem(error, 'simulate');
  }
  if (asked === 'help') {
    console.log(SIMULATE_USAGE);
    return 0;
  }
  if (asked === 'list-profiles') {
    for (const profile of PROFILES.values()) console.log(profileSummary(profile));
    return 0;
  }
  const results: SimulationResult[] = [];
  try {
    const { profile, requests } = await inputsOf(asked);
    for (const routing of asked.routings) {
      const result = await simulateOnce(requests, {
        shape: { prefill: asked.prefill, decode: asked.decode },
        profile,
        routing,
        serveArgs: asked.serveArgs,
        slo: { ttftMs: asked.sloTtftMs, itlMs: asked.sloItlMs },
        seed: asked.seed,
        progress: asked.json ? undefined : progressBar(routing),
      });
      results.push(result);
    }
  } catch (error) {
    return runProblem(error, 'simulate');
  }
  const wallS = (performance.now() - started) / 1000;
  const withWall = results.map((result) => ({ ...result, wall_s: wallS }));
  if (asked.json) console.log(JSON.stringify(withWall.length === 1 ? withWall[0] : withWall, null, 2));
  else console.log(resultTable(withWall));
  return 0;
}

/** The profile and the requests a command runs with. */
export async function inputsOf(asked: SimulateRequest) {
  const profile = await readProfile(asked.profile);
  const requests = await requestsOf(asked);
  return { profile, requests };
}

/** A flag given wrong: one line, and where to read more; exit status 2. */
export function usageProblem(error: unknown, command: string): number {
  if (!(error instanceof SimulateUsageError)) throw error;
  console.error(`disagg ${command}: ${error.message}`);
  console.error(`See 'disagg ${command} --help'.`);
  return 2;
}

/**
 * A run that cannot go on: a serve setting refused, an unknown profile or workload, a trace
 * not in the format, a file that cannot be read. One line each; 2 for what the flags say, 1
 * for a file.
 */
export function runProblem(error: unknown, command: string): number {
  const problems = settingProblems(error);
  if (problems !== undefined) {
    for (const problem of problems) console.error(`disagg ${command}: ${problem.replace(/\s*\n\s*/g, ' ')}`);
    console.error(`See 'disagg ${command} --help' and 'disagg serve --help'.`);
    return 2;
  }
  if (DisaggError.is(error)) {
    console.error(`disagg ${command}: ${error.message}`);
    return 2;
  }
  const code = (error as { code?: unknown }).code;
  if (code === 'ENOENT' || code === 'EACCES' || code === 'EISDIR') {
    console.error(`disagg ${command}: ${(error as Error).message}`);
    return 1;
  }
  throw error;
}

/** A progress bar on the terminal's standard error; nothing when it is not a terminal. */
function progressBar(label: string): ((finished: number, total: number) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return (finished, total) => {
    const width = 30;
    const filled = Math.round((finished / Math.max(total, 1)) * width);
    process.stderr.write(
      `\r${label.padEnd(12)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${finished}/${total}`,
    );
    if (finished >= total) process.stderr.write('\n');
  };
}
