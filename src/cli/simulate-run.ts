// One simulation: a trace or workload replayed on a simulated fleet under one routing. What
// `disagg simulate` runs for each routing it compares and `disagg plan` for each fleet it tries.

import { loadServeConfig } from '../server/config.js';
import type { EngineProfile } from '../simulation/profile-types.js';
import { type ReplaySummary, replay } from '../simulation/replay.js';
import { readTrace, scaleRate, type TraceRequest } from '../simulation/trace.js';
import { VirtualClock } from '../simulation/virtual-clock.js';
import { workload } from '../simulation/workloads.js';
import { ROUTING_BASELINES, type SimulateRequest } from './simulate-args.js';
import { type FleetShape, simulatedFleet, simulatedSettings } from './simulate-fleet.js';

/** A replay's summary with what it ran: the routing, the fleet and the profile. */
export interface SimulationResult extends ReplaySummary {
  readonly routing: string;
  readonly prefill_workers: number;
  readonly decode_workers: number;
  readonly profile: string;
  /** GPUs the fleet takes (workers × the profile's tensor parallelism). */
  readonly gpus: number;
}

/**
 * The requests a simulation replays: the trace's (its first `requests`, when given), else the
 * workload's, their rate scaled.
 *
 * @throws {TraceFormatError} for a trace line not in Mooncake's format; the file system's
 *   error for a file that cannot be read; {@link UnknownWorkloadError} for an unknown workload.
 */
export async function requestsOf(
  asked: Pick<SimulateRequest, 'trace' | 'workload' | 'requests' | 'seed' | 'rateScale'> &
    Partial<Pick<SimulateRequest, 'tenantRateScale'>>,
): Promise<TraceRequest[]> {
  let requests: TraceRequest[];
  if (asked.trace !== undefined) {
    requests = await readTrace(asked.trace);
    if (asked.requests !== undefined) requests = requests.slice(0, asked.requests);
  } else {
    requests = workload(asked.workload as string, {
      seed: asked.seed,
      tenantRateScale: asked.tenantRateScale,
      ...(asked.requests === undefined ? {} : { requests: asked.requests }),
    });
  }
  return asked.rateScale === 1 ? requests : scaleRate(requests, asked.rateScale);
}

/**
 * Replays `requests` on a fleet of `shape` and `profile`, routed by `routing` (a baseline's
 * settings, then `serveArgs`).
 *
 * @throws {ConfigError} for serve settings the proxy refuses.
 */
export async function simulateOnce(
  requests: readonly TraceRequest[],
  options: {
    readonly shape: FleetShape;
    readonly profile: EngineProfile;
    readonly routing: string;
    readonly serveArgs: readonly string[];
    readonly slo: { ttftMs: number; itlMs: number };
    readonly seed: number;
    readonly progress?: ((finished: number, total: number) => void) | undefined;
  },
): Promise<SimulationResult> {
  const baseline = ROUTING_BASELINES[options.routing];
  if (baseline === undefined) throw new RangeError(`No routing named ${options.routing}`);
  const settings = simulatedSettings(
    options.shape,
    options.profile.engine,
    [...baseline.args, ...options.serveArgs],
    (args) =>
      // The environment's DISAGG_* settings are the operator's proxy's, not the simulation's.
      loadServeConfig(args, {}),
  );
  const clock = new VirtualClock();
  const fleet = await simulatedFleet(settings, options.profile, clock, options.seed, options.slo);
  const summary = await replay({
    requests,
    engines: fleet.engines,
    router: fleet.router,
    slo: options.slo,
    clock,
    progress: options.progress,
  });
  const workers = options.shape.prefill + options.shape.decode;
  return {
    routing: options.routing,
    prefill_workers: options.shape.prefill,
    decode_workers: options.shape.decode,
    profile: options.profile.name,
    gpus: workers * options.profile.tensorParallel,
    ...summary,
  };
}
