import { branded, DisaggError } from '../util/disagg-error.js';
import { markWorkerText } from '../util/worker-text.js';
import type { LLMEngineOutput } from './llm-engine-output.js';

/**
 * One item of an engine's response stream: data, an annotation, or an error, in the
 * reference's JSON shape (`data`, `id`, `event`, `comment`, `error`).
 *
 * An error item has `event: "error"`. It carries its message twice so that every reader
 * understands it: in `error` (newer readers) and in `comment` (older readers).
 */
export interface Annotated<T> {
  data?: T | undefined;
  id?: string | undefined;
  event?: string | undefined;
  comment?: string[] | undefined;
  error?: string | AnnotatedErrorBody | undefined;
}

/** The object form of `Annotated.error` that some producers send. */
export interface AnnotatedErrorBody {
  message: string;
  [field: string]: unknown;
}

/**
 * The error that {@link Annotated.err} returns for an error item that does not carry an
 * in-process `Error` (for example one that crossed the wire as JSON): the item's text, an
 * engine's words (kept out of the library's log lines but for their length).
 * `code`: `DISAGG_STREAM_ERROR`.
 */
export class AnnotatedError extends DisaggError {
  static override readonly is = branded<AnnotatedError>('AnnotatedError');
  declare readonly code: 'DISAGG_STREAM_ERROR';

  constructor(message: string) {
    super('DISAGG_STREAM_ERROR', message);
    markWorkerText(this, message);
  }
}

/**
 * Where an error item created in this process keeps the original `Error`. Registered with
 * `Symbol.for` so that ESM and CommonJS copies of the library agree on it; non-enumerable so
 * that it never reaches JSON.
 */
const ORIGINAL_ERROR = Symbol.for('disagg.annotated.originalError');

const UNKNOWN_ERROR = 'unknown error';

/**
 * A data item. An engine output written in place is typed as one (its `finish_reason` read as
 * a `FinishReason`, without `as const`); anything else keeps its own type.
 *
 * @example
 * Annotated.fromData(LLMEngineOutput.length()); // { data: { token_ids: [], finish_reason: 'length' } }
 * Annotated.fromData({ token_ids: [], finish_reason: 'length' }); // an EngineItem
 */
function fromData(data: LLMEngineOutput): Annotated<LLMEngineOutput>;
function fromData<T>(data: T): Annotated<T>;
function fromData<T>(data: T): Annotated<T> {
  return { data };
}

/**
 * An error item. Given an `Error`, the item keeps it (non-enumerably) so that
 * {@link Annotated.err} returns the very same object in this process, with its `cause`
 * chain and type; its message is also written into the JSON fields.
 *
 * @example
 * const item = Annotated.fromError(new Error('decode worker lost'));
 * JSON.stringify(item); // {"event":"error","comment":["decode worker lost"],"error":"decode worker lost"}
 */
function fromError<T = never>(error: string | Error): Annotated<T> {
  const message = typeof error === 'string' ? error : error.message || error.name || UNKNOWN_ERROR;
  const item: Annotated<T> = { event: 'error', comment: [message], error: message };
  if (typeof error !== 'string') {
    Object.defineProperty(item, ORIGINAL_ERROR, { value: error, enumerable: false });
  }
  return item;
}

/**
 * True for an error item: `event` is `"error"` or an `error` field is present. Safe on any
 * value, including `null` and items read from the wire.
 */
function isError(item: unknown): boolean {
  if (typeof item !== 'object' || item === null) return false;
  const candidate = item as Annotated<unknown>;
  return candidate.event === 'error' || (candidate.error !== undefined && candidate.error !== null);
}

/** The text of an error item, from `error` (string or `{message}`), else `comment`. */
function errorMessage(item: Annotated<unknown>): string {
  const { error, comment } = item;
  if (typeof error === 'string' && error !== '') return error;
  if (typeof error === 'object' && error !== null && typeof error.message === 'string') {
    return error.message;
  }
  if (Array.isArray(comment) && comment.length > 0) return comment.join(', ');
  return UNKNOWN_ERROR;
}

