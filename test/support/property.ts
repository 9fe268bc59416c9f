import type fc from 'fast-check';

/**
 * fast-check parameters for a property test: `runs` schedules from a fixed seed in CI;
 * `PROPERTY_SEED=random` (or a number) and `PROPERTY_RUNS=N` explore further. A run that hangs
 * past `timeoutMs` is a failure with its schedule, not a stuck suite.
 */
export function propertyOptions(runs: number, seed: number, timeoutMs?: number): fc.Parameters<unknown> {
  const chosen = process.env.PROPERTY_SEED;
  return {
    numRuns: Number(process.env.PROPERTY_RUNS ?? runs),
    ...(timeoutMs === undefined ? {} : { timeout: timeoutMs }),
    ...(chosen === 'random' ? {} : { seed: chosen === undefined ? seed : Number(chosen) }),
  };
}
