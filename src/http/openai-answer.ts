import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk, wiredData } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import type { FrameSink } from './body-frames.js';
import type { ItemQueue } from './item-queue.js';
import { parseJson } from './json.js';
import { errorText } from './openai-output.js';
import { UpstreamError } from './upstream-error.js';

/** Where a typed-event answer ends: the events that end it, and the name its failure gives. */
export interface AnswerEnd {
  readonly events: ReadonlySet<string>;
  readonly name: string;
}

/**
 * The last stage of reading a worker's answer: frames to the library's items, with what an
 * OpenAI-style answer means. An error chunk, an error event or a failed finish (`abort`,
 * `error`) is an {@link UpstreamError} with the worker's words and status, never a finish; a
 * finish is held until the next frame, so that vLLM's usage chunk after it is folded into the
 * terminal item; with several choices the answer ends at the last one's finish; `[DONE]` before
 * any finish, or an event stream that ends without `[DONE]`, is a failure, never an empty
 * success. Items go to the queue; `abort` ends the call (a failure, or a stop of ours).
 *
 * @internal
 */
export class OpenAIAnswer implements FrameSink {
  readonly #url: string;
  /** A document as an item: an error item, or `{ data }` (the item sent on is made here, with its chunk). */
  readonly #convert: (json: unknown, event?: string) => EngineItem;
  /**
   * The events that end a typed-event answer (Responses' `response.completed`, Anthropic's
   * `message_stop`), which sends no `[DONE]`; undefined for OpenAI's chat and completions.
   */
  readonly #ends: AnswerEnd | undefined;
  /** The end event was read: the answer is whole. */
  #complete = false;
  readonly #context: AsyncEngineContext;
  readonly #queue: ItemQueue<EngineItem>;
  readonly #abort: () => void;
  /** How many choices the answer has (`n`, a list prompt): the stream ends when all have finished. */
  readonly #choices: number;
  /** The choices whose finish has been read, when there are several. */
  readonly #finishedChoices = new Set<number>();
  /**
   * The finish item, held until the next event: OpenAI servers (vLLM) send the usage of a
   * stream in a chunk of its own after the finish chunk, and the library's terminal output
   * carries its usage, so that chunk is folded into it. [DONE] follows at once.
   */
  #held: EngineItem | undefined;
  #terminal = false;

  constructor(options: {
    url: string;
    convert: (json: unknown, event?: string) => EngineItem;
    ends?: AnswerEnd | undefined;
    context: AsyncEngineContext;
    choices: number;
    queue: ItemQueue<EngineItem>;
    abort: () => void;
  }) {
    this.#url = options.url;
    this.#convert = options.convert;
    this.#ends = options.ends;
    this.#context = options.context;
    this.#choices = options.choices;
    this.#queue = options.queue;
    this.#abort = options.abort;
  }

