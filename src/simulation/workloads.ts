// The built-in workloads a simulated fleet replays when no trace file is given
// (`disagg simulate --workload NAME`): generated as the requests a Mooncake trace would hold,
// so that everything downstream (rate scaling, the summary, the replay) treats them alike.
// Each generator names the published measurements its shape follows.

import { branded, DisaggError } from '../util/disagg-error.js';
import type { TraceRequest } from './trace.js';
import { AGENT_SESSIONS } from './workload-agents.js';
import { BURSTY_CHAT } from './workload-chat.js';
import { asTrace, type WorkloadShape } from './workload-common.js';
import { MIXED } from './workload-mixed.js';
import { RAG } from './workload-rag.js';

export type { WorkloadSettings, WorkloadShape } from './workload-common.js';

/**
 * The built-in workloads by name, each with its help line and default rate (requests a
 * second): `agent-sessions` (6), `rag` (2), `bursty-chat` (10), `mixed` (10: two tenants).
 *
 * @example
 * const lines = Object.entries(WORKLOADS).map(([name, shape]) => `${name}: ${shape.help}`);
 */
export const WORKLOADS: Readonly<Record<string, WorkloadShape>> = Object.freeze({
  'agent-sessions': AGENT_SESSIONS,
  rag: RAG,
  'bursty-chat': BURSTY_CHAT,
  mixed: MIXED,
});

/** What a built-in workload is generated with. */
export interface WorkloadOptions {
  /** The seed of its randomness, a safe integer: the same seed, the same requests. Default 1. */
  readonly seed?: number;
  /** How many requests, 1 or more. Default 2,000. */
  readonly requests?: number;
  /** The mean arrival rate, requests per second. Default: the workload's own (`defaultRatePerS`). */
  readonly ratePerS?: number;
  /** One tenant's arrivals faster than its share (the `mixed` workload's tenants, by name); none by default. */
  readonly tenantRateScale?: Readonly<Record<string, number>> | undefined;
}

/**
 * A workload name that is none of the built-in ones; the message lists them (`code`
 * `DISAGG_WORKLOAD`).
 */
export class UnknownWorkloadError extends DisaggError {
  static override readonly is = branded<UnknownWorkloadError>('UnknownWorkloadError');
  declare readonly code: 'DISAGG_WORKLOAD';

  constructor(
    /** The name asked for. */
    readonly workload: string,
  ) {
    super(
      'DISAGG_WORKLOAD',
      `No workload named "${workload}": the built-in ones are ${Object.keys(WORKLOADS).join(', ')}`,
    );
  }
}

/**
 * The requests of a built-in workload, in arrival order (the first at 0 ms, whole ms), as
 * `readTrace` gives a trace's: deterministic for a seed.
 *
 * @throws {UnknownWorkloadError} for a name not in {@link WORKLOADS}.
 * @throws {RangeError} for a seed that is not a safe integer, a count of requests that is not a
 *   whole number of 1 or more, or a rate that is not a positive number.
 * @example
 * const requests = workload('agent-sessions', { seed: 7, requests: 500 });
 * requests[1]?.session; // the agent session that request is a turn of
 */
export function workload(name: string, options: WorkloadOptions = {}): TraceRequest[] {
  const shape = Object.hasOwn(WORKLOADS, name) ? WORKLOADS[name] : undefined;
  if (shape === undefined) throw new UnknownWorkloadError(name);
  const { seed = 1, requests = 2000, ratePerS = shape.defaultRatePerS } = options;
  if (!Number.isSafeInteger(seed)) throw new RangeError(`A workload's seed is a safe integer, got ${seed}`);
  if (!Number.isSafeInteger(requests) || requests < 1) {
    throw new RangeError(`A workload's requests are a whole number of 1 or more, got ${requests}`);
  }
  if (!(ratePerS > 0) || !Number.isFinite(ratePerS)) {
    throw new RangeError(`A workload's rate is a positive number of requests a second, got ${ratePerS}`);
  }
  const { tenantRateScale } = options;
  for (const [tenant, scale] of Object.entries(tenantRateScale ?? {})) {
    if (!(shape.tenants ?? []).includes(tenant)) {
      throw new RangeError(
        `The ${name} workload has no tenant ${tenant}${shape.tenants === undefined ? '' : `: its tenants are ${shape.tenants.join(', ')}`}`,
      );
    }
    if (!(scale > 0) || !Number.isFinite(scale))
      throw new RangeError(`A tenant's rate scale is a positive number, got ${scale}`);
  }
  return asTrace(shape.generate({ seed, requests, ratePerS, tenantRateScale }), requests);
}
