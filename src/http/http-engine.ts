import type { Dispatcher } from 'undici';
import { completions } from '../endpoints/completions.js';
import type { Endpoint } from '../endpoints/endpoint.js';
import { ENDPOINTS, endpointNamed, endpointOf, type GenerationName } from '../endpoints/registry.js';
import type { EngineItem } from '../protocol/annotated.js';
import { elementsOf } from '../protocol/request-counts.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import type { Engine } from '../runtime/engine.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { describeValue } from '../util/describe-value.js';
import { joinUrl } from '../util/url.js';
import { type AnswerReading, readingOf } from './answer-readings.js';
import { BodyFrames } from './body-frames.js';
import { ItemQueue } from './item-queue.js';
import { stringifyJson } from './json.js';
import { OpenAIAnswer } from './openai-answer.js';
import { type BodySink, UpstreamCall, type UpstreamHead } from './upstream-call.js';
import { UpstreamError } from './upstream-error.js';

type Step = IteratorResult<EngineItem, undefined>;

/**
 * Which HTTP API an engine calls when a call names no endpoint (the flow always names one): a
 * generation endpoint by name, or `auto`, OpenAI's by the body's shape ({@link endpointOf}:
 * chat completions for a body with `messages`, Responses for an `input` without a `prompt`,
 * else completions; SGLang's `/generate` and Anthropic's `/v1/messages` are asked for by name).
 */
export type HttpApi = 'auto' | GenerationName;

const GENERATION = new Set<string>(
  ENDPOINTS.filter((each) => each.serving === 'disaggregated').map((each) => each.name),
);