  /** The SSE stream's `[DONE]`: the end, if the answer has finished. */
  done(): void {
    if (this.#queue.finished) return;
    if (!this.#terminal) {
      // Nothing finished: relaying this as the end would be an empty success.
      this.#fail(
        new UpstreamError('protocol', `${this.#url} sent [DONE] before its answer finished`, { url: this.#url }),
      );
      return;
    }
    this.#release();
    // The rest of the body is read and ignored, so that the connection goes back to the pool.
    this.#queue.finish();
  }

  /** An SSE `error` event: the worker failed the stream. */
  errorEvent(data: string): void {
    if (this.#queue.finished) return;
    const json = safeParse(data);
    this.#fail(
      new UpstreamError('status', `${this.#url} sent an error event: ${errorText(json) ?? data}`, {
        url: this.#url,
        body: data,
        ...statusOf(json),
      }),
    );
  }

  /** A whole body that was empty: a failure. */
  emptyBody(): void {
    if (this.#queue.finished) return;
    this.#fail(new UpstreamError('protocol', `${this.#url} answered an empty body`, { url: this.#url }));
  }

  /** One JSON document of the answer (`event`: its SSE event's name). Nothing is added once the answer has finished. */
  frame(text: string, form: 'event' | 'body', event?: string): void {
    if (this.#queue.finished) return;
    let json: unknown;
    try {
      json = parseJson(text);
    } catch (error) {
      this.#fail(UpstreamError.fromFailure(this.#url, error, { afterResponse: true }));
      return;
    }
    const item = this.#convert(json, event);
    if (Annotated.isError(item)) {
      // The worker's own error chunk: its text and its status (a 400 in a 200 stream is still
      // the client's mistake), as an UpstreamError the caller can inspect.
      this.#fail(
        new UpstreamError('status', `${this.#url} failed: ${Annotated.errorMessage(item)}`, {
          url: this.#url,
          body: text,
          ...statusOf(json),
        }),
      );
      return;
    }
    const output = item.data;
    const failed = output?.finish_reason;
    if (FinishReason.isFailure(failed) && !(FinishReason.isCancelled(failed) && this.#context.isStopped())) {
      // The worker dropped the request (`abort`) or failed it: a failure, never a finish the
      // client could take for a success. (A cancellation we asked for is ours, not its.)
      const why = FinishReason.isError(failed) ? `failed: ${failed.error}` : 'aborted the request';
      this.#fail(new UpstreamError('status', `${this.#url} ${why}`, { url: this.#url, body: text, ...statusOf(json) }));
      return;
    }
    const chunk: WireChunk =
      event === undefined
        ? { form, text, json: json as Record<string, unknown> }
        : { form, text, json: json as Record<string, unknown>, event };
    const held = this.#held;
    const ends = this.#ends !== undefined && form === 'event' && this.#ends.events.has(event ?? '');
    if (held !== undefined && (isUsageOnly(output) || this.#ends !== undefined)) {
      // vLLM's usage chunk after the finish chunk; whatever a typed-event answer sends after
      // its finish up to its end (Anthropic's message_stop after the message_delta, a ping):
      // one item, every chunk on the wire.
      const usage = output?.completion_usage ?? (held.data as LLMEngineOutput).completion_usage;
      const folded = Annotated.withWire(
        { ...held, data: { ...(held.data as LLMEngineOutput), completion_usage: usage } },
        [...(Annotated.wire(held) ?? []), chunk],
      );
      if (this.#ends === undefined) {
        this.#held = undefined;
        this.#queue.push(folded);
      } else {
        // Still held until the end event.
        this.#held = folded;
        if (ends) this.#completed();
      }
      return;
    }
    this.#release();
    // The converters answer `{ data }` or an error item: the item as it goes on, with its chunk.
    const wired = wiredData(output, [chunk]);
    const reason = output?.finish_reason;
    if (reason !== undefined && reason !== null && !this.#choiceFinished(output as LLMEngineOutput)) {
      // One choice of several has finished: its chunk goes on as it is, the answer does not end.
      wired.data = { ...(output as LLMEngineOutput), finish_reason: null };
    } else if (reason !== undefined && reason !== null) {
      this.#terminal = true;
      this.#held = wired;
      // Responses' response.completed is both the finish and the end.
      if (ends) this.#completed();
      return;
    }
    this.#queue.push(wired);
    if (ends) {
      // An end event before any finish: relaying this as the end would be an empty success.
      this.#fail(
        new UpstreamError('protocol', `${this.#url} sent ${event} before its answer finished`, { url: this.#url }),
      );
    }
  }

  /** A typed-event answer's end event was read: the answer is whole, the rest of the body says nothing. */
  #completed(): void {
    this.#complete = true;
    this.#release();
    this.#queue.finish();
  }

  /**
   * The body ended (after its last frame). A whole body is the answer as it stands; an event
   * stream must have finished.
   */
  bodyEnded(mode: 'sse' | 'json'): void {
    if (this.#queue.finished) return;
    this.#release();
    if (mode === 'sse' && !(this.#ends === undefined ? this.#terminal : this.#complete)) {
      this.#fail(
        new UpstreamError('connection', `${this.#url} ended its event stream before ${this.#ends?.name ?? '[DONE]'}`, {
          url: this.#url,
          networkCode: 'ECONNRESET',
          afterResponse: true,
        }),
      );
      return;
    }
    this.#queue.finish();
  }

  /** A read failed: a stop of ours ends the stream as cancelled; anything else is the worker's failure. */
  broke(error: unknown, abort: boolean): void {
    if (this.#queue.finished) return;
    if (abort || this.#context.isStopped()) {
      this.#release();
      this.#queue.push(Annotated.fromData(LLMEngineOutput.cancelled()));
      this.#end();
      return;
    }
    this.#fail(UpstreamError.fromFailure(this.#url, error, { afterResponse: true }));
  }

  /** The reader closed the stream: no more items, the call ends now. */
  closed(): void {
    this.#end();
  }

  /** Whether the finish in `output` ends the answer: the last of its choices to finish. */
  #choiceFinished(output: LLMEngineOutput): boolean {
    if (FinishReason.isFailure(output.finish_reason)) return true;
    this.#finishedChoices.add(typeof output.index === 'number' ? output.index : this.#finishedChoices.size);
    return this.#finishedChoices.size >= this.#choices;
  }

  /** Delivers the held finish item as it is. */
  #release(): void {
    if (this.#held === undefined) return;
    this.#queue.push(this.#held);
    this.#held = undefined;
  }

  #fail(error: UpstreamError): void {
    this.#release();
    this.#queue.push(Annotated.fromError<LLMEngineOutput>(error));
    this.#end();
  }

  #end(): void {
    if (this.#queue.finished) return;
    this.#queue.finish();
    // Ends the call now, whatever is in flight (the connection is closed, not pooled).
    this.#abort();
  }
}

/** A chunk that says nothing but the usage (`choices: []` with `usage`). */
function isUsageOnly(data: LLMEngineOutput | undefined): boolean {
  const { completion_usage: usage, finish_reason: reason, text } = data ?? {};
  return (
    usage !== undefined &&
    usage !== null &&
    (reason === undefined || reason === null) &&
    (text === undefined || text === '')
  );
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The status an error chunk or event names (`{error: {code: 400}}`, `{code: 400}`), if it is an HTTP one. */
function statusOf(json: unknown): { status?: number } {
  if (typeof json !== 'object' || json === null) return {};
  const { error, code } = json as { error?: unknown; code?: unknown };
  const named = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : code;
  const status = typeof named === 'string' ? Number(named) : named;
  return typeof status === 'number' && Number.isInteger(status) && status >= 400 && status < 600 ? { status } : {};
}
