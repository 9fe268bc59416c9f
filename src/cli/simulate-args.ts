// What `disagg simulate` (and `disagg plan`) are asked: their own flags, read here; every
// other flag is `disagg serve`'s, passed on to its own table so that a simulated fleet is
// routed exactly as the proxy would be with the same command line.

import { WORKLOADS } from '../simulation/workloads.js';
/** The baselines `--routing` names, as the settings that make each (rules as data). */
export const ROUTING_BASELINES: Readonly<Record<string, { readonly help: string; readonly args: readonly string[] }>> =
  Object.freeze({
    disagg: { help: "disagg serve's own routing: its defaults, with the serve flags given", args: [] },
    random: {
      help: "a worker of each pool at random, per request (SGLang's mini_lb)",
      args: ['--prefill-policy', 'random', '--decode-policy', 'random', '--deciders', ''],
    },
    'round-robin': {
      help: "each pool's workers in turn (vLLM's disaggregated example proxy, itertools.cycle)",
      args: [
        '--selection',
        'round-robin',
        '--prefill-policy',
        'round-robin',
        '--decode-policy',
        'round-robin',
        '--deciders',
        '',
      ],
    },
    'llm-d': {
      help: "llm-d's inference-scheduling guide: prefix-cache 3, queue 2, kv-cache-utilization 2, the highest score; metrics every 50 ms",
      args: [
        '--prefill-policy',
        'scored',
        '--decode-policy',
        'scored',
        '--scorers',
        'prefix:3,queue:2,kv-usage:2',
        '--engine-load-interval-ms',
        '50',
        '--filters',
        '',
        '--deciders',
        '',
      ],
    },
  });

/** What a simulation command was asked for. */
export interface SimulateRequest {
  /** A Mooncake-format trace file. */
  readonly trace: string | undefined;
  /** A built-in workload (when no trace). */
  readonly workload: string | undefined;
  /** Requests: a workload's count, or a trace's first ones; all of a trace, 2,000 of a workload by default. */
  readonly requests: number | undefined;
  readonly seed: number;
  readonly prefill: number;
  readonly decode: number;
  readonly profile: string;
  /** The routings to compare, each a baseline's name (`disagg`: serve's own). */
  readonly routings: readonly string[];
  readonly sloTtftMs: number;
  readonly sloItlMs: number;
  readonly rateScale: number;
  /** A workload's tenants sped up apart (`--tenant-rate-scale batch=3`): a flood of one. */
  readonly tenantRateScale: Readonly<Record<string, number>> | undefined;
  readonly json: boolean;
  /** `disagg plan`: the most GPUs the fleet may take. */
  readonly gpus: number | undefined;
  /** The flags left for `disagg serve`'s table, in order. */
  readonly serveArgs: readonly string[];
}

/** A flag of `disagg simulate` given wrong: the message says what to change. */
export class SimulateUsageError extends Error {}

type Reader = (value: string, flag: string) => unknown;

const count: Reader = (value, flag) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new SimulateUsageError(`${flag} takes a whole number, 0 or more, got ${JSON.stringify(value)}`);
  return n;
};
const positive: Reader = (value, flag) => {
  const n = Number(value);
  if (!(n > 0) || !Number.isFinite(n))
    throw new SimulateUsageError(`${flag} takes a positive number, got ${JSON.stringify(value)}`);
  return n;
};
const text: Reader = (value) => value;
const tenantScales: Reader = (value, flag) => {
  const scales: Record<string, number> = {};
  for (const item of value.split(',').filter((part) => part.trim() !== '')) {
    const [tenant = '', scale = ''] = item.split('=').map((part) => part.trim());
    const n = Number(scale);
    if (tenant === '' || !(n > 0) || !Number.isFinite(n)) {
      throw new SimulateUsageError(
        `${flag} takes TENANT=X[,TENANT=X] with X a positive number, got ${JSON.stringify(value)}`,
      );
    }
    scales[tenant] = n;
  }
  if (Object.keys(scales).length === 0)
    throw new SimulateUsageError(`${flag} takes TENANT=X[,TENANT=X], got ${JSON.stringify(value)}`);
  return scales;
};
const routingList: Reader = (value, flag) => {
  const names = value
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  for (const name of names) {
    if (ROUTING_BASELINES[name] === undefined) {
      throw new SimulateUsageError(
        `${flag} ${JSON.stringify(name)} is not a routing; choose from ${Object.keys(ROUTING_BASELINES).join(', ')}`,
      );
    }
  }
  if (names.length === 0) throw new SimulateUsageError(`${flag} names one routing or more`);
  return names;
};