/** Options of {@link httpEngine}. */
export interface HttpEngineOptions<W> {
  /**
   * The worker's base URL (`http://host:port`), or how to read it from the worker chosen for
   * the leg. Default: the worker's `url` field.
   */
  url?: string | ((worker: W | undefined) => string) | undefined;
  /**
   * Which API to call when a call names no endpoint (`disaggregate` names one on every call,
   * which wins); `auto` by default, by the body's shape (see {@link HttpApi}). With `chat`, a
   * body with a `prompt` and no `messages` still goes to completions: it is the token-id
   * completion that continues a migrated chat stream, from a caller that dropped the endpoint.
   */
  api?: HttpApi | undefined;
  /**
   * The undici dispatcher (connection pool) to call through. By default the library's own
   * keep-alive pool, shared by every engine given none; never undici's process-wide global
   * dispatcher, which Node 20 and 22 fill with their bundled, older undici once anything
   * touches `fetch` or `Response`, so that nothing imported before `disagg` can break it.
   */
  dispatcher?: Dispatcher | undefined;
  /**
   * Extra request headers (an API key, say), or a function of the worker that gives them for
   * each call (trace context, say: called once per leg call, as the call is made).
   */
  headers?: Record<string, string> | ((worker: W | undefined) => Record<string, string>) | undefined;
  /** The header that carries the request id, the same on both legs; `x-request-id` by default. */
  requestIdHeader?: string | undefined;
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
 *   status and body (a 5xx or a 429 retryable, another 4xx not: the failure rules), as does
 *   a connection failure (with its code, retryable). After it started: a broken connection, an `error` event, an error chunk
 *   or a stream cut before `[DONE]` is one error item carrying the `UpstreamError`, then the
 *   end; a stopped context ends the stream with a `cancelled` item.
 * - Closing the stream (`return()`) destroys the response body at once, which ends the call.
 *
 * @example
 * const engine = httpEngine<{ url: string }>(); // the worker chosen by a WorkerPool has the url
 * disaggregate({ ...request, connector: vllmNixl, prefill: engine, decode: engine, prefillWorkers, decodeWorkers });
 */
export function httpEngine<W = { url: string }>(options: HttpEngineOptions<W> = {}): Engine<W> {
  const api = options.api ?? 'auto';
  if (api !== 'auto' && !GENERATION.has(api)) {
    const names = ['auto', ...GENERATION].map((name) => `'${name}'`);
    throw new TypeError(
      `Unknown api ${describeValue(api)}: expected ${names.slice(0, -1).join(', ')} or ${names.at(-1)}`,
    );
  }
  const fixed = api === 'auto' ? undefined : endpointNamed(api);
  const idHeader = options.requestIdHeader ?? 'x-request-id';
  const headersOption = options.headers ?? {};
  return async (body, context, worker, named) => {
    const extraHeaders = typeof headersOption === 'function' ? headersOption(worker) : headersOption;
    const endpoint = named ?? unnamed(fixed, body);
    const url = joinUrl(baseUrl(options.url, worker), endpoint.path);
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
    const mode = contentType.includes('text/event-stream') ? 'sse' : 'json';
    const reading = readingOf(endpoint);
    const choices = reading.single === true ? 1 : elementsOf(body);
    return new ResponseStream(new BodyItems(call, url, mode, reading, context, choices), context);
  };
}

/**
 * The endpoint of a call that names none (a library caller's, outside the flow): the engine's
 * `api`, or for `auto` OpenAI's by the body's shape ({@link endpointOf}, the one place a shape
 * is read).
 * A chat engine given a completion's body (a `prompt`, no `messages`) calls completions: the
 * token-id completion that continues a migrated chat stream, from an engine hook that did not
 * pass the flow's endpoint on.
 */
function unnamed(fixed: Endpoint | undefined, body: Readonly<Record<string, unknown>>): Endpoint {
  if (fixed === undefined) {
    const shaped = endpointOf(body);
    // OpenAI's APIs only: a token-id prompt of SGLang's shape goes to completions, as it always has.
    return shaped.answer === 'generate' ? completions : shaped;
  }
  return fixed.answer === 'chat' && !Array.isArray(body.messages) && body.prompt !== undefined ? completions : fixed;
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

/** Items read ahead of the reader before the worker's socket is left unread (backpressure). */
const READ_AHEAD = 64;

/**
 * The items of one response body, read in three stages: bytes to frames ({@link BodyFrames}:
 * UTF-8, SSE events or one JSON document), frames to items ({@link OpenAIAnswer}: what an
 * OpenAI-style answer means), items to readers ({@link ItemQueue}: call order). The body is
 * pushed in as undici reads it ({@link BodySink}); past {@link READ_AHEAD} unread items the
 * call is paused, so a slow reader slows the worker's socket rather than filling memory.
 * `return()` ends the call at once, even while a read is waiting on the network (that read
 * then answers done).
 */
class BodyItems implements AsyncIterableIterator<EngineItem>, BodySink {
  readonly #call: UpstreamCall;
  readonly #mode: 'sse' | 'json';
  readonly #queue: ItemQueue<EngineItem>;
  readonly #answer: OpenAIAnswer;
  readonly #frames: BodyFrames;

  constructor(
    call: UpstreamCall,
    url: string,
    mode: 'sse' | 'json',
    reading: AnswerReading,
    context: AsyncEngineContext,
    choices: number,
  ) {
    this.#call = call;
    this.#mode = mode;
    this.#queue = new ItemQueue<EngineItem>({ demand: () => call.resume(), lowWater: READ_AHEAD / 2 });
    this.#answer = new OpenAIAnswer({
      url,
      convert: reading.convert,
      ends: reading.ends,
      context,
      choices,
      queue: this.#queue,
      abort: () => call.abort(),
    });
    this.#frames = new BodyFrames(mode, this.#answer);
    call.attach(this);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    return this.#queue.next();
  }

  return(): Promise<Step> {
    this.#answer.closed();
    this.#queue.close();
    return Promise.resolve(DONE);
  }

  // BodySink: undici's read loop calls these.

  data(chunk: Buffer): void {
    const queue = this.#queue;
    if (queue.finished) return; // after [DONE]: the rest of the body says nothing
    this.#frames.feed(chunk);
    queue.deliver();
    // Once [DONE] is read the rest of the body is read on whatever the reader does, so that
    // the connection goes back to the pool.
    if (queue.finished) this.#call.resume();
    else if (queue.backlog >= READ_AHEAD) this.#call.pause();
  }

  end(): void {
    if (!this.#queue.finished) {
      this.#frames.end();
      this.#answer.bodyEnded(this.#mode);
    }
    this.#queue.deliver();
  }

  error(error: Error): void {
    this.#answer.broke(error, isAbort(error));
    this.#queue.deliver();
  }
}

const DONE: Step = Object.freeze({ value: undefined, done: true }) as Step;
