import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { type AsyncEngineContext, isContext } from '../runtime/controller.js';
import { libraryLogger } from '../runtime/library-logger.js';
import type { Logger } from '../runtime/logger.js';
import { isAsyncIterable, ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { describeValue } from '../util/describe-value.js';
import { GuardedDecodeIterator, type GuardHooks } from './decode-guard.js';
import { PrefillError } from './prefill-error.js';
import { FAILED, PENDING, PrefillOutcome, type PrefillState, SUCCEEDED } from './prefill-outcome.js';

/** A decode response stream, as `forwardDecode` takes and returns it. */
export type DecodeStream = ResponseStream<EngineItem>;

/**
 * The decode leg handed to {@link PrefillTask.forwardDecode}: either a dispatch already under
 * way, or a function that starts it and receives a signal that aborts when the dispatch is
 * abandoned because prefill failed first.
 */
export type DecodeDispatch = PromiseLike<DecodeStream> | ((signal: AbortSignal) => PromiseLike<DecodeStream>);

/** Options of {@link PrefillTask.spawn}. */
export interface PrefillTaskOptions {
  /** Where a failed prefill is logged. Defaults to the library's stderr logger. */
  logger?: Logger | undefined;
  /**
   * The caller reports a failure itself (as `disaggregate` does, to its caller and in the
   * stream): it is logged at debug, not warn, so that one failure is not reported twice.
   * False by default: a task nobody may await still leaves a warning (rule 2).
   */
  handled?: boolean | undefined;
}

/**
 * The prefill outcome behind a task: for the flow, which must see prefill settle before the
 * guards it wakes act on it, and for the library's own tests (listener counts). Not exported
 * from the package.
 *
 * @internal
 */
export let outcomeOf: (task: PrefillTask) => PrefillOutcome;

/**
 * `forwardDecode` with {@link GuardHooks} on the guarded stream, for the flow: its decode leg
 * and client stream then do their per-item work on the guard's own promises. The hooks apply
 * only when the stream is guarded (`hooks.guarded` is set then); a stream returned unwrapped
 * (rule 6) has none. Not exported from the package.
 *
 * @internal
 */
export let forwardDecodeWith: (
  task: PrefillTask,
  decode: DecodeDispatch,
  requestContext: AsyncEngineContext,
  hooks: FlowGuardHooks,
) => Promise<DecodeStream>;

/** @internal */
export interface FlowGuardHooks extends GuardHooks {
  /** Set once a guard has been built with these hooks. */
  guarded?: boolean | undefined;
}

/**
 * A prefill running in the background, detached from whoever waits for it, and the guard
 * that keeps a decode stream honest about it.
 *
 * In concurrent (bootstrap) handoffs the router sends prefill and decode at once; decode
 * tokens may flow before prefill has finished, but success may only be reported once prefill
 * has succeeded, and a prefill failure must end the request. `PrefillTask` does exactly that,
 * following the reference router's rules (see the rule table in docs/library.md).
 *
 * @example
 * const prefillContext = new Controller(context.id); // its own: the client cannot cancel it
 * const task = PrefillTask.spawn(async () => {
 *   for await (const item of await prefillEngine(body, prefillContext, worker)) PrefillTask.checkOutput(item);
 * });
 * const stream = await task.forwardDecode(() => decodeEngine(body, context, worker), context);
 * for await (const item of stream) send(item); // tokens flow; the terminal waits for prefill
 */
export class PrefillTask {
  readonly #outcome: PrefillOutcome;

  static {
    outcomeOf = (task) => task.#outcome;
    forwardDecodeWith = (task, decode, requestContext, hooks) => task.#forward(decode, requestContext, hooks);
  }

  private constructor(outcome: PrefillOutcome) {
    this.#outcome = outcome;
  }

  /**
   * Starts the prefill at once (a function is called now) or adopts one already running (a
   * promise; what it resolves to is ignored). It runs to completion whatever happens to the
   * observers: dropping the task or its streams never cancels it. A failure is logged once, at
   * warn level (debug with `handled`), and never becomes an unhandled rejection. A function
   * that throws, or returns something that is not a promise, is a failed prefill, not a crash.
   *
   * @throws {TypeError} when `work` is neither a promise-like nor a function.
   */
  static spawn(
    work: PromiseLike<unknown> | (() => PromiseLike<unknown>),
    options: PrefillTaskOptions = {},
  ): PrefillTask {
    const logger = libraryLogger(options.logger);
    let running: PromiseLike<unknown>;
    if (typeof work === 'function') {
      try {
        const started: unknown = work();
        running = isThenable(started)
          ? (started as PromiseLike<unknown>)
          : Promise.reject(
              new TypeError(
                `The prefill function returned ${describeValue(started)}; expected a promise (PromiseLike<void>)`,
              ),
            );
      } catch (error) {
        running = Promise.reject(error);
      }
    } else if (isThenable(work)) {
      running = work;
    } else {
      throw new TypeError(
        `PrefillTask.spawn expects a promise or a function returning one, got ${describeValue(work)}`,
      );
    }
    return new PrefillTask(new PrefillOutcome(running, logger, options.handled === true ? 'debug' : 'warn'));
  }

  /**
   * Classifies one prefill output item (rule 4), in this order: an error item fails with
   * "Prefill router returned error in output stream: <text>" (cause kept); finish reason
   * `{error}` fails with "Prefill backend failed: <message>"; `cancelled` fails with "Prefill
   * backend cancelled before completing the handoff". Anything else returns.
   *
   * @throws {PrefillError} of kind `prefill` as above.
   */
  static checkOutput(item: EngineItem): void {
    const error = Annotated.err(item);
    if (error !== undefined) {
      throw new PrefillError('prefill', `Prefill router returned error in output stream: ${error.message}`, {
        cause: error,
      });
    }
    const reason = item?.data?.finish_reason;
    if (FinishReason.isError(reason)) {
      throw new PrefillError('prefill', `Prefill backend failed: ${reason.error}`);
    }
    if (FinishReason.isCancelled(reason)) {
      throw new PrefillError('prefill', 'Prefill backend cancelled before completing the handoff');
    }
  }

  /**
   * Where the prefill stands, read synchronously: `'pending'`, `'succeeded'` or `'failed'`.
   * It changes once, when the prefill settles, before anything waiting on it runs.
   */
  get state(): 'pending' | 'succeeded' | 'failed' {
    const { state } = this.#outcome;
    return state === PENDING ? 'pending' : state === SUCCEEDED ? 'succeeded' : 'failed';
  }

  /**
   * Resolves when prefill has succeeded; rejects with the {@link PrefillError} when it failed
   * (its message keeps the worker's text, its `cause` the original error). Each call returns
   * a new promise, so an unobserved call leaves nothing behind.
   */
  wait(): Promise<void> {
    const outcome = this.#outcome;
    return outcome.settled.then(() => {
      if (outcome.state === FAILED) throw outcome.error;
    });
  }

  /**
   * Dispatches decode under the watch of this prefill and returns the stream for the client.
   *
   * While the dispatch is pending: a prefill failure stops `requestContext`, aborts the
   * dispatch's signal, releases a stream that arrives later (stops its context, closes its
   * iterator) and rejects with the `PrefillError`; a prefill success returns the decode
   * stream itself once it arrives; a failed dispatch rejects with its own error and stops
   * nothing.
   *
   * The returned stream carries the decode stream's context and, while prefill is pending,
   * lets tokens flow at once, yields a decode failure at once and ends, and holds a terminal
   * item (or the end) until prefill settles. When prefill fails it stops both contexts and
   * yields exactly one error item instead. After prefill succeeds it forwards decode
   * unchanged. Whenever it ends before decode did (including a consumer's `break` or
   * `return()`), it closes the decode iterator without waiting on it. Nothing it does, or
   * that its consumer does, cancels the prefill.
   *
   * @throws {TypeError} (as a rejection) for a `decode` that is neither a promise-like nor a
   * function, a `requestContext` that is not a context, or a dispatch that resolves to
   * something that is not async iterable.
   */
  forwardDecode(decode: DecodeDispatch, requestContext: AsyncEngineContext): Promise<DecodeStream> {
    return this.#forward(decode, requestContext, undefined);
  }

  async #forward(
    decode: DecodeDispatch,
    requestContext: AsyncEngineContext,
    hooks: FlowGuardHooks | undefined,
  ): Promise<DecodeStream> {
    if (typeof decode !== 'function' && !isThenable(decode)) {
      throw new TypeError(
        `forwardDecode expects a decode dispatch (a promise of a ResponseStream, or a function (signal) => promise), got ${describeValue(decode)}`,
      );
    }
    if (!isContext(requestContext)) {
      throw new TypeError(
        `forwardDecode expects the request's AsyncEngineContext as its second argument, got ${describeValue(requestContext)}`,
      );
    }
    const outcome = this.#outcome;

    if (outcome.state === FAILED) {
      // Biased: a known failure wins before decode is even started.
      requestContext.stopGenerating();
      if (typeof decode !== 'function') releaseLate(decode);
      throw outcome.error;
    }

    const abandon = typeof decode === 'function' ? new AbortController() : undefined;
    let dispatch: PromiseLike<unknown>;
    try {
      dispatch =
        abandon === undefined
          ? (decode as PromiseLike<DecodeStream>)
          : (decode as (signal: AbortSignal) => PromiseLike<DecodeStream>)(abandon.signal);
    } catch (error) {
      dispatch = Promise.reject(error);
    }
    // Settles with the dispatch's outcome as a value, so it never rejects unobserved.
    const dispatched = Promise.resolve(dispatch).then(
      (value): Dispatched => ({ ok: true, value }),
      (error: unknown): Dispatched => ({ ok: false, error }),
    );

    // The race of phase A (a prefill that has already succeeded registers nothing).
    let wake: (() => void) | undefined;
    await new Promise<void>((resolve) => {
      wake = resolve;
      outcome.listen(resolve);
      dispatched.then(() => resolve());
    });
    outcome.unlisten(wake as () => void);

    // Biased: the prefill state is read before the dispatch's result is used. (The await
    // above may have changed it; TypeScript cannot know.)
    if ((outcome.state as PrefillState) === FAILED) {
      requestContext.stopGenerating(); // rule 5
      abandon?.abort(outcome.error);
      releaseLate(dispatched.then((settled) => (settled.ok ? settled.value : undefined)));
      throw outcome.error;
    }
    const settled = await dispatched;
    if (!settled.ok) throw settled.error; // rule 7 (or decode failing after prefill succeeded)
    const stream = asDecodeStream(settled.value, requestContext);
    if (outcome.state === SUCCEEDED) return stream; // rule 6: nothing left to watch
    // Rule 8: wrap; the wrapped stream carries decode's own context.
    return new ResponseStream(new GuardedDecode(outcome, stream, requestContext, hooks), stream.context);
  }
}

