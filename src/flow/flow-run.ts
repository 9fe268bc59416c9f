import { PrefillError } from '../handoff/prefill-error.js';
import { type DecodeStream, outcomeOf, type PrefillTask } from '../handoff/prefill-task.js';
import type { EngineItem } from '../protocol/annotated.js';
import type { Lease } from '../routing/worker-pool.js';
import { Controller } from '../runtime/controller.js';
import type { Logger } from '../runtime/logger.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { ClientStream, clientError, legOf } from './client-stream.js';
import { DeadlineError, startTimer } from './deadlines.js';
import { type DecodeDispatchOptions, type DecodeDispatchRun, dispatchDecode } from './decode-dispatch.js';
import type { DecodeLeg } from './decode-leg.js';
import type { Strategy } from './events.js';
import { type ConcurrentRun, concurrent } from './families/concurrent.js';
import { type SequentialRun, sequentialOrEarly } from './families/sequential.js';
import type { FlowSetup } from './flow-setup.js';
import { nextPrefill, type PrefillPhase, prefillFailed, prefillRunning } from './prefill-phase.js';
import type { PromptSide } from './prompt-side.js';
import { decodeRequest, type RequestBody } from './request-shaping.js';
import { Tripwire } from './tripwire.js';
import { type PromptTokensDetails, promptDetailsOf } from './usage.js';
import { WatchedIterator } from './watched-iterator.js';

/**
 * One request through the flow: the state both legs and the deadlines share.
 *
 * @internal
 */
export class FlowRun implements ConcurrentRun, SequentialRun, DecodeDispatchRun {
  /** What the caller gave this request. */
  readonly setup: FlowSetup;
  readonly #prefillContext: Controller;
  readonly #prefillTrip = new Tripwire();
  /** The request's deadlines (total, handoff) as they interrupt the flow's current await. */
  readonly flowTrip = new Tripwire();
  /** Where prefill stands; changed only by {@link nextPrefill}. */
  #prefill: PrefillPhase = { kind: 'idle' };
  #prefillReader: WatchedIterator<EngineItem> | undefined;
  #releasePrefill: (() => void) | undefined;
  #leg: DecodeLeg | undefined;
  /** The decode worker of the current decode leg (another one after a retry). */
  decodeLease: Lease<unknown> | undefined;
  /** What the client reads, once the request has a stream. */
  readonly clientStream: ClientStream;
  /** The prefill leg's `prompt_tokens_details`, for the usage the client gets. */
  #promptDetails: PromptTokensDetails | undefined;
  /** What the request asks of its prompt that only prefill computes, if anything. */
  readonly promptSide: PromptSide | undefined;
  /** The request as the decode leg gets it: without the prompt side's fields. */
  readonly decodeSource: RequestBody;
  #decodeOpened = false;
  /** The decode leg ended without taking the KV. */
  #decodeGone = false;
  #cancelTotal: () => void;
  #cancelFirstOutput: (() => void) | undefined;
  /** The handoff budget; changed by {@link startHandoff}, {@link #handoffDone} and the client's end. */
  #handoff: HandoffClock = { kind: 'unstarted' };
  #unwatchClient: (() => void) | undefined;

