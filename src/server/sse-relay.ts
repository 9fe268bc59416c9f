import type { ServerResponse } from 'node:http';
import { ChunkWriter } from '../http/chunk-writer.js';
import { answerJson } from '../http/node-server.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly } from '../util/close-quietly.js';
import type { ResponseWriter } from './openai-format.js';
import { type ErrorAnswer, ShutdownError } from './pipeline/error-answers.js';
import type { InFlightRequest } from './pipeline/in-flight.js';

/** What the relay reports and how long it waits for a client. */
export interface RelayHooks {
  /** How long a client may leave its socket full before the request is given up. */
  slowClientTimeoutMs: number;
  /** The answer for a failure (the proxy also learns from it which worker failed). */
  answerFor(error: unknown): ErrorAnswer;
  /** The gap between two chunks written, in seconds. */
  interToken(seconds: number): void;
  /** What a shutdown ends the answer with; a `ShutdownError` by default (or when this gives none). */
  shutdownError?: (() => unknown) | undefined;
  /**
   * What must be done with the answer's closing object (the Responses store keeps it) before
   * the item that carries it is written: the stream waits, and fails instead if it rejects.
   */
  settle?: ((answer: Record<string, unknown>) => Promise<void>) | undefined;
}

/**
 * Streams a request's items to the client as SSE, no faster than the client reads: decode is
 * read only when the socket has taken the last chunk, so the proxy never buffers more than one
 * chunk beyond the socket's own buffer. A client that leaves its socket full for
 * `slowClientTimeoutMs` is given up: the request is stopped (the flow still lets decode take
 * the KV) and the connection closed.
 *
 * The error contract: a failure before the first byte is a real HTTP status with the API's
 * error body; after streaming started, the API's error event(s), then the end (see
 * `stream-endings.ts`). A shutdown ends the stream the same way. The stream is closed (without waiting) when the
 * relay ends, whatever ended it.
 *
 * @internal
 */
export async function relaySse(
  stream: ResponseStream<EngineItem>,
  res: ServerResponse,
  writer: ResponseWriter,
  entry: InFlightRequest,
  hooks: RelayHooks,
): Promise<void> {
  const iterator = stream[Symbol.asyncIterator]();
  const body = new ChunkWriter(res);
  let started = false;
  let lastWrite: number | undefined;
  const start = () => {
    started = true;
    // No connection header of our own: Node keeps the connection alive, unless the client
    // asked to close it (a keep-alive here would override its Connection: close).
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  };
  const fail = (error: unknown) => {
    const answer = hooks.answerFor(error);
    if (res.writableEnded || res.destroyed) return;
    if (!started) answerJson(res, answer.status, writer.errorBody(answer));
    else res.end(writer.failure(answer));
  };
  entry.shutdown = (error) => {
    entry.context.stopGenerating();
    fail(error ?? hooks.shutdownError?.() ?? new ShutdownError());
  };
  try {
    for (;;) {
      let step: IteratorResult<EngineItem>;
      try {
        step = await iterator.next();
      } catch (error) {
        fail(error);
        return;
      }
      if (res.writableEnded || res.destroyed) return;
      if (step.done === true) break;
      const error = Annotated.err(step.value);
      if (error !== undefined) {
        fail(error);
        return;
      }
      const closing = hooks.settle === undefined ? undefined : writer.closingAnswer(step.value);
      if (closing !== undefined) {
        try {
          await (hooks.settle as NonNullable<RelayHooks['settle']>)(closing);
        } catch (error) {
          fail(error);
          return;
        }
        if (res.writableEnded || res.destroyed) return;
      }
      const text = writer.sse(step.value);
      if (text === '') continue;
      if (!started) start();
      const now = performance.now();
      if (lastWrite !== undefined) hooks.interToken((now - lastWrite) / 1000);
      lastWrite = now;
      if (!body.write(text) && !(await drainedWithin(res, body, hooks.slowClientTimeoutMs))) {
        // The client has not read for too long (the wait destroyed the response) or has gone:
        // give the request up rather than buffer.
        entry.context.stopGenerating();
        return;
      }
    }
    if (!started) start();
    res.end(writer.end());
  } finally {
    closeQuietly(iterator);
  }
}

/** Whether the client read what was buffered within `ms`; past it the response is destroyed. */
async function drainedWithin(res: ServerResponse, body: ChunkWriter, ms: number): Promise<boolean> {
  const timer = setTimeout(() => res.destroy(), ms);
  try {
    return await body.drained();
  } finally {
    clearTimeout(timer);
  }
}