type Dispatched = { ok: true; value: unknown } | { ok: false; error: unknown };

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

function asDecodeStream(value: unknown, fallbackContext: AsyncEngineContext): DecodeStream {
  if (value instanceof ResponseStream) return value as DecodeStream;
  if (isAsyncIterable(value)) {
    const context = (value as { context?: unknown }).context;
    return new ResponseStream(value as AsyncIterable<EngineItem>, isContext(context) ? context : fallbackContext);
  }
  throw new TypeError(`The decode dispatch resolved to ${describeValue(value)}; expected a ResponseStream`);
}

/**
 * Releases a decode stream nobody will read because prefill failed first: stops its context
 * (so the decode worker stops) and closes its iterator, without waiting on either.
 */
function releaseLate(dispatch: PromiseLike<unknown>): void {
  Promise.resolve(dispatch)
    .then((value) => {
      const context = (value as { context?: unknown } | null | undefined)?.context;
      if (isContext(context)) context.stopGenerating();
      if (isAsyncIterable(value)) closeQuietly(value[Symbol.asyncIterator]());
    }, ignore)
    .then(undefined, ignore);
}

/**
 * The iterable behind a wrapped decode stream. One decode iterator can be guarded once, so
 * a second iteration is refused with a clear error instead of silently sharing it.
 */
class GuardedDecode implements AsyncIterable<EngineItem> {
  #parts: [PrefillOutcome, DecodeStream, AsyncEngineContext, FlowGuardHooks | undefined] | undefined;

  constructor(
    outcome: PrefillOutcome,
    stream: DecodeStream,
    requestContext: AsyncEngineContext,
    hooks: FlowGuardHooks | undefined,
  ) {
    this.#parts = [outcome, stream, requestContext, hooks];
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<EngineItem> {
    const parts = this.#parts;
    if (parts === undefined) {
      throw new TypeError(
        'This decode stream is already being iterated; a forwarded decode stream can be iterated only once',
      );
    }
    this.#parts = undefined;
    const [outcome, stream, requestContext, hooks] = parts;
    if (hooks !== undefined) hooks.guarded = true;
    return new GuardedDecodeIterator(outcome, stream[Symbol.asyncIterator](), requestContext, stream.context, hooks);
  }
}