  constructor(setup: FlowSetup) {
    this.setup = setup;
    this.#prefillContext = new Controller(setup.client.id);
    this.decodeLease = setup.decodeLease;
    this.promptSide =
      setup.connector.family === 'early' ? undefined : setup.connector.promptSide?.(setup.request, setup.endpoint);
    this.decodeSource = withoutFields(setup.request, this.promptSide?.strip);
    this.clientStream = new ClientStream({
      recorder: setup.recorder,
      heldFor: () => this.#leg?.heldFor(),
      promptDetails: () => this.#promptDetails,
      hideUsage: setup.hideUsage === true,
      onEnd: (early) => {
        if (!early) this.#leg?.clientFinished();
        this.#clientEnded();
      },
    });
    this.#watchClient();
    const total = setup.deadlines.totalMs;
    this.#cancelTotal = startTimer(total, () =>
      this.#expire(new DeadlineError('total', total as number, this.prefillRunning() ? 'prefill' : 'decode')),
    );
  }

  /**
   * Runs the request by the connector's family, or aggregated on decode for `skip` (the
   * reason); rejects only before the client stream exists, with every leg of the attempt over
   * (or cleaning up) but the request not yet finished: the caller may try again, or ends it
   * with {@link failed}.
   */
  async start(skip: string | undefined): Promise<ResponseStream<EngineItem>> {
    const { connector, recorder, request } = this.setup;
    const strategy: Strategy = skip !== undefined ? 'aggregated' : connector.family;
    recorder.emit({
      type: 'routed',
      strategy,
      ...(skip === undefined ? {} : { reason: skip }),
      ...(skip !== undefined || this.setup.prefillLease === undefined
        ? {}
        : { prefillWorker: this.setup.prefillLease.worker }),
      ...(this.setup.decodeLease === undefined ? {} : { decodeWorker: this.setup.decodeLease.worker }),
      ...(skip !== undefined || this.setup.predictedCachedTokens === undefined
        ? {}
        : { predictedCachedTokens: this.setup.predictedCachedTokens }),
    });
    // Until the client stream exists, legs come and go: settled must wait for all of them.
    const releaseStart = recorder.hold();
    try {
      if (skip !== undefined) {
        return this.toClient(
          await this.flowTrip.guard(this.dispatchDecode(decodeRequest(request), { handoff: false })),
        );
      }
      if (connector.family === 'concurrent') return await concurrent(this);
      return await sequentialOrEarly(this);
    } catch (error) {
      this.#cleanUpBeforeStream();
      throw error;
    } finally {
      releaseStart();
    }
  }

  /** The request failed with `error` (no other attempt): its one `finished`; what the caller rejects with. */
  failed(error: unknown): unknown {
    const shown = clientError(error);
    this.setup.recorder.finish('error', legOf(error), shown instanceof Error ? shown : undefined);
    return shown;
  }

  /** The workers this attempt was given (the decode worker it ended on, after a decode retry). */
  get workers(): { prefill: unknown; decode: unknown } {
    return { prefill: this.setup.prefillLease?.worker, decode: this.decodeLease?.worker };
  }

  /** Sends the prefill leg, on its own context, and reads its answer under prefill's budgets. */
  async dispatchPrefill(body: RequestBody): Promise<WatchedIterator<EngineItem>> {
    const { deadlines, recorder } = this.setup;
    this.#prefill = nextPrefill(this.#prefill, { kind: 'dispatched' });
    this.#releasePrefill = recorder.hold();
    recorder.emit({ type: 'prefillDispatched' });
    const firstOutputMs = deadlines.prefillFirstOutputMs;
    this.#cancelFirstOutput = startTimer(firstOutputMs, () =>
      this.#expirePrefill(new DeadlineError('prefillFirstOutput', firstOutputMs as number)),
    );
    const dispatch = Promise.resolve().then(() =>
      this.setup.prefill(body, this.#prefillContext, this.setup.prefillLease?.worker, this.setup.endpoint),
    );
    // A stream that arrives after a deadline gave up on it is released.
    dispatch.then((stream) => {
      if (this.#prefillTrip.error !== undefined) closeQuietly(stream[Symbol.asyncIterator]());
    }, ignore);
    const stream = await this.#prefillTrip.guard(dispatch);
    const reader = new WatchedIterator<EngineItem>(stream[Symbol.asyncIterator](), {
      // Every read: a prefill killed by a deadline may end its stream cleanly, which must not
      // pass for a completed prefill.
      interruptible: true,
      deadline: (phase, ms) => new DeadlineError(phase, ms),
      observe: (step, read) => {
        if (step === undefined || step.done === true) return;
        if (read === 0) this.#firstOutput();
        // What prefill says of the prompt is what the client's usage says (decode's is wrong).
        this.#promptDetails = promptDetailsOf(step.value) ?? this.#promptDetails;
      },
      expired: (error) => Promise.reject(error),
    });
    this.#prefillReader = reader;
    return reader;
  }

  #firstOutput(): void {
    this.#cancelFirstOutput?.();
    this.#cancelFirstOutput = undefined;
    this.setup.recorder.emit({ type: 'prefillFirstOutput' });
    this.startHandoff();
  }

  /** The handoff budget starts at prefill's first output, or at the rendezvous if that came first. */
  startHandoff(): void {
    if (this.#handoff.kind !== 'unstarted') return;
    const handoffMs = this.setup.deadlines.handoffMs;
    this.#handoff = {
      kind: 'timed',
      cancel: startTimer(handoffMs, () =>
        this.#expire(new DeadlineError('handoff', handoffMs as number, this.prefillRunning() ? 'prefill' : 'decode')),
      ),
    };
  }

  /** The handoff budget stops for good (the handoff is over, or the request is). */
  #stopHandoffClock(): void {
    if (this.#handoff.kind === 'timed') this.#handoff.cancel();
    this.#handoff = { kind: 'over' };
  }

  /** What the client reads of `stream` (no guard reads it first). */
  toClient(stream: ResponseStream<EngineItem>): ResponseStream<EngineItem> {
    return new ResponseStream(this.clientStream.readFrom(stream[Symbol.asyncIterator](), false), stream.context);
  }

  /**
   * The decode leg ended without taking the KV (its dispatch failed, it failed before
   * answering, or it was given up): a prefill still running waits for a peer that will never
   * come (SGLang's rendezvous, an early handoff) and would hold its connection, its lease and
   * its KV until an engine timeout. It is stopped once the request has finished, so that the
   * client is told decode's failure, not the stop's.
   */
  decodeGaveUp(): void {
    this.#decodeGone = true;
    if (this.setup.recorder.finished) this.#stopPeerlessPrefill();
  }

  #stopPeerlessPrefill(): void {
    if (!this.#decodeGone || !this.prefillRunning()) return;
    this.setup
      .logger()
      .debug({ requestId: this.setup.client.id }, 'Stopping a prefill whose decode leg ended without taking the KV');
    this.#prefillContext.kill();
  }

  #clientEnded(): void {
    this.#stopPeerlessPrefill();
    this.#cancelTotal();
    this.#stopHandoffClock();
    this.#unwatchClient?.();
  }

  #cleanUpBeforeStream(): void {
    this.#clientEnded();
    this.#cancelFirstOutput?.();
    if (this.#leg === undefined) this.decodeLease?.release();
    if (this.#prefill.kind === 'idle') this.setup.prefillLease?.release();
  }

  /**
   * A client that leaves finishes the request as cancelled, at once: whatever the stream
   * still delivers afterwards goes to nobody, and a router that stops reading never reports
   * an outcome itself. A stop the library makes after a prefill failure is not the client
   * leaving: that request fails with the prefill error. One subscription per request, on the
   * client's own latch; what it reaches is cut once the request is over.
   */
  #watchClient(): void {
    const link = { run: this as FlowRun | undefined };
    const { client, recorder } = this.setup;
    client.stopped().then(() => {
      const run = link.run;
      link.run = undefined;
      if (run !== undefined && !run.prefillFailed()) {
        recorder.finish('cancelled');
        // A stream nobody is reading would hold its legs and leases until someone did.
        run.clientStream.clientLeft();
      }
    }, ignore);
    this.#unwatchClient = () => {
      link.run = undefined;
    };
  }

  /** Whether prefill has failed (see {@link prefillFailed}). */
  prefillFailed(): boolean {
    return prefillFailed(this.#prefill);
  }

  /**
   * Follows a background prefill (concurrent and early families) to its end: as it settles,
   * before the guard it wakes acts on it, so that `prefillCompleted` comes before the
   * terminal it releases. One listener per request, dropped by the outcome when it settles.
   */
  watch(task: PrefillTask): void {
    this.#prefill = nextPrefill(this.#prefill, { kind: 'handed', task });
    const outcome = outcomeOf(task);
    if (task.state === 'pending') {
      outcome.listen(() => this.prefillEnded(task.state === 'failed' ? outcome.error : undefined));
      return;
    }
    task.wait().then(
      () => this.prefillEnded(),
      (error: unknown) => this.prefillEnded(error),
    );
  }

  /** Prefill is over, failed with `error` when there is one; a second end is ignored. */
  prefillEnded(error?: unknown): void {
    if (this.#prefill.kind === 'done' || this.#prefill.kind === 'failed') return;
    this.#prefill = nextPrefill(this.#prefill, { kind: 'ended', failed: error !== undefined });
    this.#cancelFirstOutput?.();
    this.#cancelFirstOutput = undefined;
    const { recorder } = this.setup;
    if (error === undefined) {
      recorder.emit({ type: 'prefillCompleted' });
      this.#leg?.prefillEnded();
      this.#handoffDone();
    } else {
      recorder.emit({ type: 'prefillFailed', error: PrefillError.from(error) });
      // No KV will come: a decode waiting for it is stopped now, not cleaned up later.
      this.#leg?.abandon();
      // The client's next answer is this failure: without a reader, it is read now.
      this.clientStream.settleUnread();
    }
    this.setup.prefillLease?.release(error === undefined ? 'success' : 'failure');
    this.#releasePrefill?.();
  }

  /** Sends the decode leg on its own context (see `decode-dispatch`). */
  dispatchDecode(body: RequestBody, options: DecodeDispatchOptions): Promise<DecodeStream> {
    return dispatchDecode(this, body, options);
  }

  /** The current decode leg's view of a step a guard read (true without a leg). */
  observeDecode(step: IteratorResult<EngineItem, undefined> | undefined): boolean {
    return this.#leg?.observe(step) ?? true;
  }

  /** The decode leg now current (a decode retry replaces the last). */
  legStarted(leg: DecodeLeg): void {
    this.#leg = leg;
  }

  /** Decode answered the call: its stream is open. */
  decodeOpened(): void {
    this.#decodeOpened = true;
    this.#handoffDone();
  }

  /** The handoff is over once prefill has completed and decode's stream is open. */
  #handoffDone(): void {
    if (this.#prefill.kind === 'done' && this.#decodeOpened) this.#stopHandoffClock();
  }

  /** Whether prefill still runs (see {@link prefillRunning}). */
  prefillRunning(): boolean {
    return prefillRunning(this.#prefill);
  }

  /** A deadline of prefill's: the prefill leg is stopped for good (the router's decision). */
  #expirePrefill(error: DeadlineError): void {
    if (!this.prefillRunning()) return;
    this.#prefillTrip.trip(error);
    this.#prefillContext.kill();
    this.#prefillReader?.expire(error);
  }

  /** A request deadline (total, handoff): stop what is still running. */
  #expire(error: DeadlineError): void {
    if (this.setup.recorder.finished) return;
    this.#expirePrefill(error);
    this.flowTrip.trip(error);
    this.#leg?.expire(error);
  }

  /** The options of this request's background prefill task. */
  taskOptions(): { logger: Logger; handled: boolean } {
    // The flow reports a prefill failure itself (the call rejects, or the stream ends with it).
    return { logger: this.setup.logger(), handled: true };
  }
}

/** `request` without `fields` (the same object when there are none). */
function withoutFields(request: RequestBody, fields: readonly string[] | undefined): RequestBody {
  if (fields === undefined || fields.length === 0) return request;
  const body = { ...request };
  for (const field of fields) delete body[field];
  return body;
}

/** The handoff budget: from prefill's first output (or the rendezvous) until the handoff or the request is over. */
type HandoffClock =
  | { readonly kind: 'unstarted' }
  | { readonly kind: 'timed'; readonly cancel: () => void }
  | { readonly kind: 'over' };
