import { closeQuietly } from '../util/close-quietly.js';
import { type AsyncEngineContext, isContext } from './controller.js';

/**
 * An engine's response: an async iterable of items plus the context that cancels the work
 * producing them.
 *
 * It adds nothing to iteration: `[Symbol.asyncIterator]()` is the source's own, so a
 * `for await` over a `ResponseStream` costs what the source costs. Closing the iterator
 * (`break`, `return()`) closes the source.
 *
 * @example
 * const context = new Controller();
 * const stream = new ResponseStream(tokens(), context);
 * for await (const item of stream) send(item);
 */
export class ResponseStream<T> implements AsyncIterable<T> {
  readonly #source: AsyncIterable<T>;
  /** The iterator handed out first, which `cancel()` closes. */
  #iterator: AsyncIterator<T> | undefined;
  /** The context of the work behind this stream; stopping it asks that work to stop. */
  readonly context: AsyncEngineContext;

  /**
   * @throws {TypeError} when `source` is not async iterable or `context` is not a context.
   */
  constructor(source: AsyncIterable<T>, context: AsyncEngineContext) {
    if (!isAsyncIterable(source)) {
      throw new TypeError('ResponseStream expects an AsyncIterable source (an object with [Symbol.asyncIterator]())');
    }
    if (!isContext(context)) {
      throw new TypeError('ResponseStream expects an AsyncEngineContext (for example a Controller) as its context');
    }
    this.#source = source;
    this.context = context;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    const iterator = this.#source[Symbol.asyncIterator]();
    this.#iterator ??= iterator;
    return iterator;
  }

  /**
   * Closes the stream without reading it (or the rest of it): for a caller that knows it
   * will not read, such as a router whose client has gone. It is the `return()` of the stream's
   * iterator (the first one, or one made now), called without waiting for it: for a stream of
   * `disaggregate` every leg then ends as for a reader that closed it (a decode that has not
   * taken its KV yet is cleaned up first), and its worker leases are released.
   *
   * @example
   * res.on('close', () => stream.cancel()); // a client that left: nobody will read it
   */
  cancel(): void {
    this.#iterator ??= this.#source[Symbol.asyncIterator]();
    closeQuietly(this.#iterator);
  }
}

/** True when `value` has a callable `[Symbol.asyncIterator]`. */
export function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function'
  );
}