/**
 * The error an item carries, or `undefined` for a non-error item. An item made by
 * {@link Annotated.fromError} in this process returns the original `Error`; any other error
 * item (for example one parsed from JSON) returns an {@link AnnotatedError} with its message.
 */
function err(item: unknown): Error | undefined {
  if (!isError(item)) return undefined;
  const original = (item as { [ORIGINAL_ERROR]?: unknown })[ORIGINAL_ERROR];
  if (original instanceof Error) return original;
  return new AnnotatedError(errorMessage(item as Annotated<unknown>));
}

/**
 * One piece of what a worker sent for an item, as it sent it: an SSE event's data (`event`,
 * with its name where it had one) or a whole JSON body (`body`). `text` is the exact text when the JSON is unchanged; a relay
 * that had to change `json` leaves it undefined and serialises `json` instead.
 */
export interface WireChunk {
  readonly form: 'event' | 'body';
  /** The SSE event's name (`event: response.completed`), for an event that had one. */
  readonly event?: string | undefined;
  readonly text: string | undefined;
  readonly json: Record<string, unknown>;
}

/**
 * Where an item read from a worker keeps what the worker sent for it. Registered with
 * `Symbol.for` (ESM and CommonJS copies agree); non-enumerable, so it never reaches JSON or a
 * comparison of items.
 */
const WIRE = Symbol.for('disagg.annotated.wire');

/**
 * `item` with what a worker sent for it (see {@link WireChunk}), so that a relay can send the
 * worker's own JSON on instead of re-creating it from the item. Returns `item`.
 */
function withWire<T>(item: Annotated<T>, chunks: readonly WireChunk[]): Annotated<T> {
  Object.defineProperty(item, WIRE, { value: chunks, enumerable: false, configurable: true });
  return item;
}

/**
 * A data item born with what a worker sent for it: what {@link withWire} makes of
 * `{ data }`, as a class whose private field holds the chunks and whose prototype reads them
 * under the same symbol. `Object.defineProperty` costs a few hundred nanoseconds and the
 * transport makes one such item per token; a field costs a few. Like the symbol, the chunks
 * stay out of JSON, spreads and comparisons of items (`toEqual` ignores the class).
 */
class WiredItem<T> implements Annotated<T> {
  declare data?: T;
  readonly #wire: readonly WireChunk[];

  constructor(data: T | undefined, chunks: readonly WireChunk[]) {
    if (data !== undefined) this.data = data;
    this.#wire = chunks;
  }

  get [WIRE](): readonly WireChunk[] {
    return this.#wire;
  }
}

/**
 * `{ data }` with what a worker sent for it: the transport's item per chunk read. The same
 * as `withWire({ data }, chunks)`, cheaper.
 *
 * @internal
 */
export function wiredData<T>(data: T | undefined, chunks: readonly WireChunk[]): Annotated<T> {
  return new WiredItem(data, chunks);
}

/** What a worker sent for `item`, if it came from one (see {@link withWire}). */
function wire(item: unknown): readonly WireChunk[] | undefined {
  if (typeof item !== 'object' || item === null) return undefined;
  return (item as { [WIRE]?: readonly WireChunk[] })[WIRE];
}

/** Helpers for {@link Annotated} items. */
export const Annotated = {
  fromData,
  fromError,
  isError,
  err,
  errorMessage,
  withWire,
  wire,
} as const;

// Defined here, beside Annotated, so that llm-engine-output need not import this module
// (which imports its LLMEngineOutput type): the two files would otherwise import each other.
/**
 * One item of an engine's response stream: an {@link Annotated} {@link LLMEngineOutput}. What
 * every `Engine` yields, `forwardDecode` and `disaggregate` hand out, and `httpEngine` reads.
 */
export type EngineItem = Annotated<LLMEngineOutput>;