/** The command's own flags: each its key and how its value is read. */
const FLAGS: Readonly<Record<string, { key: keyof SimulateRequest; read: Reader | undefined }>> = {
  '--trace': { key: 'trace', read: text },
  '--workload': { key: 'workload', read: text },
  '--requests': { key: 'requests', read: positive },
  '--seed': { key: 'seed', read: count },
  '--prefill': { key: 'prefill', read: count },
  '--decode': { key: 'decode', read: count },
  '--profile': { key: 'profile', read: text },
  '--routing': { key: 'routings', read: routingList },
  '--slo-ttft-ms': { key: 'sloTtftMs', read: positive },
  '--slo-itl-ms': { key: 'sloItlMs', read: positive },
  '--rate-scale': { key: 'rateScale', read: positive },
  '--tenant-rate-scale': { key: 'tenantRateScale', read: tenantScales },
  '--gpus': { key: 'gpus', read: positive },
  '--json': { key: 'json', read: undefined },
};

/**
 * Reads a simulation command's flags; the rest is `disagg serve`'s (`serveArgs`).
 * `'help'` and `'list-profiles'` when asked for.
 *
 * @throws {SimulateUsageError} for a value it cannot use, or neither a trace nor a workload.
 */
export function parseSimulateArgs(
  args: readonly string[],
  defaults: { profile: string; workload?: string | undefined },
): SimulateRequest | 'help' | 'list-profiles' {
  const given: Record<string, unknown> = {};
  const serveArgs: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--help' || arg === '-h') return 'help';
    if (arg === '--list-profiles') return 'list-profiles';
    const [flag, inline] =
      arg.startsWith('--') && arg.includes('=')
        ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)]
        : [arg, undefined];
    const own = FLAGS[flag as string];
    if (own === undefined) {
      serveArgs.push(arg);
      continue;
    }
    if (own.read === undefined) {
      given[own.key] = true;
      continue;
    }
    const value = inline ?? args[++i];
    if (value === undefined) throw new SimulateUsageError(`${flag} takes a value`);
    given[own.key] = own.read(value, flag as string);
  }
  const trace = given.trace as string | undefined;
  const workload = (given.workload as string | undefined) ?? (trace === undefined ? defaults.workload : undefined);
  if (trace === undefined && workload === undefined)
    throw new SimulateUsageError('give a trace (--trace FILE) or a workload (--workload NAME)');
  if (trace !== undefined && given.workload !== undefined)
    throw new SimulateUsageError('--trace and --workload are two sources of requests: give one');
  const scaled = given.tenantRateScale as Record<string, number> | undefined;
  if (trace !== undefined && scaled !== undefined)
    throw new SimulateUsageError(
      "--tenant-rate-scale speeds up a workload's tenants (--workload mixed), not a trace's",
    );
  const tenants =
    workload === undefined || !Object.hasOwn(WORKLOADS, workload) ? undefined : WORKLOADS[workload]?.tenants;
  const stranger = Object.keys(scaled ?? {}).find((tenant) => !(tenants ?? []).includes(tenant));
  if (stranger !== undefined) {
    throw new SimulateUsageError(
      `--tenant-rate-scale names ${stranger}, which is not a tenant of the ${workload} workload${tenants === undefined ? ' (it names none)' : ` (${tenants.join(', ')})`}`,
    );
  }
  const prefill = (given.prefill as number | undefined) ?? 2;
  const decode = (given.decode as number | undefined) ?? 2;
  if (decode === 0)
    throw new SimulateUsageError('--decode takes 1 worker or more (with --prefill 0, each serves whole requests)');
  return {
    trace,
    workload,
    requests: given.requests as number | undefined,
    seed: (given.seed as number | undefined) ?? 1,
    prefill,
    decode,
    profile: (given.profile as string | undefined) ?? defaults.profile,
    routings: (given.routings as string[] | undefined) ?? ['disagg'],
    sloTtftMs: (given.sloTtftMs as number | undefined) ?? 2000,
    sloItlMs: (given.sloItlMs as number | undefined) ?? 50,
    rateScale: (given.rateScale as number | undefined) ?? 1,
    tenantRateScale: given.tenantRateScale as Record<string, number> | undefined,
    json: given.json === true,
    gpus: given.gpus as number | undefined,
    serveArgs,
  };
}
