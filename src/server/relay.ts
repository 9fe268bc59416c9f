// The relay pieces of `disagg serve`, for a router of your own: the answer of a request's
// stream, streamed (SSE) or whole, in OpenAI's shapes, with the error contract of the proxy.
import type { ServerResponse } from 'node:http';
import { webResponse } from '../http/web-exchange.js';
import type { CompletionUsage, EngineItem } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { type ErrorAnswer, errorToResponse } from './error-answers.js';
import type { InFlightRequest } from './in-flight.js';
import { ResponseWriter, type Route } from './openai-format.js';
import { relaySse } from './sse-relay.js';
import { answerWhole } from './whole-response.js';

/** Options of {@link writeSse}, {@link sseResponse} and {@link writeJson}. */
export interface RelayOptions {
  /**
   * The client's request body: its `model`, and its `stream_options.include_usage` for a usage
   * chunk the relay writes itself. The route is read from it too, unless `route` says.
   */
  request?: Record<string, unknown>;
  /**
   * The route answered, for what the relay writes itself (an item that came from no worker):
   * chat chunks, completions, or SGLang's `/generate`. By default `chat` for a request with
   * `messages`, else `completions`.
   */
  route?: Route;
  /**
   * The answer to a failure, `{ status, body }`: by default {@link errorToResponse} (give it
   * a `redact` there, so that no worker address reaches a client).
   */
  answer?: (error: unknown) => ErrorAnswer;
  /** How long a client may leave its socket full before it is given up (streamed); 30,000 ms by default. */
  slowClientTimeoutMs?: number;
  /** The request's context: stopped when the client is given up for not reading. */
  context?: AsyncEngineContext;
  /** Ends a streamed answer with an error event now (a shutdown, say): the signal's reason is the failure. */
  signal?: AbortSignal;
  /** Each gap between two chunks written, in seconds (for an inter-token histogram). */
  onGap?: (seconds: number) => void;
}

/** What the workers reported of a request that was answered. */
export interface RelayResult {
  /** The last usage a worker reported (token counts), if any. */
  usage: CompletionUsage | undefined;
}

function writerFor(options: RelayOptions): ResponseWriter {
  const request = options.request ?? {};
  const route = options.route ?? (Array.isArray(request.messages) ? 'chat' : 'completions');
  return new ResponseWriter(route, request);
}

/**
 * Streams a request's answer to a Node `ServerResponse` as SSE, as `disagg serve` does: what a
 * worker sent goes on as it sent it (`data: <JSON>`, byte for byte where the flow changed
 * nothing: roles, ids, tool calls, reasoning, logprobs), then `data: [DONE]`. The stream is
 * read no faster than the client reads (one chunk beyond the socket's buffer); a client that
 * leaves its socket full for `slowClientTimeoutMs` is given up (its `context` stopped, the
 * connection closed). A failure before the first byte is an HTTP status with an OpenAI-style
 * body; after it, one SSE `error` event, then the end, without `[DONE]`. The stream is closed
 * (without waiting) when the relay ends, whatever ended it. Resolves when the answer is over.
 *
 * @example
 * const stream = await disaggregate({ ... }).catch((error) => error);
 * await writeSse(stream, res, { request: body, answer: (error) => errorToResponse(error, { redact }) });
 */
export async function writeSse(
  stream: ResponseStream<EngineItem>,
  res: ServerResponse,
  options: RelayOptions = {},
): Promise<RelayResult> {
  const writer = writerFor(options);
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
      answerFor: options.answer ?? errorToResponse,
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
 * {@link writeSse} for the WHATWG fetch API (Hono, Next.js route handlers, Bun, Deno, a
 * service worker): a `Response` whose body is the SSE stream, pulled from the request's stream
 * no faster than the body is read. Cancelling the body is a client that left: the stream is
 * closed and the `context` stopped. Resolves once the answer's head is known (the first chunk,
 * or the failure's status).
 *
 * @example
 * app.post('/v1/completions', async (c) => sseResponse(await disaggregate({ ... }), { request: body }));
 */
export function sseResponse(stream: ResponseStream<EngineItem>, options: RelayOptions = {}): Promise<Response> {
  const { res, response } = webResponse();
  const context = options.context;
  res.once('close', () => {
    if (!res.writableFinished) context?.stopGenerating();
  });
  writeSse(stream, res, options).catch(() => res.destroy());
  return response;
}

/**
 * Answers a non-streamed request whole, as `disagg serve` does: the decode worker's own body
 * when it answered in one piece (the usual case), else the items collected into one OpenAI
 * answer; a failure anywhere is its status and OpenAI-style body instead.
 *
 * @example
 * await writeJson(await disaggregate({ ... }), res, { request: body });
 */
export async function writeJson(
  stream: ResponseStream<EngineItem>,
  res: ServerResponse,
  options: Pick<RelayOptions, 'request' | 'route' | 'answer'> = {},
): Promise<RelayResult> {
  const writer = writerFor(options);
  await answerWhole(stream, res, writer, options.answer ?? errorToResponse);
  return { usage: writer.usage };
}
