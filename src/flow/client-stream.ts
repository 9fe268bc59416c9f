import { PrefillError } from '../handoff/prefill-error.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { CallOrder } from '../util/call-order.js';
import { closeQuietly } from '../util/close-quietly.js';
import { DisaggError } from '../util/disagg-error.js';
import { deadlineIn } from './deadlines.js';
import type { FlowRecorder, Leg } from './events.js';
import { type PromptTokensDetails, withoutUsageChunks, withPromptDetails } from './usage.js';

type Step = IteratorResult<EngineItem, undefined>;

const DONE = Object.freeze({ value: undefined, done: true }) as Step;
const toDone = (): Step => DONE;

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
 * The leg a request's failure came from, for a router that answers or retries it: `prefill`
 * for a `PrefillError` or a deadline of prefill's, `decode` for a deadline of decode's or the
 * failure of a decode worker or engine (an `UpstreamError`, a broken stream, the error an
 * engine threw); undefined for a failure of neither leg (no worker in rotation, a request
 * refused before any worker, an option that is wrong).
 *
 * @example
 * failedLeg(await disaggregate(options).catch((error) => error)); // 'prefill' | 'decode' | undefined
 */
export function failedLeg(error: unknown): Leg | undefined {
  if (PrefillError.is(error)) return 'prefill';
  const deadline = deadlineIn(error);
  if (deadline !== undefined) return deadline.leg;
  if (error instanceof TypeError) return undefined;
  if (DisaggError.is(error) && !LEG_CODES.has(error.code)) return undefined;
  return 'decode';
}

/** The library's errors that come from a leg (any other of its errors is a refusal of the request or the router's). */
const LEG_CODES: ReadonlySet<string> = new Set([
  'DISAGG_UPSTREAM_STATUS',
  'DISAGG_UPSTREAM_CONNECTION',
  'DISAGG_UPSTREAM_PROTOCOL',
  'DISAGG_STREAM_ERROR',
  'DISAGG_CLEANUP_EXPIRED',
]);

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
  /** The prefill leg's `prompt_tokens_details`, which the client's usage takes. */
  promptDetails(): PromptTokensDetails | undefined;
  /**
   * The workers were asked for usage the client did not ask for: their usage chunks are taken
   * off the wire of the items (the items' `completion_usage` stays).
   */
  hideUsage: boolean;
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
 * It reads what is behind in one of two ways. Over a guard built with its hooks
 * (`answerItem`, `endOfStream`, `failure`: the concurrent and early families while prefill
 * runs), the guard applies those rules to each answer itself and its answers are handed
 * through: the client stream costs no promise per item. Over anything else it applies them
 * in a `then` of each read, one read at a time, answered in call order ({@link CallOrder}),
 * so that a pipelined reader cannot reorder the layers below.
 *
 * It never waits for what is behind it to close (`closeQuietly`): `return()` answers at once.
 *
 * @internal
 */
export class ClientStream implements AsyncIterableIterator<EngineItem> {
  readonly #hooks: ClientStreamHooks;
  #inner: AsyncIterator<EngineItem> | undefined;
  /** The guard behind applies this stream's rules to its answers. */
  #fused = false;
  #done = false;
  /** The answer of the last call (fused): a call after the end answers after it. */
  #last: Promise<Step> | undefined;
  /** Closed by the consumer: later calls answer done at once, never queued behind a stuck read. */
  #closed = false;
  #first = true;
  /** What prefill computed of the prompt, merged into each item (see {@link mergeWith}). */
  #merge: ((item: EngineItem) => EngineItem) | undefined;
  /** Calls made, and answers given (each answer passes one of the rules below): a read is in flight while they differ. */
  #calls = 0;
  #answers = 0;
  /** An answer given before it was asked for (nobody was reading): the next call's. */
  #owed: Promise<Step> | undefined;
  #iterated = false;
  /** {@link settleUnread} was asked before there was anything to read. */
  #settleWanted = false;
  /** The outcome of a terminal handed to the reader, reported on the reader's next move. */
  #finish: (() => void) | undefined;

