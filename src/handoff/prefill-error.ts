import { FAILURE_RULES, statusFailureClass } from '../protocol/failure-rules.js';
import { CONNECTION_ERROR_CODES, findCause } from '../util/cause-chain.js';
import { describeValue } from '../util/describe-value.js';
import { branded, DisaggError } from '../util/disagg-error.js';

/**
 * What went wrong with a prefill:
 * - `not_activated`: no prefill route was ready ("Prefill router not yet activated");
 * - `prefill`: the prefill itself failed ("Prefill execution failed: ...");
 * - `no_disaggregated_params`: prefill answered without the handoff parameters decode needs
 *   ("No disaggregated params in prefill response: ...").
 */
export type PrefillErrorKind = 'not_activated' | 'prefill' | 'no_disaggregated_params';

const PREFIXES: Record<PrefillErrorKind, string> = {
  not_activated: 'Prefill router not yet activated',
  prefill: 'Prefill execution failed',
  no_disaggregated_params: 'No disaggregated params in prefill response',
};

/** The stable code of each kind. */
const CODES = {
  not_activated: 'DISAGG_PREFILL_NOT_ACTIVATED',
  prefill: 'DISAGG_PREFILL_FAILED',
  no_disaggregated_params: 'DISAGG_PREFILL_NO_HANDOFF_PARAMS',
} as const satisfies Record<PrefillErrorKind, string>;

/**
 * A failed prefill. The message starts with the kind's fixed text and ends with the worker's
 * own text (`detail`); `cause` keeps the original error so callers above can retry by the
 * type of the root cause.
 *
 * `code`: `DISAGG_PREFILL_FAILED`, `DISAGG_PREFILL_NOT_ACTIVATED` or
 * `DISAGG_PREFILL_NO_HANDOFF_PARAMS`, by kind. {@link PrefillError.is} recognises instances
 * from another copy of the library (ESM next to CommonJS).
 *
 * @example
 * try { await task.wait(); } catch (error) {
 *   if (PrefillError.is(error) && error.kind === 'prefill') retryLater(error.cause);
 * }
 */
export class PrefillError extends DisaggError {
  static override readonly is = branded<PrefillError>('PrefillError');
  declare readonly code: (typeof CODES)[PrefillErrorKind];
  readonly kind: PrefillErrorKind;
  /** The worker's own text, without the kind's prefix (empty for `not_activated`). */
  readonly detail: string;

  constructor(kind: PrefillErrorKind, detail = '', options?: { cause?: unknown }) {
    const prefix = PREFIXES[kind];
    if (prefix === undefined) {
      throw new TypeError(
        `Unknown PrefillError kind ${describeValue(kind)}: expected "not_activated", "prefill" or "no_disaggregated_params"`,
      );
    }
    super(CODES[kind], detail === '' ? prefix : `${prefix}: ${detail}`, options);
    this.kind = kind;
    this.detail = detail;
  }

  /**
   * Turns whatever a prefill rejected with into a `PrefillError` of kind `prefill`: a
   * `PrefillError` is returned as it is; anything else becomes the `cause`, and its text the
   * detail. Non-`Error` values (strings, `undefined`, plain objects) are described safely.
   */
  static from(reason: unknown): PrefillError {
    if (PrefillError.is(reason)) return reason;
    return new PrefillError('prefill', reasonText(reason), { cause: reason });
  }

  /**
   * Whether the same request may succeed if sent again, judged from the cause chain: the
   * library's errors say it themselves (as the failure rules do: a worker that could not be
   * reached, a 5xx or a 429, yes; a deadline, a stream that broke after the worker answered,
   * no); a refused, reset or timed-out connection, a 5xx or 429 answer, is retryable; a
   * cancellation (an `AbortError`), another 4xx answer, or anything unknown is not.
   * Decided by the first cause that says either way.
   */
  get retryable(): boolean {
    const decisive = findCause(this.cause, (cause) => verdict(cause) !== undefined);
    return decisive !== undefined && verdict(decisive) === true;
  }
}

/** What one cause says about a retry: yes, no, or nothing (look further down the chain). */
function verdict(cause: object): boolean | undefined {
  const { name, code, status, retryable } = cause as {
    name?: unknown;
    code?: unknown;
    status?: unknown;
    retryable?: unknown;
  };
  if (name === 'AbortError') return false;
  // The library's own errors say it themselves (a deadline, a broken upstream connection).
  if (DisaggError.is(cause) && typeof retryable === 'boolean') return retryable;
  if (name === 'TimeoutError') return true;
  if (typeof code === 'string' && CONNECTION_ERROR_CODES.has(code)) return true;
  if (typeof status === 'number') return FAILURE_RULES[statusFailureClass(status)].retry;
  return undefined;
}

function reasonText(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  if (typeof reason === 'string') return reason;
  if (typeof reason === 'object' && reason !== null && typeof (reason as { message?: unknown }).message === 'string') {
    return (reason as { message: string }).message;
  }
  return describeValue(reason);
}
