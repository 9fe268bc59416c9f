import type { Endpoint } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import type { AsyncEngineContext } from './controller.js';
import type { ResponseStream } from './response-stream.js';

/**
 * An engine leg: a request body, the leg's context, the worker chosen for it and the API the
 * body is for in, a response stream out. The worker is the one picked from
 * `prefillWorkers`/`decodeWorkers` (or `prefillWorker`), `undefined` when there is no pool.
 * `disaggregate` passes the endpoint on every call: the request's own on both legs, completions
 * for the token-id completion that continues a migrated stream; a caller of an engine outside
 * the flow may leave it out (`httpEngine` then goes by its `api`). `httpEngine` is one engine;
 * a test's stand-in is another.
 *
 * @example
 * // Around an HTTP engine: the endpoint passed on, so that the call goes where the flow says.
 * const http = httpEngine();
 * const engine: Engine<{ url: string }> = (body, context, worker, endpoint) =>
 *   http({ ...body, priority: 1 }, context, worker, endpoint);
 */
export type Engine<W = unknown> = (
  request: Record<string, unknown>,
  context: AsyncEngineContext,
  worker?: W,
  endpoint?: Endpoint,
) => PromiseLike<ResponseStream<EngineItem>>;
