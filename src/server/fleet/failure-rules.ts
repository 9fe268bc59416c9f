import { classifyFailure } from '../../flow/failure-rules.js';
import { FAILURE_RULES, type FailureClass } from '../../protocol/failure-rules.js';
import { isUnder } from '../../util/url.js';
import { RETRY_DEFAULTS } from '../settings/defaults.js';

// The classifier and its rules live below the server, so that the errors' own `retryable`
// reads them too; the proxy's modules and `disagg/server` keep importing them from here.
export { classifyFailure } from '../../flow/failure-rules.js';
export { FAILURE_RULES, type FailureClass, type FailureRule } from '../../protocol/failure-rules.js';

export { RETRY_DEFAULTS } from '../settings/defaults.js';

/**
 * The wait before attempt `attempt + 1` after `error`, or undefined: retries off or used up,
 * or a failure {@link FAILURE_RULES} does not retry (a deadline, a 4xx, a stream that broke
 * after the worker answered). Full jitter: a random wait up to the doubled backoff, capped.
 *
 * @example retryDelay({ disabled: false, maxRetries: 2, initialBackoffMs: 50, maxBackoffMs: 1000 }, error, 0); // 0 to 50 ms, or undefined
 */
export function retryDelay(
  retry: { disabled: boolean; maxRetries: number; initialBackoffMs: number; maxBackoffMs: number },
  error: unknown,
  attempt: number,
): number | undefined {
  if (retry.disabled || attempt >= retry.maxRetries) return undefined;
  if (!FAILURE_RULES[classifyFailure(error).kind].retry) return undefined;
  const ceiling = Math.min(retry.maxBackoffMs, retry.initialBackoffMs * 2 ** attempt);
  return Math.random() * ceiling;
}

/**
 * The worker a failure is charged to, of the request's `workers`: the one whose URL the
 * worker's error names (a call under its URL), with the failure's class; undefined for a
 * failure of no worker (a deadline, no worker in rotation, a cancellation).
 *
 * @example chargedWorker(UpstreamError.fromStatus('http://p0:8100/v1/completions', 503, 'busy'), { prefill: p0 }); // { role: 'prefill', worker: p0, kind: 'worker-error' }
 */
export function chargedWorker<N extends { url: string }>(
  error: unknown,
  workers: { prefill?: N | undefined; decode?: N | undefined },
): { role: 'prefill' | 'decode'; worker: N; kind: FailureClass } | undefined {
  const { kind, upstream } = classifyFailure(error);
  if (upstream === undefined || kind === 'deadline' || kind === 'other') return undefined;
  for (const role of ['prefill', 'decode'] as const) {
    const worker = workers[role];
    if (worker !== undefined && isUnder(upstream.url, worker.url)) return { role, worker, kind };
  }
  return undefined;
}

/** Options of {@link defaultRetries}; `disagg serve`'s defaults. */
export interface RetryOptions {
  /** Retries of each kind per request (a decode given to another worker, a request run again); 2 by default. */
  maxRetries?: number | undefined;
  /** The backoff before the first retry, doubling after each, with full jitter; 50 ms by default. */
  initialBackoffMs?: number | undefined;
  /** The longest backoff; 1,000 ms by default. */
  maxBackoffMs?: number | undefined;
}

/**
 * `disagg serve`'s retries as `disaggregate` options, for a router of your own: spread them
 * into its options. A request that failed before the client got a byte goes to another worker
 * when {@link FAILURE_RULES} say the failure may pass there: a worker that could not be
 * reached, a 5xx, a 429 (never a 4xx, a deadline, or a stream that broke after it started).
 * `retryDecode` gives a sequential decode that could not be reached the same handoff on
 * another decode worker, so that prefill's KV is taken rather than left to the engine's
 * lease; `retryPrefill` runs the request again from a fresh prefill, passing over the worker
 * that failed. Each kind has `maxRetries` of its own per request.
 *
 * @throws {TypeError} for a negative or non-finite number.
 * @example
 * const retries = defaultRetries(); // { retryPrefill, retryDecode }
 * const stream = await disaggregate({ ...options, ...retries });
 */
export function defaultRetries(options: RetryOptions = {}): {
  retryPrefill: (error: unknown, attempt: number) => number | undefined;
  retryDecode: (error: unknown, attempt: number) => number | undefined;
} {
  const settings = {
    disabled: false,
    maxRetries: count('maxRetries', options.maxRetries, RETRY_DEFAULTS.maxRetries),
    initialBackoffMs: count('initialBackoffMs', options.initialBackoffMs, RETRY_DEFAULTS.initialBackoffMs),
    maxBackoffMs: count('maxBackoffMs', options.maxBackoffMs, RETRY_DEFAULTS.maxBackoffMs),
  };
  const retry = (error: unknown, attempt: number) => retryDelay(settings, error, attempt);
  return { retryPrefill: retry, retryDecode: retry };
}

function count(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`defaultRetries: ${name} must be a number of 0 or more, got ${String(value)}`);
  }
  return value;
}