  // Created once per stream, never per item.
  readonly #read = (): Promise<Step> => {
    if (this.#done) return Promise.resolve(DONE);
    let pull: Promise<Step>;
    try {
      pull = Promise.resolve((this.#inner as AsyncIterator<EngineItem>).next() as Promise<Step>);
    } catch (error) {
      pull = Promise.reject(error);
    }
    return pull.then(this.#onStep, this.#onError);
  };
  /** One read of what is behind at a time, answered in call order (pipelined readers). */
  readonly #order = new CallOrder(this.#read);

  readonly #onStep = (step: Step): Step => {
    this.#order.settled();
    if (step.done === true) {
      this.endOfStream();
      return DONE;
    }
    const item = this.answerItem(step.value);
    return item === step.value ? step : item === undefined ? DONE : { value: item, done: false };
  };

  readonly #onError = (error: unknown): never => {
    this.#order.settled();
    throw this.failure(error);
  };

  /**
   * What the client gets for an item: the item, the deadline behind an error shown as
   * itself, or undefined (done) once the stream has ended. Records what the item means.
   */
  readonly answerItem = (answered: EngineItem): EngineItem | undefined => {
    this.#answers++;
    if (this.#done) return undefined;
    let item = answered;
    const error = Annotated.err(item);
    if (error !== undefined) {
      const shown = clientError(error) as Error;
      this.#end('error', legOf(error), shown, false, true);
      return shown === error ? item : Annotated.fromError<LLMEngineOutput>(shown);
    }
    const recorder = this.#hooks.recorder;
    // The first token, not the first chunk: chat's opening chunk (the role, no content) is none.
    if (this.#first && !roleOnly(item)) {
      this.#first = false;
      recorder.emit({ type: 'firstToken' });
    }
    if (this.#merge !== undefined) item = this.#merge(item);
    const usage = item?.data?.completion_usage;
    const details = usage === undefined || usage === null ? undefined : this.#hooks.promptDetails();
    if (details !== undefined) item = withPromptDetails(item, details);
    if (this.#hooks.hideUsage && usage !== undefined && usage !== null) item = withoutUsageChunks(item);
    const reason = item?.data?.finish_reason;
    if (reason !== undefined && reason !== null) {
      if (this.#first) {
        // An answer that ends without a token of its own (an empty one): its end is its first.
        this.#first = false;
        recorder.emit({ type: 'firstToken' });
      }
      if (FinishReason.isError(reason)) this.#end('error', 'decode', new Error(reason.error), false, true);
      else if (FinishReason.isCancelled(reason)) this.#end('cancelled', undefined, undefined, false, true);
      else {
        const heldMs = this.#hooks.heldFor();
        if (heldMs !== undefined) recorder.emit({ type: 'terminalReleased', heldMs });
        this.#end('success', undefined, undefined, false, true);
      }
    }
    return item;
  };

  /** What is behind ended by itself: a success, unless the stream had ended already. */
  readonly endOfStream = (): void => {
    this.#answers++;
    if (!this.#done) this.#end('success');
  };

  /** What the client is thrown for a failed read: a deadline as itself. */
  readonly failure = (error: unknown): unknown => {
    this.#answers++;
    const shown = clientError(error);
    if (!this.#done) this.#end('error', legOf(error), shown instanceof Error ? shown : undefined);
    return shown;
  };

  constructor(hooks: ClientStreamHooks) {
    this.#hooks = hooks;
  }

  /**
   * Merges what prefill computed of the prompt into every item from now on (a
   * `PromptSide`'s merge), before the item's usage takes prefill's prompt details.
   */
  mergeWith(merge: ((item: EngineItem) => EngineItem) | undefined): void {
    this.#merge = merge;
  }

  /**
   * Reads `inner` from now on; `fused` when `inner` is a guard that applies `answerItem`,
   * `endOfStream` and `failure` to its answers itself.
   */
  readFrom(inner: AsyncIterator<EngineItem>, fused: boolean): this {
    this.#inner = inner;
    this.#fused = fused;
    // Over before it came (the client left, nobody reading): what is behind ends now.
    if (this.#done) closeQuietly(inner);
    else if (this.#settleWanted) this.settleUnread();
    return this;
  }

  /**
   * The client left (its context was stopped or killed). A stream nobody is reading now (no
   * call waiting for its answer; perhaps never to be read: a router whose client has gone)
   * ends at once, as if its reader had closed it, so that its legs end and their leases are
   * released without a reader; a later read gets one `cancelled` item, then the end. A stream
   * being read goes on to its own end.
   */
  clientLeft(): void {
    if (this.#done || this.#calls > this.#answers) return;
    this.#owed = Promise.resolve({ value: Annotated.fromData(LLMEngineOutput.cancelled()), done: false });
    this.#end('cancelled', undefined, undefined, true);
  }

  /**
   * The request's outcome is known behind (prefill failed: the next answer is its error), and
   * nobody may be reading: that answer is read now, so that the request ends (its outcome
   * reported, its legs closed) without a reader; the next call gets it.
   */
  settleUnread(): void {
    if (this.#inner === undefined) {
      // Not handed over yet: once it is, it is read at once.
      this.#settleWanted = true;
      return;
    }
    if (this.#done || this.#owed !== undefined || this.#calls > this.#answers) return;
    const owed = this.#pull();
    this.#owed = owed;
    // Read for nobody: its outcome is reported as it is known, not on a reader's next move.
    const report = () => this.#flushFinish();
    owed.then(report, report);
  }

  /** @throws {TypeError} for a second iteration: the stream is read once. */
  [Symbol.asyncIterator](): this {
    if (this.#iterated) {
      throw new TypeError("This request's stream is already being iterated; it can be iterated only once");
    }
    this.#iterated = true;
    return this;
  }

  next(): Promise<Step> {
    this.#flushFinish();
    if (this.#closed) return Promise.resolve(DONE);
    const owed = this.#owed;
    if (owed !== undefined) {
      this.#owed = undefined;
      return owed;
    }
    return this.#pull();
  }

  #pull(): Promise<Step> {
    this.#calls++;
    if (!this.#fused) return this.#order.call();
    // The guard answers in call order while the stream runs. Once it has ended here (and the
    // guard was closed), a call is done after the one before it: reads still in flight below
    // may answer later than the closed guard would answer a new call.
    const answer = this.#done
      ? (this.#last ?? Promise.resolve(DONE)).then(toDone, toDone)
      : ((this.#inner as AsyncIterator<EngineItem>).next() as Promise<Step>);
    this.#last = answer;
    return answer;
  }

  return(): Promise<Step> {
    this.#flushFinish();
    this.#closed = true;
    if (!this.#done) this.#end('cancelled', undefined, undefined, true);
    return Promise.resolve(DONE);
  }

  throw(): Promise<Step> {
    return this.return();
  }

  /**
   * Ends the stream: what is behind is closed now (its legs end, their leases are released);
   * the outcome is reported now, or, for a terminal item being handed to the reader
   * (`afterReader`), once the reader is past it (its next call, or its close), so that a
   * listener acting on `finished` finds the last item with the reader.
   */
  #end(outcome: 'success' | 'error' | 'cancelled', leg?: Leg, error?: Error, early = false, afterReader = false): void {
    this.#done = true;
    this.#hooks.onEnd(early);
    // Whatever is behind us is done too; a source that already ended ignores this.
    if (this.#inner !== undefined) closeQuietly(this.#inner);
    const finish = () => this.#hooks.recorder.finish(outcome, leg, error);
    // A reader with a later call already waiting (a pipelined one) is past it already.
    if (afterReader && this.#calls <= this.#answers) this.#finish = finish;
    else finish();
  }

  /** Reports an outcome kept for the reader's next move (see {@link #end}). */
  #flushFinish(): void {
    const finish = this.#finish;
    if (finish === undefined) return;
    this.#finish = undefined;
    finish();
  }
}

/** Chat's opening chunk: a role and no content (no token yet), as vLLM and SGLang send it first. */
function roleOnly(item: EngineItem): boolean {
  const data = item.data;
  if (data === undefined || data === null) return false;
  if ((data.text ?? '') !== '' || data.token_ids.length > 0) return false;
  const chunks = Annotated.wire(item);
  if (chunks === undefined || chunks.length === 0) return false;
  return chunks.every((chunk) => {
    const choices = chunk.json.choices;
    if (!Array.isArray(choices) || choices.length === 0) return false;
    return choices.every((choice: { delta?: Record<string, unknown>; finish_reason?: unknown }) => {
      const delta = choice.delta;
      if (delta === undefined || delta === null || typeof delta.role !== 'string') return false;
      if (choice.finish_reason !== undefined && choice.finish_reason !== null) return false;
      return Object.entries(delta).every(([key, value]) => key === 'role' || value === '' || value === null);
    });
  });
}
