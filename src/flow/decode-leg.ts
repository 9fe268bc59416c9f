import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import type { Logger } from '../runtime/logger.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { once } from '../util/once.js';
import { DeadlineError, type Deadlines, startTimer } from './deadlines.js';
import type { FlowRecorder } from './events.js';
import { WatchedIterator } from './watched-iterator.js';

type Step = IteratorResult<EngineItem, undefined>;

/**
 * The client had gone, and the decode worker did not take the KV prefill had committed for
 * it within the clean-up budget. The decode leg was killed; the prefill worker may hold the
 * KV until its own timeout (an orphaned handoff, counted by {@link orphanedHandoffs}). It is
 * a cancellation: nobody is waiting for this request any more, so it is reported through the
 * logger (warn) and the `cleanupExpired` event, not to a client.
 */
export class CleanupError extends DisaggError {
  static override readonly is = branded<CleanupError>('CleanupError');
  declare readonly code: 'DISAGG_CLEANUP_EXPIRED';
  readonly kind = 'cleanup';
  readonly budgetMs: number;
  readonly retryable = false;

  constructor(requestId: string, budgetMs: number) {
    super(
      'DISAGG_CLEANUP_EXPIRED',
      `Handoff clean-up gave up: decode did not take the KV of request ${requestId} within ${budgetMs} ms after the client left`,
    );
    this.budgetMs = budgetMs;
  }
}

let orphaned = 0;

/** How many handoffs this process gave up cleaning up (each a {@link CleanupError}). */
export function orphanedHandoffs(): number {
  return orphaned;
}

/** The default clean-up budget: how long decode may take to claim the KV once the client has gone. */
export const DEFAULT_CLEANUP_BUDGET_MS = 120_000;

const LIVE = 0;
const STOP = 1;
const KILL = 2;

/** @internal */
export interface DecodeLegOptions {
  client: AsyncEngineContext;
  deadlines: Readonly<Deadlines>;
  cleanupBudgetMs: number;
  /** False when no KV is handed to this leg (aggregated): a client stop reaches it at once. */
  handoff: boolean;
  /**
   * A guard reads this leg while prefill runs and passes each step to {@link DecodeLeg.observe}
   * (concurrent and early families): the leg's own reader then watches only reads of its own.
   */
  observedAbove?: boolean | undefined;
  recorder: FlowRecorder;
  logger: () => Logger;
  /** Whether prefill is still running (a decode terminal then waits: `terminalHeld`). */
  prefillPending: () => boolean;
  /** Whether prefill has failed (read synchronously: then no KV will come). */
  prefillFailed: () => boolean;
  /**
   * Called once when the leg is over: its stream ended, or it was cleaned up or given up;
   * `claimed` says whether decode had taken the KV (answered) by then.
   */
  onEnd: (claimed: boolean) => void;
}

/**
 * The decode leg of one request, on its own context with the client's id.
 *
 * A client that leaves reaches decode only once decode has answered for the first time: until
 * then the decode worker has not taken the KV prefill committed for it, and cancelling it
 * would strand that KV on the prefill worker. So a client stop (or a consumer that closes the
 * stream) before that first answer turns the leg into a clean-up: decode is read until it
 * answers, then stopped; if it has not answered within the clean-up budget, it is killed and
 * the handoff counted as orphaned. After the first answer a client stop or kill is passed on
 * at once.
 *
 * It also times decode (first token and idle budgets, counting only time spent waiting on
 * decode) and reports its part of the request's events.
 *
 * @internal
 */
