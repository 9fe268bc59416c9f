import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { type Dispatcher, request } from 'undici';
import type { Engine } from '../flow/disaggregate.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { type EngineItem, LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { CallOrder } from '../util/call-order.js';
import { ignore } from '../util/close-quietly.js';
import { describeValue } from '../util/describe-value.js';
import { parseJson, stringifyJson } from './json.js';
import { errorText, generateReader, outputFromOpenAI } from './openai-output.js';
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
  /** Extra request headers (an API key, say). */
  headers?: Record<string, string>;
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
  const extraHeaders = options.headers ?? {};
  return async (body, context, worker) => {
    const route = api === 'auto' ? (Array.isArray(body.messages) ? 'chat' : 'completions') : api;
    const url = joinUrl(baseUrl(options.url, worker), PATHS[route]);
    const streaming = body.stream === true;
    let response: Dispatcher.ResponseData;
    try {
      response = await request(url, {
        method: 'POST',
        headers: {
          ...extraHeaders,
          'content-type': 'application/json',
          accept: streaming ? 'text/event-stream' : 'application/json',
          [idHeader]: context.id,
        },
        body: stringifyJson(body),
        signal: context.signal,
        ...(options.dispatcher === undefined ? {} : { dispatcher: options.dispatcher }),
      });
    } catch (error) {
      throw isAbort(error) ? error : UpstreamError.fromFailure(url, error);
    }
    if (response.statusCode >= 400) {
      let text = '';
      try {
        text = await response.body.text();
      } catch {
        // The status says enough.
      }
      throw UpstreamError.fromStatus(url, response.statusCode, text);
    }
    const contentType = String(response.headers['content-type'] ?? '');
    const convert = route === 'generate' ? generateReader() : outputFromOpenAI;
    const mode = contentType.includes('text/event-stream') ? 'sse' : 'json';
    return new ResponseStream(new BodyItems(response.body, url, mode, convert, context, choicesOf(body)), context);
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

function joinUrl(base: string, path: string): string {
  return base.endsWith('/') ? `${base.slice(0, -1)}${path}` : `${base}${path}`;
}

function isAbort(error: unknown): boolean {
  const { name, code } = (error ?? {}) as { name?: unknown; code?: unknown };
  return name === 'AbortError' || code === 'UND_ERR_ABORTED';
}

const DONE: Step = Object.freeze({ value: undefined, done: true }) as Step;

/**
 * The items of one response body: SSE events or one JSON document. A class, not a generator:
 * `return()` must destroy the body at once, even while a read is waiting on the network (that
 * read then answers done). Calls are answered in call order, one read of the body at a time.
 */
class BodyItems implements AsyncIterableIterator<EngineItem> {
  readonly #body: Dispatcher.ResponseData['body'];
  readonly #chunks: AsyncIterator<Buffer>;
  readonly #url: string;
  readonly #json: boolean;
  readonly #convert: (json: unknown) => EngineItem;
  readonly #context: AsyncEngineContext;
  readonly #decoder = new TextDecoder();
  readonly #parser: EventSourceParser | undefined;
  #items: EngineItem[] = [];
  #at = 0;
  /**
   * The finish item, held until the next event: OpenAI servers (vLLM) send the usage of a
   * stream in a chunk of its own after the finish chunk, and the library's terminal output
   * carries its usage, so that chunk is folded into it. [DONE] follows at once.
   */
  #held: EngineItem | undefined;
  #text = '';
  #finished = false;
  #terminal = false;
  /** How many choices the answer has (`n`, a list prompt): the stream ends when all have finished. */
  readonly #choices: number;
  /** The choices whose finish has been read, when there are several. */
  readonly #finishedChoices = new Set<number>();
  /** Closed by `return()`: later calls are done at once. */
  #closed = false;
  /** One read of the body at a time, answered in call order (pipelined readers). */
  readonly #order = new CallOrder<Step>(() => this.#read());

  constructor(
    body: Dispatcher.ResponseData['body'],
    url: string,
    mode: 'sse' | 'json',
    convert: (json: unknown) => EngineItem,
    context: AsyncEngineContext,
    choices: number,
  ) {
    this.#body = body;
    this.#choices = choices;
    this.#chunks = body[Symbol.asyncIterator]();
    this.#url = url;
    this.#json = mode === 'json';
    this.#convert = convert;
    this.#context = context;
    this.#parser = mode === 'sse' ? createParser({ onEvent: (event) => this.#event(event) }) : undefined;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    if (this.#closed) return Promise.resolve(DONE);
    return this.#order.call();
  }

  async #read(): Promise<Step> {
    try {
      return await this.#nextItem();
    } finally {
      this.#order.settled();
    }
  }

  async #nextItem(): Promise<Step> {
    for (;;) {
      if (this.#at < this.#items.length) {
        const value = this.#items[this.#at++] as EngineItem;
        if (this.#at === this.#items.length) {
          this.#items = [];
          this.#at = 0;
        }
        return { value, done: false };
      }
      if (this.#finished) return DONE;
      let chunk: IteratorResult<Buffer>;
      try {
        chunk = await this.#chunks.next();
      } catch (error) {
        this.#broke(error);
        continue;
      }
      if (chunk.done === true) this.#bodyEnded();
      else if (this.#json) this.#text += this.#decoder.decode(chunk.value, { stream: true });
      else (this.#parser as EventSourceParser).feed(this.#decoder.decode(chunk.value, { stream: true }));
    }
  }

  return(): Promise<Step> {
    this.#closed = true;
    this.#items = [];
    this.#at = 0;
    this.#close();
    return Promise.resolve(DONE);
  }

  #event(event: EventSourceMessage): void {
    if (this.#finished) return;
    if (event.data === '[DONE]') {
      this.#release();
      this.#finished = true;
      // Read what is left (the end of the body) so that the connection goes back to the pool.
      this.#body.dump().then(undefined, ignore);
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
      this.#fail(UpstreamError.fromFailure(this.#url, error));
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
    if (this.#choices <= 1 || FinishReason.isFailure(output.finish_reason)) return true;
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
    this.#fail(UpstreamError.fromFailure(this.#url, error));
  }

  #fail(error: UpstreamError): void {
    this.#release();
    this.#items.push(Annotated.fromError<LLMEngineOutput>(error));
    this.#close();
  }

  #close(): void {
    if (this.#finished) return;
    this.#finished = true;
    // Ends the call now, whatever is in flight; a destroyed body's pending read settles.
    this.#body.destroy();
  }
}

/** A chunk that says nothing but the usage (`choices: []` with `usage`). */
function isUsageOnly(data: LLMEngineOutput | null | undefined): boolean {
  if (data === undefined || data === null) return false;
  const { completion_usage: usage, finish_reason: reason, text } = data;
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

/** How many choices an answer to `body` has: its prompts (a list prompt is a batch) times `n`. */
function choicesOf(body: Record<string, unknown>): number {
  const n = typeof body.n === 'number' && body.n > 1 ? body.n : 1;
  const { prompt, text } = body;
  const batch = [prompt, text].find(
    (value) => Array.isArray(value) && value.some((entry) => typeof entry === 'string'),
  );
  return (batch === undefined ? 1 : (batch as unknown[]).length) * n;
}
