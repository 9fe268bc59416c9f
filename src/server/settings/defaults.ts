// The defaults that the settings table shows and the server's modules apply, stated once, below
// both: the table's rows read them here, and health.ts, failure-rules.ts and request-body.ts
// export them where their callers look.

/**
 * The probes' defaults, stated once: the settings table (`--health-interval-ms`,
 * `--health-timeout-ms`, `--health-failure-threshold`, `--health-success-threshold`) and
 * `watchHealth` show and apply these.
 */
export const HEALTH_DEFAULTS = { intervalMs: 5000, timeoutMs: 2000, failureThreshold: 3, successThreshold: 2 } as const;

/**
 * The circuit breaker's defaults (`--breaker-failure-threshold`, `--breaker-success-threshold`,
 * `--breaker-open-ms`): five requests failing in a row on a worker open its circuit for ten
 * seconds; two successes in a row on trial close it.
 */
export const BREAKER_DEFAULTS = { failureThreshold: 5, successThreshold: 2, openMs: 10_000 } as const;

/**
 * The retries' defaults (`--retry-max-retries`, `--retry-initial-backoff-ms`,
 * `--retry-max-backoff-ms`), stated once for the settings table and `defaultRetries`.
 */
export const RETRY_DEFAULTS = { maxRetries: 2, initialBackoffMs: 50, maxBackoffMs: 1000 } as const;

/** The largest request body taken by default (`--max-body-bytes`): 8 MiB. */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