export class DecodeLeg {
  /** The context the decode engine gets. */
  readonly context: Controller;
  readonly #options: DecodeLegOptions;
  /** Where the leg stands; changed only by {@link nextPhase}. */
  #phase: LegPhase = { kind: 'reading' };
  #clientLeft: typeof LIVE | typeof STOP | typeof KILL = LIVE;
  #finishedOutput = false;
  #heldAt: number | undefined;
  #source: AsyncIterator<EngineItem> | undefined;
  #sourceClosed = false;
  #iterator: WatchedIterator<EngineItem> | undefined;
  #pendingExpiry: DeadlineError | undefined;
  #lastObserved: Step | undefined;
  #cancelCleanup: (() => void) | undefined;
  /** Decode has taken the KV (or there was none to take). */
  get #claimed(): boolean {
    return this.#phase.kind === 'claimed' || (this.#phase.kind === 'ended' && this.#phase.claimed);
  }

  /** The leg is over. */
  get #ended(): boolean {
    return this.#phase.kind === 'ended';
  }

  /** The consumer closed the stream, or will never read it. */
  get #abandoned(): boolean {
    const phase = this.#phase;
    return phase.kind === 'cleaning-up' || (phase.kind !== 'reading' && phase.abandoned);
  }

  /** What the client's stop and kill subscriptions reach; cleared when the leg ends. */
  readonly #link: { leg: DecodeLeg | undefined };

  constructor(options: DecodeLegOptions) {
    this.#options = options;
    this.context = new Controller(options.client.id);
    // Without a handoff there is no KV to claim: the leg starts claimed.
    if (!options.handoff) this.#phase = nextPhase(this.#phase, 'claim');
    // Once per request, on the client's own latches; the link is cut when the leg ends so a
    // long-lived client context does not keep the leg (and its stream) alive.
    const link = { leg: this as DecodeLeg | undefined };
    this.#link = link;
    const { client } = options;
    const left = (strength: typeof STOP | typeof KILL) => {
      const leg = link.leg;
      if (leg !== undefined) leg.#left(strength);
    };
    client.stopped().then(() => left(client.isKilled() ? KILL : STOP), ignore);
    client.killed().then(() => left(KILL), ignore);
  }

  /**
   * Wraps the decode engine's stream. When the client has already gone, the stream is read
   * here for the clean-up and the client gets a stream of one `cancelled` item instead.
   */
  open(stream: ResponseStream<EngineItem>): ResponseStream<EngineItem> {
    const { recorder, deadlines } = this.#options;
    recorder.emit({ type: 'decodeOpened' });
    const source = stream[Symbol.asyncIterator]();
    this.#source = source;
    if (this.#ended) {
      // Given up (clean-up budget) before the stream came: release it.
      this.context.kill();
      this.#closeSource();
      return cancelledStream(stream.context);
    }
    if (this.#clientLeft !== LIVE || this.#pendingExpiry !== undefined) {
      this.#phase = nextPhase(this.#phase, 'abandon');
      this.#drainForClaim(source);
      return cancelledStream(stream.context);
    }
    const iterator = new WatchedIterator<EngineItem>(source, {
      // A request deadline (total, handoff) must be able to interrupt any read.
      interruptible: deadlines.totalMs !== undefined || deadlines.handoffMs !== undefined,
      budgets: {
        ...(deadlines.decodeFirstTokenMs === undefined
          ? {}
          : { first: { ms: deadlines.decodeFirstTokenMs, phase: 'decodeFirstToken' } }),
        ...(deadlines.idleMs === undefined ? {} : { later: { ms: deadlines.idleMs, phase: 'idle' } }),
      },
      deadline: (phase, ms) => new DeadlineError(phase, ms, 'decode'),
      observe: (step) => this.observe(step),
      observing: this.#watching(),
      expired: (error) => Promise.resolve({ value: Annotated.fromError<LLMEngineOutput>(error), done: false }),
      onExpired: (_, expiring) => this.#expired(expiring),
      onClose: (closing) => this.#close(closing),
    });
    this.#iterator = iterator;
    return new ResponseStream(iterator, stream.context);
  }

  /**
   * Prefill is over (the flow calls this as it settles): a leg that a guard watched while
   * prefill ran watches its own reads again until decode has taken the KV.
   */
  prefillEnded(): void {
    this.#updateWatch();
  }

  /**
   * Whether the leg's own reader watches its reads. Once decode has taken the KV and prefill
   * is over there is nothing left to watch per item: the leg ends when the client stream
   * closes it. While prefill runs, a guard above may watch the reads for the leg, at no cost
   * of its own.
   */
  #watching(): boolean {
    const pending = this.#options.prefillPending();
    return this.#options.observedAbove ? !this.#claimed && !pending : !this.#claimed || pending;
  }

  #updateWatch(): void {
    if (this.#iterator !== undefined) this.#iterator.observing = this.#watching();
  }

  /** The dispatch failed: there is no decode to wait for. */
  dispatchFailed(): void {
    this.#end();
  }

  /**
   * Prefill failed: no KV will come, so decode is killed and its stream closed now instead of
   * being cleaned up. Nothing more from decode is forwarded after a prefill failure (the guard
   * answers with the prefill error), and nobody may be reading it any more. A stream that
   * opens later is released.
   */
  abandon(): void {
    if (this.#ended) return;
    this.context.kill();
    this.#closeSource();
    this.#end();
  }

  /**
   * A request deadline ran out: a pending read answers with the error item; a stream not yet
   * open is cleaned up when it opens (the KV may be committed).
   */
  expire(error: DeadlineError): void {
    if (this.#ended) return;
    if (this.#iterator !== undefined) {
      this.#iterator.expire(error);
      return;
    }
    this.#pendingExpiry = error;
    this.#startCleanupBudget();
  }

  /**
   * The client stream has ended with decode's own end (a terminal or error item, the end, or
   * a failed read): nothing is left to stop, and the leg is over. (Once decode has taken the KV
   * and prefill is over, reads are not observed, so this is how the leg learns it.)
   */
  clientFinished(): void {
    // A deadline ended the client's stream before decode answered: the clean-up owns the leg.
    if (this.#abandoned && !this.#claimed) return;
    this.#finishedOutput = true;
    this.#closeSource();
    this.#end();
  }

  /** Milliseconds the decode terminal has waited for prefill, or undefined if it did not. */
  heldFor(): number | undefined {
    return this.#heldAt === undefined ? undefined : this.#options.recorder.elapsed() - this.#heldAt;
  }

  /**
   * Sees one step read from decode (undefined: the read failed), from the leg's own reader or
   * a guard above. A step seen twice (a read the leg started for a departed client, then
   * handed to the guard) counts once. Answers whether every later read is wanted too.
   */
  observe(step: Step | undefined): boolean {
    // Once decode has taken the KV (at its first answer, this one), plain items tell the leg
    // nothing more: a guard watching for it need only show it terminals, failures and the end.
    if (step !== undefined && step === this.#lastObserved) return false;
    this.#lastObserved = step;
    if (!this.#claimed) this.#claim();
    this.#see(step);
    return false;
  }

  #see(step: Step | undefined): void {
    if (step === undefined || step.done === true) {
      this.#end();
      return;
    }
    const item = step.value;
    const reason = item?.data?.finish_reason;
    const terminal = reason !== undefined && reason !== null;
    if (terminal || Annotated.isError(item)) this.#finishedOutput = true;
    if (terminal && !FinishReason.isFailure(reason) && this.#options.prefillPending()) {
      this.#heldAt = this.#options.recorder.elapsed();
      this.#options.recorder.emit({ type: 'terminalHeld' });
    }
  }

  #claim(): void {
    this.#phase = nextPhase(this.#phase, 'claim');
    this.#updateWatch();
    this.#cancelCleanup?.();
    this.#cancelCleanup = undefined;
    this.#options.recorder.emit({ type: 'kvClaimed' });
    if (this.#clientLeft === KILL) this.context.kill();
    else if (this.#clientLeft === STOP) this.context.stopGenerating();
    if (this.#abandoned) {
      this.#closeSource();
      this.context.stopGenerating();
      this.#end();
    }
  }

  #left(strength: typeof STOP | typeof KILL): void {
    if (this.#ended || this.#clientLeft >= strength) return;
    // The library stops the client itself when prefill fails: nothing to clean up then.
    if (this.#options.prefillFailed()) {
      this.abandon();
      return;
    }
    this.#clientLeft = strength;
    if (this.#claimed) {
      if (strength === KILL) this.context.kill();
      else this.context.stopGenerating();
      return;
    }
    this.#startCleanupBudget();
    // Nobody may be reading: read for the claim now (kept for the next read, so nothing is lost).
    const iterator = this.#iterator;
    if (iterator !== undefined && iterator.reads === 0) iterator.prefetch();
  }

  /**
   * A deadline ended the client's view of decode. Once decode has taken the KV it is killed;
   * before that it may hold the only claim on KV prefill committed, so it is cleaned up like a
   * stream whose client left: read until it answers (within the clean-up budget), then stopped.
   */
  #expired(source: AsyncIterator<EngineItem>): void {
    if (this.#claimed || this.#options.prefillFailed()) {
      this.context.kill();
      this.#closeSource();
      this.#end();
      return;
    }
    this.#cleanUp(source);
  }

  /** The consumer closed the stream (the guard closes decode this way too). */
  #close(source: AsyncIterator<EngineItem>): void {
    if (this.#claimed || this.#ended || this.#options.prefillFailed()) {
      this.#phase = nextPhase(this.#phase, 'abandon');
      this.#closeSource();
      // A decode that already sent its terminal has nothing left to stop; a client that was
      // killed (not only stopped) has its decode killed too.
      if (!this.#finishedOutput && !this.#ended) {
        if (this.#options.client.isKilled()) this.context.kill();
        else this.context.stopGenerating();
      }
      this.#end();
      return;
    }
    this.#cleanUp(source);
  }

  /**
   * Nobody reads decode for a client any more, but it may hold the only claim on KV prefill
   * committed: read it until it answers (a read in flight will; otherwise one more read),
   * within the clean-up budget, then stop it (`#claim`).
   */
  #cleanUp(source: AsyncIterator<EngineItem>): void {
    this.#phase = nextPhase(this.#phase, 'abandon');
    this.#startCleanupBudget();
    if ((this.#iterator as WatchedIterator<EngineItem>).reads === 0) this.#drainForClaim(source);
  }

  #drainForClaim(source: AsyncIterator<EngineItem>): void {
    this.#startCleanupBudget();
    let read: Promise<unknown>;
    try {
      read = Promise.resolve(source.next());
    } catch (error) {
      read = Promise.reject(error);
    }
    const answered = () => {
      if (!this.#claimed && !this.#ended) this.#claim();
      else this.#closeSource(); // the leg ended meanwhile (prefill failed, or gave up)
    };
    read.then(answered, answered);
  }

  #startCleanupBudget(): void {
    if (this.#cancelCleanup !== undefined || this.#claimed || this.#ended) return;
    const { cleanupBudgetMs } = this.#options;
    this.#cancelCleanup = startTimer(cleanupBudgetMs, () => this.#giveUp(cleanupBudgetMs));
  }

  #giveUp(budgetMs: number): void {
    this.#cancelCleanup = undefined;
    if (this.#claimed || this.#ended) return;
    orphaned++;
    const error = new CleanupError(this.context.id, budgetMs);
    this.context.kill();
    this.#closeSource();
    this.#options.logger().warn({ err: error, requestId: this.context.id }, 'Orphaned handoff');
    this.#options.recorder.emit({ type: 'cleanupExpired', error });
    this.#end();
  }

  /** Closes decode's iterator once, without waiting for it. */
  #closeSource(): void {
    if (this.#source === undefined || this.#sourceClosed) return;
    this.#sourceClosed = true;
    closeQuietly(this.#source);
  }

  #end(): void {
    if (this.#ended) return;
    this.#phase = nextPhase(this.#phase, 'end');
    this.#cancelCleanup?.();
    this.#cancelCleanup = undefined;
    this.#link.leg = undefined;
    this.#options.onEnd(this.#claimed);
  }
}

/**
 * Where a decode leg stands:
 * - `reading`: decode has not answered yet, and the client reads it;
 * - `cleaning-up`: nobody reads it for a client any more, but it may hold the only claim on the
 *   KV prefill committed, so it is read until it answers, within the clean-up budget;
 * - `claimed`: decode has answered, so it has taken the KV (`abandoned`: its reader has gone);
 * - `ended`: the leg is over, with whether decode had claimed the KV and its reader had gone
 *   (a late first answer still counts as the claim).
 *
 * @internal
 */
export type LegPhase =
  | { readonly kind: 'reading' }
  | { readonly kind: 'cleaning-up' }
  | { readonly kind: 'claimed'; readonly abandoned: boolean }
  | { readonly kind: 'ended'; readonly claimed: boolean; readonly abandoned: boolean };

/**
 * The one transition function of {@link LegPhase}: decode answered (`claim`), its reader went
 * away (`abandon`), or the leg is over (`end`). Every event is allowed in every phase: what has
 * happened stays happened (an ended leg stays ended, a claim stays a claim).
 *
 * @internal
 */
export function nextPhase(phase: LegPhase, event: 'claim' | 'abandon' | 'end'): LegPhase {
  switch (phase.kind) {
    case 'reading':
      if (event === 'claim') return { kind: 'claimed', abandoned: false };
      if (event === 'abandon') return { kind: 'cleaning-up' };
      return { kind: 'ended', claimed: false, abandoned: false };
    case 'cleaning-up':
      if (event === 'claim') return { kind: 'claimed', abandoned: true };
      if (event === 'abandon') return phase;
      return { kind: 'ended', claimed: false, abandoned: true };
    case 'claimed':
      if (event === 'claim') return phase;
      if (event === 'abandon') return { kind: 'claimed', abandoned: true };
      return { kind: 'ended', claimed: true, abandoned: phase.abandoned };
    case 'ended':
      if (event === 'claim') return { ...phase, claimed: true };
      if (event === 'abandon') return { ...phase, abandoned: true };
      return phase;
  }
}

function cancelledStream(context: AsyncEngineContext): ResponseStream<EngineItem> {
  return new ResponseStream(once(Annotated.fromData(LLMEngineOutput.cancelled())), context);
}
