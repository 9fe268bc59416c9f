import { closeQuietly } from '../handoff/decode-guard.js';
import { PrefillError } from '../handoff/prefill-error.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { CallOrder } from '../util/call-order.js';
import { deadlineIn } from './deadlines.js';
import type { FlowRecorder, Leg } from './events.js';

type Item = Annotated<LLMEngineOutput>;
type Step = IteratorResult<Item, undefined>;

const DONE = Object.freeze({ value: undefined, done: true }) as Step;

/**
 * The leg an error belongs to: a prefill error (or a deadline of prefill's) is prefill's,
 * anything else came from decode.
 *
 * @internal
 */
export function legOf(error: unknown): Leg {
  const deadline = deadlineIn(error);
  if (deadline !== undefined) return deadline.leg;
  return PrefillError.is(error) ? 'prefill' : 'decode';
}

/**
 * What the client sees of an error: a deadline that ended prefill is reported as itself, not
 * as the prefill failure it caused, so that every overrun names its phase.
 *
 * @internal
 */
export function clientError(error: unknown): unknown {
  return deadlineIn(error) ?? error;
}

/** @internal */
export interface ClientStreamHooks {
  recorder: FlowRecorder;
  /** Milliseconds decode's terminal waited for prefill, if it did. */
  heldFor(): number | undefined;
  /**
   * Called once when the client stream is over, before what is behind it is closed; `early`
   * when the consumer closed it before decode's end.
   */
  onEnd(early: boolean): void;
}

/**
 * The stream the client reads: the flow's stream with its one outcome made explicit.
 * It ends after the first terminal item (a finish reason or an error), closing what is
 * behind it, so nothing ever follows a terminal; it reports `firstToken`,
 * `terminalReleased` and the one `finished` event; and it shows a deadline that failed
 * prefill as the `DeadlineError` itself.
 *
 * It never waits for what is behind it to close (`closeQuietly`): `return()` answers at once.
 * Calls of `next()` are answered in the order they were made, and only one read of what is
 * behind is in flight at a time, so a pipelined reader cannot reorder the layers below.
 *
 * @internal
 */
export class ClientStream implements AsyncIterableIterator<Item> {
  readonly #inner: AsyncIterator<Item>;
  readonly #hooks: ClientStreamHooks;
  #done = false;
  /** Closed by the consumer: later calls answer done at once, never queued behind a stuck read. */
  #closed = false;
  #first = true;

  // Created once per stream, never per item.
  readonly #read = (): Promise<Step> => {
    if (this.#done) return Promise.resolve(DONE);
    let pull: Promise<Step>;
    try {
      pull = Promise.resolve(this.#inner.next() as Promise<Step>);
    } catch (error) {
      pull = Promise.reject(error);
    }
    return pull.then(this.#onStep, this.#onError);
  };
  /** One read of what is behind at a time, answered in call order (pipelined readers). */
  readonly #order = new CallOrder(this.#read);

  readonly #onStep = (step: Step): Step => {
    this.#order.settled();
    if (this.#done) return DONE;
    if (step.done === true) {
      this.#end('success');
      return DONE;
    }
    const item = step.value;
    const error = Annotated.err(item);
    if (error !== undefined) {
      const shown = clientError(error) as Error;
      this.#end('error', legOf(error), shown);
      return shown === error ? step : { value: Annotated.fromError<LLMEngineOutput>(shown), done: false };
    }
    const recorder = this.#hooks.recorder;
    if (this.#first) {
      this.#first = false;
      recorder.emit({ type: 'firstToken' });
    }
    const reason = item?.data?.finish_reason;
    if (reason !== undefined && reason !== null) {
      if (FinishReason.isError(reason)) this.#end('error', 'decode', new Error(reason.error));
      else if (FinishReason.isCancelled(reason)) this.#end('cancelled');
      else {
        const heldMs = this.#hooks.heldFor();
        if (heldMs !== undefined) recorder.emit({ type: 'terminalReleased', heldMs });
        this.#end('success');
      }
    }
    return step;
  };

  readonly #onError = (error: unknown): never => {
    this.#order.settled();
    const shown = clientError(error);
    if (!this.#done) this.#end('error', legOf(error), shown instanceof Error ? shown : undefined);
    throw shown;
  };

  constructor(inner: AsyncIterator<Item>, hooks: ClientStreamHooks) {
    this.#inner = inner;
    this.#hooks = hooks;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<Step> {
    if (this.#closed) return Promise.resolve(DONE);
    return this.#order.call();
  }

  return(): Promise<Step> {
    this.#closed = true;
    if (!this.#done) this.#end('cancelled', undefined, undefined, true);
    return Promise.resolve(DONE);
  }

  throw(): Promise<Step> {
    return this.return();
  }

  #end(outcome: 'success' | 'error' | 'cancelled', leg?: Leg, error?: Error, early = false): void {
    this.#done = true;
    this.#hooks.onEnd(early);
    // Whatever is behind us is done too; a source that already ended ignores this.
    closeQuietly(this.#inner);
    this.#hooks.recorder.finish(outcome, leg, error);
  }
}
