// A worker's own words inside an error: what a worker answered may echo the prompt (vLLM's
// context-length and validation errors do), so a client may read them but no log line may.
import { errorCode, findCause } from './cause-chain.js';

/**
 * Where an error keeps the worker's words its message holds. Registered with `Symbol.for` so
 * that copies of the library agree on it; non-enumerable, so that it never reaches JSON or a
 * serializer that copies an error's fields.
 */
const WORKER_TEXT = Symbol.for('disagg.error.workerText');

/**
 * Marks `text`, a part of `error`'s message, as a worker's own words: kept out of every log line
 * ({@link loggable}, {@link safeMessage}), still in the message a client is told. Empty text
 * marks nothing.
 *
 * @example
 * const error = new Error(`${url} answered 400: ${said}`);
 * markWorkerText(error, said);
 */
export function markWorkerText(error: Error, text: string): void {
  if (text === '') return;
  Object.defineProperty(error, WORKER_TEXT, { value: text, enumerable: false, configurable: true });
}

/** The worker's words marked on `error` itself, if any. */
function workerTextOf(error: object): string | undefined {
  const text = (error as { [WORKER_TEXT]?: unknown })[WORKER_TEXT];
  return typeof text === 'string' ? text : undefined;
}

/** The worker's words marked anywhere in `error`'s cause chain (eight deep at most), longest first. */
function workerTextsIn(error: unknown): string[] {
  const texts: string[] = [];
  findCause(error, (candidate) => {
    const text = workerTextOf(candidate);
    if (text !== undefined && !texts.includes(text)) texts.push(text);
    return false;
  });
  return texts.sort((a, b) => b.length - a.length);
}

/** `text` with each of the worker's words in it replaced by their length. */
function masked(text: string, texts: readonly string[]): string {
  let out = text;
  for (const said of texts) out = out.replaceAll(said, `[the worker's text: ${said.length} characters]`);
  return out;
}

/** An error's message, or what stands for a value thrown that is no error. */
const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/**
 * `error`'s message as a log line may carry it: the worker's words anywhere in its cause chain
 * (a `PrefillError`'s message holds its cause's) replaced by their length, the rest kept.
 *
 * @example safeMessage(UpstreamError.fromStatus(url, 400, '{"error":{"message":"too long: <prompt>"}}')); // 'http://… answered 400: [the worker's text: 19 characters]'
 */
export function safeMessage(error: unknown): string {
  return masked(messageOf(error), workerTextsIn(error));
}

/** How a log line carries an error that is a worker's answer: what it is, never what the worker said, and no stack. */
export interface WorkerAnswerLog {
  /** The error's class (`UpstreamError`, `PrefillError`, ...). */
  type: string;
  /** Its message, with the worker's words replaced by their length. */
  error: string;
  /** Its code, or its first cause's (`DISAGG_UPSTREAM_STATUS`, ...). */
  code?: string;
  /** The HTTP status the worker answered with, when it answered one. */
  status?: number;
  /** How long the worker's words were, in characters. */
  workerTextLength: number;
}

/**
 * What a log line carries of `value`: an error holding a worker's answer in its cause chain (a
 * worker's 4xx or 5xx, its error event, a prefill that failed with one) as a
 * {@link WorkerAnswerLog}: its type, code, status and the length of the worker's words, not the
 * words (they may echo the prompt) and no stack (a worker's answer is expected, not a crash).
 * Anything else is returned as it is.
 *
 * @example
 * logger.warn({ err: loggable(error) }, 'Retrying');
 */
export function loggable(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const texts = workerTextsIn(value);
  if (texts.length === 0) return value;
  const code = errorCode(value);
  const status = (
    findCause(value, (candidate) => typeof (candidate as { status?: unknown }).status === 'number') as
      | { status: number }
      | undefined
  )?.status;
  const name = (value as { name?: unknown }).name;
  return {
    type: typeof name === 'string' ? name : 'Error',
    error: masked(messageOf(value), texts),
    ...(code === undefined ? {} : { code }),
    ...(status === undefined ? {} : { status }),
    workerTextLength: texts[0]?.length ?? 0,
  } satisfies WorkerAnswerLog;
}

/** Whether a log line's fields hold a value {@link loggable} would change (checked before copying them). */
export function holdsWorkerText(fields: object): boolean {
  for (const key in fields) {
    const value = (fields as Record<string, unknown>)[key];
    if (typeof value === 'object' && value !== null && workerTextsIn(value).length > 0) return true;
  }
  return false;
}

/**
 * An error as an info line carries an expected one (a request refused, a break recovered
 * from): its words and its code, not the stack, which says nothing about the request and
 * makes one line twenty (a worker's own words in it replaced by their length: {@link safeMessage}).
 * A warn or error line keeps the whole error.
 *
 * @example briefly(Object.assign(new Error('queue full'), { code: 'DISAGG_OVERLOADED' })); // { error: 'queue full', code: 'DISAGG_OVERLOADED' }
 */
export function briefly(error: unknown): { error: string; code?: string } {
  const code = errorCode(error);
  return { error: safeMessage(error), ...(code === undefined ? {} : { code }) };
}
