import { describeValue } from '../util/describe-value.js';

/**
 * Why a generated sequence ended, as the reference serialises it on the wire.
 *
 * JSON forms: `"eos"`, `"length"`, `"stop"`, `"cancelled"`, `"content_filter"`, and
 * `{"error": "<message>"}` for an engine failure. The display form of an error is
 * `"error: <message>"`.
 */
export type FinishReason = 'eos' | 'length' | 'stop' | 'cancelled' | 'content_filter' | { error: string };

/**
 * The finish reasons an OpenAI-compatible response may carry: OpenAI's own (`stop`, `length`,
 * `content_filter`), and the words vLLM and SGLang use for a sequence that failed: `abort`
 * (dropped, cancelled) and `error`. The last two are never a success; a relay that must not
 * show a failure as a finish (as `disagg serve` does not) turns them into an error instead.
 */
export type OpenAIFinishReason = 'stop' | 'length' | 'content_filter' | 'abort' | 'error';

const SIMPLE: ReadonlySet<string> = new Set(['eos', 'length', 'stop', 'cancelled', 'content_filter']);
const ERROR_PREFIX = 'error: ';

function isErrorReason(value: unknown): value is { error: string } {
  return typeof value === 'object' && value !== null && typeof (value as { error?: unknown }).error === 'string';
}

/**
 * Reads a finish reason in any form the reference produces: the JSON value (`"eos"`,
 * `{"error": "boom"}`), the display string (`"error: boom"`), or the legacy alias `"abort"`
 * for `cancelled`.
 *
 * @throws {TypeError} when the value is none of these; the message names what was expected.
 * @example
 * FinishReason.parse('error: out of memory'); // { error: 'out of memory' }
 */
function parse(value: unknown): FinishReason {
  if (typeof value === 'string') {
    if (SIMPLE.has(value)) return value as FinishReason;
    if (value === 'abort') return 'cancelled';
    if (value.startsWith(ERROR_PREFIX)) return { error: value.slice(ERROR_PREFIX.length) };
  } else if (isErrorReason(value)) {
    return { error: value.error };
  }
  throw new TypeError(
    `Invalid finish reason ${describeValue(value)}: expected one of "eos", "length", "stop", "cancelled", "content_filter", "abort", "error: <message>" or {"error": "<message>"}`,
  );
}

/** Like {@link parse}, but returns `undefined` instead of throwing. */
function tryParse(value: unknown): FinishReason | undefined {
  try {
    return parse(value);
  } catch {
    return undefined;
  }
}

/**
 * The reference's display form: the plain name, or `"error: <message>"`.
 *
 * @example
 * FinishReason.format({ error: 'boom' }); // 'error: boom'
 */
function format(reason: FinishReason): string {
  return typeof reason === 'string' ? reason : `${ERROR_PREFIX}${reason.error}`;
}

/**
 * Maps to an OpenAI-compatible `finish_reason`, failures as failures: `eos` and `stop` become
 * `stop`, `length` and `content_filter` stay, `cancelled` is `abort` and `{error}` is
 * `error`, as vLLM and SGLang answer them (never `stop`: a failure reported as a finish is a
 * success invented). Check {@link FinishReason.isFailure} first to answer a failure with an
 * error rather than a finish.
 *
 * @example
 * FinishReason.toOpenAI('eos'); // 'stop'
 * FinishReason.toOpenAI({ error: 'out of memory' }); // 'error'
 */
function toOpenAI(reason: FinishReason): OpenAIFinishReason {
  if (reason === 'length') return 'length';
  if (reason === 'content_filter') return 'content_filter';
  if (reason === 'cancelled') return 'abort';
  if (isErrorReason(reason)) return 'error';
  return 'stop';
}

/**
 * True for `cancelled` (and its legacy alias `"abort"`). Accepts any value, so it can
 * classify unvalidated wire data.
 */
function isCancelled(reason: unknown): boolean {
  return reason === 'cancelled' || reason === 'abort';
}

/**
 * True for the reasons that mean the sequence failed rather than finished: `{error}` and
 * `cancelled`. Accepts any value, so it can classify unvalidated wire data.
 */
function isFailure(reason: unknown): boolean {
  return isCancelled(reason) || isErrorReason(reason);
}

/** Helpers for {@link FinishReason} values. */
export const FinishReason = {
  parse,
  tryParse,
  format,
  toOpenAI,
  isFailure,
  isCancelled,
  isError: isErrorReason,
} as const;
