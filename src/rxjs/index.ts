// The `disagg/rxjs` subpath: the library's streams and events as RxJS Observables. rxjs is an
// optional peer dependency; only this entry imports it.
import { Observable, ReplaySubject } from 'rxjs';
import type { FlowEvent, FlowEventListener } from '../flow/events.js';
import { type AsyncEngineContext, isContext } from '../runtime/controller.js';
import { isAsyncIterable, ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly } from '../util/close-quietly.js';
import { describeValue } from '../util/describe-value.js';

/**
 * A stream as a cold Observable: each subscription iterates the stream once, emitting every
 * item, then completes (or errors with what the iterator threw).
 *
 * Unsubscribing closes the iterator at once and does not wait for it: an async generator's
 * `return()` queues behind a `next()` that is still in flight, so waiting on a stuck source
 * would hang the teardown. (RxJS's own `from(asyncIterable)` only notices the unsubscription
 * when the next item arrives.)
 *
 * @example
 * import { map } from 'rxjs';
 * toObservable(await disaggregate(options)).pipe(map((item) => item.data?.text)).subscribe(write);
 *
 * @throws {TypeError} for a value that is not async iterable.
 */
export function toObservable<T>(stream: AsyncIterable<T>): Observable<T> {
  if (!isAsyncIterable(stream)) {
    throw new TypeError(
      `toObservable expects an AsyncIterable (such as a ResponseStream), got ${describeValue(stream)}`,
    );
  }
  return new Observable<T>((subscriber) => {
    const iterator = stream[Symbol.asyncIterator]();
    let open = true;
    const pump = (): void => {
      let pull: Promise<IteratorResult<T>>;
      try {
        pull = Promise.resolve(iterator.next());
      } catch (error) {
        pull = Promise.reject(error);
      }
      pull.then(
        (step) => {
          if (!open) return;
          if (step.done === true) {
            open = false;
            subscriber.complete();
            return;
          }
          subscriber.next(step.value);
          pump();
        },
        (error: unknown) => {
          if (!open) return;
          open = false;
          subscriber.error(error);
        },
      );
    };
    pump();
    return () => {
      if (!open) return;
      open = false;
      closeQuietly(iterator);
    };
  });
}

/**
 * An Observable as a `ResponseStream` on `context`, for engines written with RxJS. Each
 * iteration subscribes once; values are queued until read (an Observable cannot be paused,
 * so a consumer slower than the source lets the queue grow); an error is thrown by the read
 * that reaches it, after the values before it; completion ends the stream. Closing the
 * iterator (`break`, `return()`) unsubscribes, and so does a stop of `context`, after which
 * the stream ends once the queued values are read.
 *
 * @example
 * const engine: Engine = (body, context) => Promise.resolve(fromObservable(generate$(body), context));
 *
 * @throws {TypeError} for a value that is not an Observable (something with `subscribe`) or a
 *   context that is not an `AsyncEngineContext`.
 */
export function fromObservable<T>(observable: Observable<T>, context: AsyncEngineContext): ResponseStream<T> {
  if (typeof (observable as { subscribe?: unknown } | null)?.subscribe !== 'function') {
    throw new TypeError(`fromObservable expects an Observable, got ${describeValue(observable)}`);
  }
  if (!isContext(context)) {
    throw new TypeError(
      `fromObservable expects an AsyncEngineContext as its second argument, got ${describeValue(context)}`,
    );
  }
  return new ResponseStream({ [Symbol.asyncIterator]: () => new ObservableIterator(observable, context) }, context);
}

type Entry<T> = { value: T } | { error: unknown } | { done: true };

/**
 * Values wait in a queue for reads; reads wait in a queue for values. Each read takes the
 * oldest value, and each value goes to the oldest read, so answers come in call order for a
 * reader with several calls in flight too.
 */
class ObservableIterator<T> implements AsyncIterator<T> {
  readonly #queue: Entry<T>[] = [];
  readonly #waiting: Array<{ resolve: (step: IteratorResult<T>) => void; reject: (error: unknown) => void }> = [];
  #unsubscribe: (() => void) | undefined;
  #finished = false;

  constructor(observable: Observable<T>, context: AsyncEngineContext) {
    const subscription = observable.subscribe({
      next: (value) => this.#deliver({ value }),
      error: (error: unknown) => this.#deliver({ error }),
      complete: () => this.#deliver({ done: true }),
    });
    this.#unsubscribe = () => subscription.unsubscribe();
    if (this.#finished) this.#stopSource();
    // Once per iteration; the reaction holds only this iterator, which ends with the request.
    context.stopped().then(
      () => {
        this.#stopSource();
        this.#deliver({ done: true });
      },
      () => {},
    );
  }

  next(): Promise<IteratorResult<T>> {
    const entry = this.#queue.shift();
    if (entry !== undefined) return settle(entry);
    if (this.#finished) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.#stopSource();
    this.#queue.length = 0;
    this.#finished = true;
    this.#endWaiting();
    return Promise.resolve({ value: undefined, done: true });
  }

  #deliver(entry: Entry<T>): void {
    if (this.#finished) return;
    if (!('value' in entry)) {
      this.#finished = true;
      this.#stopSource();
    }
    const waiting = this.#waiting.shift();
    if (waiting === undefined) {
      this.#queue.push(entry);
      return;
    }
    if ('error' in entry) waiting.reject(entry.error);
    else waiting.resolve('value' in entry ? { value: entry.value, done: false } : { value: undefined, done: true });
    // After the end, every other read still waiting is done.
    if (this.#finished) this.#endWaiting();
  }

  #endWaiting(): void {
    for (const waiting of this.#waiting.splice(0)) waiting.resolve({ value: undefined, done: true });
  }

  #stopSource(): void {
    const unsubscribe = this.#unsubscribe;
    this.#unsubscribe = undefined;
    unsubscribe?.();
  }
}

function settle<T>(entry: Entry<T>): Promise<IteratorResult<T>> {
  if ('error' in entry) return Promise.reject(entry.error);
  if ('value' in entry) return Promise.resolve({ value: entry.value, done: false });
  return Promise.resolve({ value: undefined, done: true });
}

/**
 * A request's lifecycle events as an Observable: pass `onEvent` to `disaggregate` and
 * subscribe to `events` (before or after the call: every event is replayed to each
 * subscriber). It completes after the request's last event, `settled`. `P` and `D` are the
 * types of the prefill and decode workers (what `routed` and `finished` name).
 *
 * @example
 * import { filter } from 'rxjs';
 * const { onEvent, events } = flowEvents<{ url: string }, { url: string }>();
 * const stream = await disaggregate({ ...options, onEvent });
 * events.pipe(filter((e) => e.type === 'finished')).subscribe((e) => metrics.outcome(e.outcome));
 */
export function flowEvents<P = unknown, D = unknown>(): {
  onEvent: FlowEventListener<P, D>;
  events: Observable<FlowEvent<P, D>>;
} {
  const subject = new ReplaySubject<FlowEvent<P, D>>();
  return {
    onEvent: (event) => {
      subject.next(event);
      if (event.type === 'settled') subject.complete();
    },
    events: subject.asObservable(),
  };
}
