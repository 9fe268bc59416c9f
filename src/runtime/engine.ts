import type { EngineItem } from '../protocol/annotated.js';
import type { AsyncEngineContext } from './controller.js';
import type { ResponseStream } from './response-stream.js';

/**
 * An engine leg: a request body, the leg's context and the worker chosen for it in, a
 * response stream out. The worker is the one picked from `prefillWorkers`/`decodeWorkers`
 * (or `prefillWorker`), `undefined` when there is no pool. `httpEngine` is one; a test's
 * stand-in is another.
 */
export type Engine<W = unknown> = (
  request: Record<string, unknown>,
  context: AsyncEngineContext,
  worker?: W,
) => PromiseLike<ResponseStream<EngineItem>>;
