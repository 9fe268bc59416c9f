// The relay pieces of `disagg serve`, for a router of your own: the answer of a request's
// stream, streamed (SSE) or whole, in OpenAI's shapes, with the error contract of the proxy.
import type { ServerResponse } from 'node:http';
import { endpointNamed, endpointOf } from '../endpoints/registry.js';
import { answerJson } from '../http/node-server.js';
import { webResponse } from '../http/web-exchange.js';
import type { EngineItem } from '../protocol/annotated.js';
import type { CompletionUsage } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { describeValue } from '../util/describe-value.js';
import { ResponseWriter, type Route } from './openai-format.js';
import { type ErrorAnswer, errorToResponse } from './pipeline/error-answers.js';
import type { InFlightRequest } from './pipeline/in-flight.js';
import { relaySse } from './sse-relay.js';
import { answerWhole } from './whole-response.js';

/**
 * What the relay answers: the stream `disaggregate` gave, or the promise of it, so that a
 * failure before the stream exists (a prefill that failed, no worker, a refused request) is
 * answered with its status and body like any other: `writeSse(disaggregate({ ... }), res)`.
 */
export type RelaySource = ResponseStream<EngineItem> | PromiseLike<ResponseStream<EngineItem>>;

/** Options of {@link writeSse}, {@link writeJson}, {@link sseResponse} and {@link jsonResponse}. */
export interface RelayOptions {
  /**
   * The client's request body: whether it asked to stream (`stream: true`; the SSE forms answer
   * any other request whole), its `model`, and its `stream_options.include_usage` for a usage
   * chunk the relay writes itself. The route is read from it too, unless `route` says.
   */
  request?: Record<string, unknown> | undefined;
  /**
   * The route answered, for what the relay writes itself (an item that came from no worker,
   * the end of a stream, a failure): chat chunks, completions, SGLang's `/generate`, or the
   * typed events and error shapes of `responses` and `messages` (Anthropic's). By default by
   * the request's shape (`endpointOf`): chat for `messages`, Responses for an `input`, else
   * completions; name `messages` for an Anthropic body, which looks like chat's.
   */
  route?: Route | undefined;
  /**
   * The answer to a failure, `{ status, body }`: by default {@link errorToResponse}, which
   * replaces every address in the message with `worker`; give it
   * `workerRedactor(workers)` there to name each worker instead.
   */
  answer?: ((error: unknown) => ErrorAnswer) | undefined;
  /** How long a client may leave its socket full before it is given up (streamed); 30,000 ms by default. */
  slowClientTimeoutMs?: number | undefined;
  /** The request's context: stopped when the client is given up for not reading. */
  context?: AsyncEngineContext | undefined;
  /** Ends a streamed answer with an error event now (a shutdown, say): the signal's reason is the failure. */
  signal?: AbortSignal | undefined;
  /** Each gap between two chunks written, in seconds (for an inter-token histogram). */
  onGap?: ((seconds: number) => void) | undefined;
}

/** What the workers reported of a request that was answered. */
export interface RelayResult {
  /**
   * The last usage a worker reported (token counts), if any. A streamed request reports it only
   * when the client asked (`stream_options.include_usage`) or the flow asked on its behalf
   * (`disaggregate`'s `usage: 'always'`).
   */
  usage: CompletionUsage | undefined;
}

/** A WHATWG `Response` from the relay, with what the workers reported once its body is over. */
export type RelayedResponse = Response & {
  /**
   * Resolves once the answer is over (its body read to the end, cancelled, or failed), with
   * the usage reported; never rejects.
   */
  readonly result: Promise<RelayResult>;
};

function writerFor(options: RelayOptions): ResponseWriter {
  const request = options.request ?? {};
  return new ResponseWriter(options.route === undefined ? endpointOf(request) : endpointNamed(options.route), request);
}

/** Whether the client asked for something else than a stream: then it is answered whole. */
function wantsWhole(options: RelayOptions): boolean {
  return options.request !== undefined && options.request.stream !== true;
}

/**
 * The stream of `source`; or, where there is none to relay (the promise rejected, or something
 * other than a stream was handed over: an error in place of one, from JavaScript), undefined,
 * the failure answered on `res` with its status and body.
 */
