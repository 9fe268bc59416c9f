import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import type { Dispatcher } from 'undici';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { type EngineItem, LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { elementsOf } from '../protocol/request-counts.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import type { Engine } from '../runtime/engine.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { describeValue } from '../util/describe-value.js';
import { joinUrl } from '../util/url.js';
import { parseJson, stringifyJson } from './json.js';
import { errorText, generateReader, outputFromOpenAI } from './openai-output.js';
import { type BodySink, UpstreamCall, type UpstreamHead } from './upstream-call.js';
import { UpstreamError } from './upstream-error.js';

type Step = IteratorResult<EngineItem, undefined>;

/** Which HTTP API an engine calls. `auto`: chat completions for a body with `messages`, else completions. */
export type HttpApi = 'auto' | 'completions' | 'chat' | 'generate';

const PATHS: Record<Exclude<HttpApi, 'auto'>, string> = {
  completions: '/v1/completions',
  chat: '/v1/chat/completions',
  generate: '/generate',
};

/** Options of {@link httpEngine}. */
export interface HttpEngineOptions<W> {
  /**
   * The worker's base URL (`http://host:port`), or how to read it from the worker chosen for
   * the leg. Default: the worker's `url` field.
   */
  url?: string | ((worker: W | undefined) => string);
  /** Which API to call; `auto` by default. */
  api?: HttpApi;
  /** The undici dispatcher (connection pool); undici's global keep-alive agent by default. */
  dispatcher?: Dispatcher;
  /**
   * Extra request headers (an API key, say), or a function of the worker that gives them for
   * each call (trace context, say: called once per leg call, as the call is made).
   */
  headers?: Record<string, string> | ((worker: W | undefined) => Record<string, string>);
  /** The header that carries the request id, the same on both legs; `x-request-id` by default. */
  requestIdHeader?: string;
}

/**
 * An engine that calls an OpenAI-compatible worker (vLLM, SGLang) over HTTP and streams its
 * answer as `Annotated<LLMEngineOutput>` items.
 *
 * - The body is sent as JSON with exact 64-bit integers (a `bigint` `bootstrap_room` stays
 *   exact) and the context's id in `x-request-id`; the context's `signal` aborts the call, so
 *   stopping the context stops the worker.
 * - A streamed answer (`text/event-stream`) is read with eventsource-parser, one item per
 *   chunk, until `data: [DONE]`; a JSON answer (the one-token prefill leg) is one item, with
 *   vLLM's `kv_transfer_params` as `disaggregated_params`. Integers above 2^53 - 1 in answers
 *   are read as `bigint`s.
 * - Before the stream: an error status rejects with an {@link UpstreamError} keeping the
 *   status and body (4xx not retryable, 5xx retryable), as does a connection failure (with its
 *   code, retryable). After it started: a broken connection, an `error` event, an error chunk
 *   or a stream cut before `[DONE]` is one error item carrying the `UpstreamError`, then the
 *   end; a stopped context ends the stream with a `cancelled` item.
 * - Closing the stream (`return()`) destroys the response body at once, which ends the call.
 *
 * @example
 * const engine = httpEngine<{ url: string }>(); // the worker chosen by a WorkerPool has the url
 * disaggregate({ ..., connector: vllmNixl, prefill: engine, decode: engine, prefillWorkers, decodeWorkers });
 */
export function httpEngine<W = { url: string }>(options: HttpEngineOptions<W> = {}): Engine<W> {
  const api = options.api ?? 'auto';
  if (api !== 'auto' && !(api in PATHS)) {
    throw new TypeError(`Unknown api ${describeValue(api)}: expected 'auto', 'completions', 'chat' or 'generate'`);
  }
  const idHeader = options.requestIdHeader ?? 'x-request-id';
  const headersOption = options.headers ?? {};
  return async (body, context, worker) => {
    const extraHeaders = typeof headersOption === 'function' ? headersOption(worker) : headersOption;
    const route = api === 'auto' ? (Array.isArray(body.messages) ? 'chat' : 'completions') : api;
    const url = joinUrl(baseUrl(options.url, worker), PATHS[route]);
    const streaming = body.stream === true;
    const call = UpstreamCall.start(url, {
      headers: {
        ...extraHeaders,
        'content-type': 'application/json',
        accept: streaming ? 'text/event-stream' : 'application/json',
        [idHeader]: context.id,
      },
      body: stringifyJson(body),
      context,
      ...(options.dispatcher === undefined ? {} : { dispatcher: options.dispatcher }),
    });
    let response: UpstreamHead;
    try {
      response = await call.head;
    } catch (error) {
      throw isAbort(error) ? error : UpstreamError.fromFailure(url, error);
    }
    if (response.statusCode >= 400) {
      let text = '';
      try {
        text = await call.text();
      } catch {
        // The status says enough.
      }
      throw UpstreamError.fromStatus(url, response.statusCode, text);
    }
    const contentType = String(response.headers['content-type'] ?? '');
    const convert = route === 'generate' ? generateReader() : outputFromOpenAI;
    const mode = contentType.includes('text/event-stream') ? 'sse' : 'json';
    return new ResponseStream(new BodyItems(call, url, mode, convert, context, elementsOf(body)), context);
  };
}

function baseUrl<W>(option: HttpEngineOptions<W>['url'], worker: W | undefined): string {
  const url =
    typeof option === 'function' ? option(worker) : (option ?? (worker as { url?: unknown } | undefined)?.url);
  if (typeof url !== 'string' || url === '') {
    throw new TypeError(
      `httpEngine needs the worker's base URL: pass { url } (a string, or a function of the worker), or give each worker a url; got ${describeValue(url)}`,
    );
  }
  return url;
}

function isAbort(error: unknown): boolean {
  const { name, code } = (error ?? {}) as { name?: unknown; code?: unknown };
  return name === 'AbortError' || code === 'UND_ERR_ABORTED';
}

const DONE: Step = Object.freeze({ value: undefined, done: true }) as Step;

/** Items read ahead of the reader before the worker's socket is left unread (backpressure). */
const READ_AHEAD = 64;

/**
 * The items of one response body: SSE events or one JSON document. The body is pushed in as
 * undici reads it ({@link BodySink}) and parsed at once; readers take items in call order (a
 * reader with several calls in flight gets them in the order it asked). Past
 * {@link READ_AHEAD} unread items the call is paused, so a slow reader slows the worker's
 * socket rather than filling memory. `return()` ends the call at once, even while a read is
 * waiting on the network (that read then answers done).
 */
class BodyItems implements AsyncIterableIterator<EngineItem>, BodySink {
  readonly #call: UpstreamCall;
  readonly #url: string;
  readonly #json: boolean;
  readonly #convert: (json: unknown) => EngineItem;
  readonly #context: AsyncEngineContext;
  readonly #decoder = new TextDecoder();
  readonly #parser: EventSourceParser | undefined;
  #items: EngineItem[] = [];
  #at = 0;
  /** Calls waiting for an item, first asked first: there are some only while no item is queued. */
  readonly #waiting: Array<(step: Step) => void> = [];
  /**
   * The finish item, held until the next event: OpenAI servers (vLLM) send the usage of a
   * stream in a chunk of its own after the finish chunk, and the library's terminal output
   * carries its usage, so that chunk is folded into it. [DONE] follows at once.
   */
  #held: EngineItem | undefined;
  #text = '';
  /** No item will be added: [DONE], the end of the body, a failure or a close. */
  #finished = false;
  #terminal = false;
  /** How many choices the answer has (`n`, a list prompt): the stream ends when all have finished. */
  readonly #choices: number;
  /** The choices whose finish has been read, when there are several. */
  readonly #finishedChoices = new Set<number>();
  /** Closed by `return()`: later calls are done at once. */
  #closed = false;

  constructor(
    call: UpstreamCall,
    url: string,
    mode: 'sse' | 'json',
    convert: (json: unknown) => EngineItem,
    context: AsyncEngineContext,
    choices: number,
  ) {
    this.#call = call;
    this.#choices = choices;
    this.#url = url;
    this.#json = mode === 'json';
    this.#convert = convert;
    this.#context = context;
    this.#parser = mode === 'sse' ? createParser({ onEvent: (event) => this.#event(event) }) : undefined;
    call.attach(this);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    if (this.#closed) return Promise.resolve(DONE);
    if (this.#at < this.#items.length) {
      const value = this.#take();
      // Half way down, so that a reader just behind does not pause and resume on every item.
      if (this.#items.length - this.#at <= READ_AHEAD / 2) this.#call.resume();
      return Promise.resolve({ value, done: false });
    }
    if (this.#finished) return Promise.resolve(DONE);
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      this.#call.resume();
    });
  }

  return(): Promise<Step> {
    this.#closed = true;
    this.#items = [];
    this.#at = 0;
    this.#close();
    // Reads in flight answer done, in call order.
    for (const resolve of this.#waiting.splice(0)) resolve(DONE);
    return Promise.resolve(DONE);
  }

  // BodySink: undici's read loop calls these.

  data(chunk: Buffer): void {
    if (this.#finished) return; // after [DONE]: the rest of the body says nothing
    if (this.#json) this.#text += this.#decoder.decode(chunk, { stream: true });
    else (this.#parser as EventSourceParser).feed(this.#decoder.decode(chunk, { stream: true }));
    this.#deliver();
    // Once [DONE] is read the rest of the body is read on whatever the reader does, so that
    // the connection goes back to the pool.
    if (this.#finished) this.#call.resume();
    else if (this.#items.length - this.#at >= READ_AHEAD) this.#call.pause();
  }

  end(): void {
    if (!this.#finished) this.#bodyEnded();
    this.#deliver();
  }

  error(error: Error): void {
    this.#broke(error);
    this.#deliver();
  }

  #take(): EngineItem {
    const value = this.#items[this.#at++] as EngineItem;
    if (this.#at === this.#items.length) {
      this.#items = [];
      this.#at = 0;
    }
    return value;
  }

  /** Answers waiting calls with what is queued, and with done once nothing more will come. */
  #deliver(): void {
    const waiting = this.#waiting;
    while (waiting.length > 0 && this.#at < this.#items.length) {
      (waiting.shift() as (step: Step) => void)({ value: this.#take(), done: false });
    }
    if (this.#finished && this.#at === this.#items.length) for (const resolve of waiting.splice(0)) resolve(DONE);
  }

  #event(event: EventSourceMessage): void {
    if (this.#finished) return;
    if (event.data === '[DONE]') {
      if (!this.#terminal) {
        // Nothing finished: relaying this as the end would be an empty success.
        this.#fail(
          new UpstreamError('protocol', `${this.#url} sent [DONE] before its answer finished`, { url: this.#url }),
        );
        return;
      }
      this.#release();
      // The rest of the body is read and ignored, so that the connection goes back to the pool.
      this.#finished = true;
      return;
    }
    if (event.event === 'error') {
      const json = safeParse(event.data);
      this.#fail(
        new UpstreamError('status', `${this.#url} sent an error event: ${errorText(json) ?? event.data}`, {
          url: this.#url,
          body: event.data,
          ...statusOf(json),
        }),
      );
      return;
    }
    this.#push(event.data, 'event');
  }

  #push(text: string, form: 'event' | 'body'): void {
    let json: unknown;
    try {
      json = parseJson(text);
    } catch (error) {
      this.#fail(UpstreamError.fromFailure(this.#url, error, { afterResponse: true }));
      return;
    }
    const item = this.#convert(json);
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
    const chunk = { form, text, json: json as Record<string, unknown> };
    const held = this.#held;
    if (held !== undefined && isUsageOnly(output)) {
      // vLLM's usage chunk after the finish chunk: one item, both chunks on the wire.
      this.#held = undefined;
      this.#items.push(
        Annotated.withWire(
          { ...held, data: { ...(held.data as LLMEngineOutput), completion_usage: output?.completion_usage } },
          [...(Annotated.wire(held) ?? []), chunk],
        ),
      );
      return;
    }
    this.#release();
    Annotated.withWire(item, [chunk]);
    const reason = output?.finish_reason;
    if (reason !== undefined && reason !== null && !this.#choiceFinished(output as LLMEngineOutput)) {
      // One choice of several has finished: its chunk goes on as it is, the answer does not end.
      item.data = { ...(output as LLMEngineOutput), finish_reason: null };
    } else if (reason !== undefined && reason !== null) {
      this.#terminal = true;
      this.#held = item;
      return;
    }
    this.#items.push(item);
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
    this.#items.push(this.#held);
    this.#held = undefined;
  }

  #bodyEnded(): void {
    if (this.#json) {
      this.#text += this.#decoder.decode();
      if (this.#text.trim() === '') {
        this.#fail(new UpstreamError('protocol', `${this.#url} answered an empty body`, { url: this.#url }));
        return;
      }
      this.#push(this.#text, 'body');
      this.#release();
      this.#finished = true;
      return;
    }
    // A last event without its closing blank line is still an event (blank lines after a
    // complete one add nothing).
    (this.#parser as EventSourceParser).feed('\n\n');
    if (this.#finished) return;
    this.#release();
    if (!this.#finished && !this.#terminal) {
      this.#fail(
        new UpstreamError('connection', `${this.#url} ended its event stream before [DONE]`, {
          url: this.#url,
          networkCode: 'ECONNRESET',
          afterResponse: true,
        }),
      );
      return;
    }
    this.#finished = true;
  }

  /** A read failed: a stop of ours ends the stream as cancelled; anything else is the worker's failure. */
  #broke(error: unknown): void {
    if (this.#finished) return;
    if (isAbort(error) || this.#context.isStopped()) {
      this.#release();
      this.#items.push(Annotated.fromData(LLMEngineOutput.cancelled()));
      this.#close();
      return;
    }
    this.#fail(UpstreamError.fromFailure(this.#url, error, { afterResponse: true }));
  }

  #fail(error: UpstreamError): void {
    this.#release();
    this.#items.push(Annotated.fromError<LLMEngineOutput>(error));
    this.#close();
  }

  #close(): void {
    if (this.#finished) return;
    this.#finished = true;
    // Ends the call now, whatever is in flight (the connection is closed, not pooled).
    this.#call.abort();
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