async function streamOf(
  source: RelaySource,
  res: ServerResponse,
  answerFor: (error: unknown) => ErrorAnswer,
  writer: ResponseWriter,
): Promise<ResponseStream<EngineItem> | undefined> {
  let stream: unknown;
  let failure: unknown;
  try {
    stream = await source;
    if (typeof (stream as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === 'function') {
      return stream as ResponseStream<EngineItem>;
    }
    failure =
      stream instanceof Error
        ? stream
        : new TypeError(`The relay needs the request's stream (or its promise), got ${describeValue(stream)}`);
  } catch (error) {
    failure = error;
  }
  const answer = answerFor(failure);
  answerJson(res, answer.status, writer.errorBody(answer));
  return undefined;
}

/**
 * Streams a request's answer to a Node `ServerResponse` as SSE, as `disagg serve` does: what a
 * worker sent goes on as it sent it (`data: <JSON>`, byte for byte where the flow changed
 * nothing: roles, ids, tool calls, reasoning, logprobs), then `data: [DONE]`. The stream is
 * read no faster than the client reads (one chunk beyond the socket's buffer); a client that
 * leaves its socket full for `slowClientTimeoutMs` is given up (its `context` stopped, the
 * connection closed).
 *
 * - `source` is the stream or its promise: a failure before the first byte (the promise
 *   rejecting included) is an HTTP status with an OpenAI-style body; after it, one SSE `error`
 *   event, then the end, without `[DONE]`. It never throws for the request's failure.
 * - A `request` that did not ask to stream (`stream` not `true`) is answered whole, as
 *   {@link writeJson} does: a client that did not ask for SSE never gets it.
 * - The stream is closed (without waiting) when the relay ends, whatever ended it.
 *
 * Resolves when the answer is over, with the usage reported.
 *
 * @example
 * const answer = (error: unknown) => errorToResponse(error, { redact: workerRedactor(workers) });
 * const result = await writeSse(disaggregate({ ...options, request: body, context }), res, { request: body, answer, context });
 */
export async function writeSse(
  source: RelaySource,
  res: ServerResponse,
  options: RelayOptions = {},
): Promise<RelayResult> {
  if (wantsWhole(options)) return writeJson(source, res, options);
  const writer = writerFor(options);
  const answerFor = options.answer ?? errorToResponse;
  const stream = await streamOf(source, res, answerFor, writer);
  if (stream === undefined) return { usage: undefined };
  const entry: InFlightRequest = {
    context: (options.context as Controller | undefined) ?? new Controller(),
    res,
    shutdown: () => {},
  };
  const { signal } = options;
  const onAbort = () => entry.shutdown();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const relaying = relaySse(stream, res, writer, entry, {
      slowClientTimeoutMs: options.slowClientTimeoutMs ?? 30_000,
      answerFor,
      interToken: options.onGap ?? (() => {}),
      shutdownError: () => signal?.reason,
    });
    // The relay has taken the shutdown hook by now (before its first read).
    if (signal?.aborted === true) entry.shutdown();
    await relaying;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  return { usage: writer.usage };
}

/**
 * Answers a request whole, as `disagg serve` answers a non-streamed one: the decode worker's
 * own body when it answered in one piece (the usual case), else the items collected into one
 * OpenAI answer; a failure anywhere (the promise of the stream rejecting included) is its
 * status and OpenAI-style body instead. Resolves with the usage reported.
 *
 * @example
 * const { usage } = await writeJson(disaggregate({ ...options, request: body }), res, { request: body });
 */
export async function writeJson(
  source: RelaySource,
  res: ServerResponse,
  options: Pick<RelayOptions, 'request' | 'route' | 'answer'> = {},
): Promise<RelayResult> {
  const writer = writerFor(options);
  const answerFor = options.answer ?? errorToResponse;
  const stream = await streamOf(source, res, answerFor, writer);
  if (stream === undefined) return { usage: undefined };
  await answerWhole(stream, res, writer, answerFor);
  return { usage: writer.usage };
}

/** The WHATWG form of a Node relay: the `Response` once its head is known, and its result. */
function fetchForm(
  options: RelayOptions,
  relay: (res: ServerResponse) => Promise<RelayResult>,
): Promise<RelayedResponse> {
  const { res, response } = webResponse();
  const context = options.context;
  res.once('close', () => {
    if (!res.writableFinished) context?.stopGenerating();
  });
  const result = relay(res).catch(() => {
    res.destroy();
    return { usage: undefined };
  });
  return response.then((answered) => Object.assign(answered, { result }));
}

/**
 * {@link writeSse} for the WHATWG fetch API (Hono, Next.js route handlers, Bun, Deno, a
 * service worker): a `Response` whose body is the SSE stream, pulled from the request's stream
 * no faster than the body is read, or the whole answer for a `request` that did not ask to
 * stream. Cancelling the body is a client that left: the stream is closed and the `context`
 * stopped. Resolves once the answer's head is known (the first chunk, or the failure's
 * status); its `result` resolves with the usage once the body is over.
 *
 * @example
 * app.post('/v1/completions', async (c) => {
 *   const body = await c.req.json();
 *   const response = await sseResponse(disaggregate({ ...options, request: body }), { request: body });
 *   response.result.then(({ usage }) => meter(usage));
 *   return response;
 * });
 */
export function sseResponse(source: RelaySource, options: RelayOptions = {}): Promise<RelayedResponse> {
  return fetchForm(options, (res) => writeSse(source, res, options));
}

/**
 * {@link writeJson} for the WHATWG fetch API: the whole answer as a `Response` (`200` with the
 * worker's body, or the failure's status and OpenAI-style body); its `result` resolves with
 * the usage reported.
 *
 * @example
 * // A client that did not ask to stream: one JSON answer, or the failure's status and body.
 * app.post('/v1/completions', async (c) => {
 *   const body = await c.req.json();
 *   return jsonResponse(disaggregate({ ...options, request: body }), { request: body });
 * });
 */
export function jsonResponse(
  source: RelaySource,
  options: Pick<RelayOptions, 'request' | 'route' | 'answer'> = {},
): Promise<RelayedResponse> {
  return fetchForm(options, (res) => writeJson(source, res, options));
}
