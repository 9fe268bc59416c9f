import type { Endpoint } from '../endpoints/endpoint.js';
import { PrefillError } from '../handoff/prefill-error.js';
import {
  type DecodeStream,
  type FlowGuardHooks,
  forwardDecodeWith,
  outcomeOf,
  PrefillTask,
} from '../handoff/prefill-task.js';
import { Annotated } from '../protocol/annotated.js';
import type { EngineItem } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import type { Logger } from '../runtime/logger.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { findCause, neverConnected } from '../util/cause-chain.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { once } from '../util/once.js';
import { workerRendezvous } from './bootstrap-room.js';
import { ClientStream, clientError, legOf } from './client-stream.js';
import { type Connector, elementsOf } from './connectors.js';
import { DeadlineError, type Deadlines, pause, startTimer } from './deadlines.js';
import { DecodeLeg } from './decode-leg.js';
import type { FlowRecorder, Strategy } from './events.js';
import { type MigratingSetup, migratingStream } from './migrating-stream.js';
import { type MigrationPlan, withTokenIds } from './migration.js';
import { classifyPrefill, type PrefillResult } from './prefill-stream.js';
import type { PromptSide } from './prompt-side.js';
import { decodeRequest, type RequestBody } from './request-shaping.js';
import { type PromptTokensDetails, promptDetailsOf } from './usage.js';
import { WatchedIterator } from './watched-iterator.js';
import type { Lease } from './worker-pool.js';

/** An engine leg as the flow calls it: body, context, and the worker chosen for it. */
export type EngineCall = (
  request: RequestBody,
  context: AsyncEngineContext,
  worker: unknown,
) => PromiseLike<ResponseStream<EngineItem>>;

/** @internal */
export interface FlowSetup {
  request: RequestBody;
  /** The API the request came in on. */
  endpoint: Endpoint;
  client: AsyncEngineContext;
  prefill: EngineCall;
  decode: EngineCall;
  connector: Connector;
  prefillLease: Lease<unknown> | undefined;
  decodeLease: Lease<unknown> | undefined;
  /** What the prefill pool's policy expected its worker to hold cached, for the `routed` event. */
  predictedCachedTokens?: number | undefined;
  /** Another decode worker, passing over `avoid` (the pool's `acquire`); none without a pool. */
  reacquireDecode: ((avoid: readonly unknown[]) => Lease<unknown>) | undefined;
  /** The wait before sending a failed sequential decode again, or undefined to fail. */
  retryDecode: ((error: unknown, attempt: number) => number | undefined) | undefined;
  /** Whether a failed decode's handoff may go to another decode worker only when it was never reached. */
  reuseHandoff: 'unreached' | 'always';
  deadlines: Readonly<Deadlines>;
  cleanupBudgetMs: number;
  recorder: FlowRecorder;
  logger: () => Logger;
  /** Decode migration, for a request it is on for (see `migrating-stream`). */
  migration?: FlowMigration | undefined;
  /** The usage was asked of the workers on the client's behalf: its chunks are not the client's. */
  hideUsage?: boolean | undefined;
}

/** @internal What the flow needs to migrate a request's decode stream. */
export interface FlowMigration {
  plan: MigrationPlan;
  limit: number;
  maxSeqLen: number | undefined;
  maxModelLen: number | undefined;
  promptIds: readonly number[] | undefined;
  watchDown: ((worker: unknown, listener: () => void) => () => void) | undefined;
  start: MigratingSetup['start'];
}

/**
 * Interrupts one await at a time with a deadline: `guard(p)` settles like `p` unless
 * `trip(error)` comes first. A promise guarded after the trip rejects at once. Only the
 * current await is reachable from here, never one per item.
 *
 * @internal
 */
export class Tripwire {
  error: DeadlineError | undefined;
  #reject: ((error: unknown) => void) | undefined;

  guard<T>(work: PromiseLike<T>): Promise<T> {
    const guarded = new Promise<T>((resolve, reject) => {
      if (this.error !== undefined) reject(this.error);
      this.#reject = reject;
      Promise.resolve(work).then(resolve, reject);
    });
    const clear = () => {
      this.#reject = undefined;
    };
    guarded.then(clear, clear);
    return guarded;
  }

  trip(error: DeadlineError): void {
    if (this.error !== undefined) return;
    this.error = error;
    this.#reject?.(error);
  }
}

/**
 * Where the prefill leg stands. `reading`: the flow reads its answer itself (the sequential
 * family, and every family until the first output); `background`: a {@link PrefillTask} owns
 * it (concurrent and early families), and the task's own state says whether it still runs, so
 * that it is never kept twice; `done` and `failed`: it is over, once, with its lease released.
 *
 * @internal
 */
export type PrefillPhase =
  | { readonly kind: 'idle' }
  | { readonly kind: 'reading' }
  | { readonly kind: 'background'; readonly task: PrefillTask }
  | { readonly kind: 'done' }
  | { readonly kind: 'failed' };

/** @internal What happens to the prefill leg: it is sent, handed to a background task, or over. */
export type PrefillEvent =
  | { readonly kind: 'dispatched' }
  | { readonly kind: 'handed'; readonly task: PrefillTask }
  | { readonly kind: 'ended'; readonly failed: boolean };

/**
 * The one transition function of {@link PrefillPhase}. An end is final: what ended stays
 * ended, whatever comes after (a task's outcome reported late, a second end).
 *
 * @internal
 */
export function nextPrefill(phase: PrefillPhase, event: PrefillEvent): PrefillPhase {
  if (phase.kind === 'done' || phase.kind === 'failed') return phase;
  switch (event.kind) {
    case 'dispatched':
      return phase.kind === 'idle' ? { kind: 'reading' } : phase;
    case 'handed':
      return { kind: 'background', task: event.task };
    case 'ended':
      return { kind: event.failed ? 'failed' : 'done' };
  }
}

/** @internal Whether prefill still runs in `phase`. */
export function prefillRunning(phase: PrefillPhase): boolean {
  return phase.kind === 'reading' || (phase.kind === 'background' && phase.task.state === 'pending');
}

/** @internal Whether prefill has failed in `phase` (a background task's failure counts at once). */
export function prefillFailed(phase: PrefillPhase): boolean {
  return phase.kind === 'failed' || (phase.kind === 'background' && phase.task.state === 'failed');
}

/**
 * One request through the flow: the state both legs and the deadlines share.
 *
 * @internal
 */
export class FlowRun {
  readonly #setup: FlowSetup;
  readonly #prefillContext: Controller;
  readonly #prefillTrip = new Tripwire();
  readonly #flowTrip = new Tripwire();
  /** Where prefill stands; changed only by {@link nextPrefill}. */
  #prefill: PrefillPhase = { kind: 'idle' };
  #prefillReader: WatchedIterator<EngineItem> | undefined;
  #releasePrefill: (() => void) | undefined;
  #leg: DecodeLeg | undefined;
  /** The decode worker of the current decode leg (another one after a retry). */
  #decodeLease: Lease<unknown> | undefined;
  /** What the client reads, once the request has a stream. */
  readonly #client: ClientStream;
  /** The prefill leg's `prompt_tokens_details`, for the usage the client gets. */
  #promptDetails: PromptTokensDetails | undefined;
  /** What the request asks of its prompt that only prefill computes, if anything. */
  readonly #promptSide: PromptSide | undefined;
  /** The request as the decode leg gets it: without the prompt side's fields. */
  readonly #decodeSource: RequestBody;
  #decodeOpened = false;
  /** The decode leg ended without taking the KV. */
  #decodeGone = false;
  #cancelTotal: () => void;
  #cancelFirstOutput: (() => void) | undefined;
  #cancelHandoff: (() => void) | undefined;
  #unwatchClient: (() => void) | undefined;

  constructor(setup: FlowSetup) {
    this.#setup = setup;
    this.#prefillContext = new Controller(setup.client.id);
    this.#decodeLease = setup.decodeLease;
    this.#promptSide =
      setup.connector.family === 'early' ? undefined : setup.connector.promptSide?.(setup.request, setup.endpoint);
    this.#decodeSource = withoutFields(setup.request, this.#promptSide?.strip);
    this.#client = new ClientStream({
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
      this.#expire(new DeadlineError('total', total as number, this.#prefillRunning() ? 'prefill' : 'decode')),
    );
  }

  /**
   * Runs the request by the connector's family, or aggregated on decode for `skip` (the
   * reason); rejects only before the client stream exists, with every leg of the attempt over
   * (or cleaning up) but the request not yet finished: the caller may try again, or ends it
   * with {@link failed}.
   */
  async start(skip: string | undefined): Promise<ResponseStream<EngineItem>> {
    const { connector, recorder, request } = this.#setup;
    const strategy: Strategy = skip !== undefined ? 'aggregated' : connector.family;
    recorder.emit({
      type: 'routed',
      strategy,
      ...(skip === undefined ? {} : { reason: skip }),
      ...(skip !== undefined || this.#setup.prefillLease === undefined
        ? {}
        : { prefillWorker: this.#setup.prefillLease.worker }),
      ...(this.#setup.decodeLease === undefined ? {} : { decodeWorker: this.#setup.decodeLease.worker }),
      ...(skip !== undefined || this.#setup.predictedCachedTokens === undefined
        ? {}
        : { predictedCachedTokens: this.#setup.predictedCachedTokens }),
    });
    // Until the client stream exists, legs come and go: settled must wait for all of them.
    const releaseStart = recorder.hold();
    try {
      if (skip !== undefined) {
        return this.#toClient(
          await this.#flowTrip.guard(this.#dispatchDecode(decodeRequest(request), { handoff: false })),
        );
      }
      if (connector.family === 'concurrent') return await this.#concurrent();
      return await this.#sequentialOrEarly();
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
    this.#setup.recorder.finish('error', legOf(error), shown instanceof Error ? shown : undefined);
    return shown;
  }

  /** The workers this attempt was given (the decode worker it ended on, after a decode retry). */
  get workers(): { prefill: unknown; decode: unknown } {
    return { prefill: this.#setup.prefillLease?.worker, decode: this.#decodeLease?.worker };
  }

  async #concurrent(): Promise<ResponseStream<EngineItem>> {
    const { connector, request, recorder } = this.#setup;
    // The connector reads its engine's worker fields; one without its own reading gets the
    // SGLang-shaped one (bootstrapHost, bootstrapPort, dpRank, dpSize).
    const worker = this.#setup.prefillLease?.worker;
    const bootstrap =
      connector.rendezvous?.(worker, elementsOf(request)) ??
      workerRendezvous(worker, connector.name, elementsOf(request));
    const side = this.#promptSide;
    // With a prompt side, decode's items wait for prefill's answer, which is merged into them.
    let answered: (() => void) | undefined;
    const prefillAnswered =
      side === undefined
        ? undefined
        : new Promise<void>((resolve) => {
            answered = resolve;
          });
    const task = PrefillTask.spawn(async () => {
      let answer: EngineItem | undefined;
      let whole = false;
      try {
        const reader = await this.#dispatchPrefill(connector.prefillBody(request, bootstrap, this.#setup.endpoint));
        for (let step = await reader.next(); step.done !== true; step = await reader.next()) {
          PrefillTask.checkOutput(step.value);
          answer = step.value;
        }
        whole = true;
      } finally {
        // A failed prefill has nothing to merge (the stream ends with its failure anyway).
        if (side !== undefined) this.#client.mergeWith(side.merge(whole ? answer : undefined));
        answered?.();
      }
    }, this.#taskOptions());
    this.#watch(task);
    recorder.emit({ type: 'handoff', handoff: 'bootstrap' });
    // A rendezvous: the handoff begins now, with both legs sent (decode waits for prefill there).
    this.#startHandoff();
    const body = connector.decodeBody(this.#decodeSource, { kind: 'bootstrap', bootstrap });
    return this.#guarded(task, body, prefillAnswered);
  }

  /**
   * Decode under the watch of a background prefill (`forwardDecode`), with the decode leg's
   * and the client stream's per-item work done by the guard itself while prefill runs.
   */
  async #guarded(task: PrefillTask, body: RequestBody, holdFor?: Promise<void>): Promise<ResponseStream<EngineItem>> {
    const client = this.#client;
    const hooks: FlowGuardHooks = {
      observe: (step) => this.#leg?.observe(step) ?? true,
      answer: client.answerItem,
      end: client.endOfStream,
      fail: client.failure,
    };
    const dispatch =
      holdFor === undefined
        ? () => this.#dispatchDecode(body, { handoff: true, observedAbove: true })
        : () =>
            this.#dispatchDecode(body, { handoff: true, observedAbove: true }).then((stream) =>
              heldUntil(stream, holdFor),
            );
    const stream = await this.#flowTrip.guard(forwardDecodeWith(task, dispatch, this.#setup.client, hooks));
    const iterator = stream[Symbol.asyncIterator]();
    return new ResponseStream(client.readFrom(iterator, hooks.guarded === true), stream.context);
  }

  async #sequentialOrEarly(): Promise<ResponseStream<EngineItem>> {
    const { connector, request, recorder } = this.#setup;
    let result: PrefillResult;
    try {
      const reader = await this.#dispatchPrefill(connector.prefillBody(request, undefined, this.#setup.endpoint));
      result = await classifyPrefill(reader, this.#taskOptions());
    } catch (error) {
      this.#prefillEnded(error);
      throw PrefillError.from(error);
    }
    switch (result.kind) {
      case 'finished': {
        this.#prefillEnded();
        this.#releaseHandoff(result.params, this.#decodeLease);
        const context = this.#setup.client;
        return this.#toClient(new ResponseStream(once(result.output), context));
      }
      case 'early': {
        this.#watch(result.task);
        recorder.emit({ type: 'handoff', handoff: 'bootstrap' });
        const body = connector.decodeBody(request, { kind: 'bootstrap', bootstrap: result.bootstrap });
        return await this.#guarded(result.task, body);
      }
      case 'handoff': {
        this.#prefillEnded();
        recorder.emit({ type: 'handoff', handoff: 'params' });
        if (this.#promptSide !== undefined) this.#client.mergeWith(this.#promptSide.merge(result.output));
        const { promptTokensDetails } = result;
        const body = connector.decodeBody(this.#decodeSource, {
          kind: 'params',
          params: result.params,
          ...(promptTokensDetails === undefined ? {} : { promptTokensDetails }),
        });
        // Dispatched even if the client has gone: the decode worker must take the KV.
        return this.#toClient(await this.#decodeHandoff(body, result.params));
      }
    }
  }

  /**
   * The decode leg of a sequential handoff. Prefill's worker holds the KV until a decode
   * worker takes it, or says it will not: a decode that could not be reached never saw the
   * request, so it can be sent to another decode worker with the same parameters, as
   * `retryDecode` allows (after its backoff, within the request's deadlines). One that was
   * reached and failed may have freed the KV (vLLM's rejection clean-up), so its failure is
   * the answer, unless `reuseHandoff` is `'always'`. Never once decode has answered (it has
   * then taken the KV, and the client may have tokens).
   *
   * A handoff that no decode worker was given in the end (the last one tried could not be
   * reached, and no retry followed) is still held by prefill's worker: it is released through
   * another decode worker of the pool, as for a request prefill finished (see
   * {@link #releaseHandoff}), so that it does not wait for the engine's lease.
   */
  async #decodeHandoff(body: RequestBody, params: unknown): Promise<DecodeStream> {
    const { recorder, reacquireDecode, retryDecode, reuseHandoff } = this.#setup;
    const failed: unknown[] = [];
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#flowTrip.guard(this.#dispatchDecode(body, { handoff: true }));
      } catch (error) {
        const unreached = neverConnected(error);
        const reusable = reuseHandoff === 'always' || unreached;
        const delayMs =
          reusable && this.#flowTrip.error === undefined && reacquireDecode !== undefined
            ? retryDecode?.(error, attempt)
            : undefined;
        if (this.#decodeLease !== undefined) failed.push(this.#decodeLease.worker);
        if (delayMs === undefined) {
          if (unreached) this.#releaseElsewhere(params, failed);
          throw error;
        }
        try {
          // Picked now, so that the event names it; the lease waits with the request.
          this.#decodeLease = reacquireDecode?.(failed);
        } catch {
          throw error; // no decode worker in rotation any more: decode's own failure is the answer
        }
        recorder.emit({
          type: 'decodeRetried',
          attempt: attempt + 1,
          error: error instanceof Error ? error : new Error(String(error)),
          delayMs,
          ...(this.#decodeLease === undefined ? {} : { decodeWorker: this.#decodeLease.worker }),
          ...(failed.length === 0 ? {} : { fromWorker: failed[failed.length - 1] }),
        });
        const wait = pause(delayMs);
        try {
          await this.#flowTrip.guard(wait.done);
        } catch (deadline) {
          this.#decodeLease?.release();
          throw deadline;
        } finally {
          wait.cancel();
        }
      }
    }
  }

  /**
   * The handoff of a decode worker that could not be reached, released through another decode
   * worker of the pool (none in rotation but those that failed: it waits for the engine).
   */
  #releaseElsewhere(params: unknown, failed: readonly unknown[]): void {
    const { connector, reacquireDecode } = this.#setup;
    if (connector.release === undefined || reacquireDecode === undefined) return;
    let lease: Lease<unknown> | undefined;
    try {
      lease = reacquireDecode(failed);
    } catch {
      return; // no decode worker in rotation
    }
    if (failed.includes(lease.worker)) {
      lease.release();
      return;
    }
    this.#releaseHandoff(params, lease);
  }

  /**
   * Prefill's worker holds KV for a decode that will not come (vLLM does, when prefill finished
   * the request at its first token, or when the decode worker given it could not be reached):
   * the connector's release call goes to the decode worker of `lease` in the background,
   * within the clean-up budget, so that the KV is freed now rather than at the engine's lease.
   * The lease is held until that call is over; `settled` waits for it.
   */
  #releaseHandoff(params: unknown, lease: Lease<unknown> | undefined): void {
    const { connector, request, recorder, cleanupBudgetMs } = this.#setup;
    const body = params === undefined ? undefined : connector.release?.(request, params);
    if (body === undefined || lease === undefined) {
      lease?.release();
      return;
    }
    const settle = recorder.hold();
    const context = new Controller(this.#setup.client.id);
    const cancel = startTimer(cleanupBudgetMs, () => context.kill());
    const call = async () => {
      const stream = await this.#setup.decode(body, context, lease.worker);
      const iterator = stream[Symbol.asyncIterator]();
      for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) {
        const error = Annotated.err(step.value);
        if (error !== undefined) throw error;
      }
    };
    call()
      .then(
        () => this.#released(true),
        (error: unknown) => this.#released(answeredBelow500(error), error),
      )
      .finally(() => {
        cancel();
        lease.release();
        settle();
      });
  }

  #released(freed: boolean, error?: unknown): void {
    const { recorder, client } = this.#setup;
    const failure = error === undefined ? undefined : error instanceof Error ? error : new Error(String(error));
    recorder.emit({ type: 'handoffReleased', freed, ...(failure === undefined ? {} : { error: failure }) });
    this.#setup
      .logger()
      [freed ? 'debug' : 'warn'](
        { requestId: client.id, ...(failure === undefined ? {} : { err: failure }) },
        freed
          ? 'Released the KV of a handoff no decode worker took'
          : 'Could not release the KV of a handoff no decode worker took; it waits for the engine to free it',
      );
  }

  /** Sends the prefill leg, on its own context, and reads its answer under prefill's budgets. */
  async #dispatchPrefill(body: RequestBody): Promise<WatchedIterator<EngineItem>> {
    const { deadlines, recorder } = this.#setup;
    this.#prefill = nextPrefill(this.#prefill, { kind: 'dispatched' });
    this.#releasePrefill = recorder.hold();
    recorder.emit({ type: 'prefillDispatched' });
    const firstOutputMs = deadlines.prefillFirstOutputMs;
    this.#cancelFirstOutput = startTimer(firstOutputMs, () =>
      this.#expirePrefill(new DeadlineError('prefillFirstOutput', firstOutputMs as number)),
    );
    const dispatch = Promise.resolve().then(() =>
      this.#setup.prefill(body, this.#prefillContext, this.#setup.prefillLease?.worker),
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
    this.#setup.recorder.emit({ type: 'prefillFirstOutput' });
    this.#startHandoff();
  }

  /** The handoff budget starts at prefill's first output, or at the rendezvous if that came first. */
  #startHandoff(): void {
    if (this.#cancelHandoff !== undefined) return;
    const handoffMs = this.#setup.deadlines.handoffMs;
    this.#cancelHandoff = startTimer(handoffMs, () =>
      this.#expire(new DeadlineError('handoff', handoffMs as number, this.#prefillRunning() ? 'prefill' : 'decode')),
    );
  }

  /**
   * Sends the decode leg on its own context (see {@link DecodeLeg}): `handoff` when decode
   * takes KV a prefill committed (none for an aggregated request), `observedAbove` when a
   * guard observes its reads while prefill runs.
   */
  async #dispatchDecode(
    body: RequestBody,
    { handoff, observedAbove = false }: { handoff: boolean; observedAbove?: boolean },
  ): Promise<DecodeStream> {
    const { recorder } = this.#setup;
    const decodeLease = this.#decodeLease;
    const releaseLeg = recorder.hold();
    /** Decode answered the call (its stream opened): the leg did its part if it also took the KV. */
    let opened = false;
    const { migration, deadlines } = this.#setup;
    const leg = new DecodeLeg({
      client: this.#setup.client,
      // A migrating stream times its worker's silence itself: silence is then a break to continue.
      deadlines: migration === undefined ? deadlines : { ...deadlines, idleMs: undefined },
      cleanupBudgetMs: this.#setup.cleanupBudgetMs,
      handoff,
      observedAbove,
      recorder,
      logger: this.#setup.logger,
      prefillPending: () => this.#prefillRunning(),
      prefillFailed: () => this.#prefillFailed(),
      onEnd: (claimed) => {
        // For the policy: the decode worker holds the prompt once it answered and took the KV.
        decodeLease?.release(opened && claimed ? 'success' : 'failure');
        releaseLeg();
        if (!claimed) this.#decodeGaveUp();
      },
    });
    this.#leg = leg;
    recorder.emit({ type: 'decodeDispatched' });
    // Decode's first-token budget covers the wait for its answer too (a worker that never
    // sends its headers): past it the leg is killed and the dispatch fails with the deadline.
    const budget = this.#setup.deadlines.decodeFirstTokenMs;
    const trip = new Tripwire();
    const cancel = startTimer(budget, () => {
      trip.trip(new DeadlineError('decodeFirstToken', budget as number, 'decode'));
      leg.context.kill();
    });
    let stream: ResponseStream<EngineItem>;
    // Migrating: the worker's call has a context of its own, so that giving it up for silence
    // leaves the leg (and a continuation) alive; it is asked for the token ids a resume needs.
    let engineContext = leg.context;
    if (migration !== undefined) {
      engineContext = new Controller(leg.context.id);
      leg.context.linkChild(engineContext);
    }
    const sent = migration?.plan.kind === 'resume' ? withTokenIds(body) : body;
    try {
      const dispatch = this.#setup.decode(sent, engineContext, decodeLease?.worker);
      if (budget === undefined) stream = await dispatch;
      else {
        // A stream that arrives after the deadline gave up on it is released.
        Promise.resolve(dispatch).then((late) => {
          if (trip.error !== undefined) closeQuietly(late[Symbol.asyncIterator]());
        }, ignore);
        stream = await trip.guard(dispatch);
      }
    } catch (error) {
      leg.dispatchFailed();
      throw error;
    } finally {
      cancel();
    }
    opened = true;
    this.#decodeOpened = true;
    this.#handoffDone();
    if (migration === undefined) return leg.open(stream);
    const migrating = migratingStream(stream[Symbol.asyncIterator](), {
      request: this.#setup.request,
      endpoint: this.#setup.endpoint,
      plan: migration.plan,
      limit: migration.limit,
      maxSeqLen: migration.maxSeqLen,
      maxModelLen: migration.maxModelLen,
      idleMs: deadlines.idleMs,
      promptIds: migration.promptIds,
      worker: decodeLease?.worker,
      // The leg's: a client that left reaches it (once decode has the KV), a continuation with it.
      client: leg.context,
      context: engineContext,
      watchDown: migration.watchDown,
      start: migration.start,
      leftWorker: () => decodeLease?.release('failure'),
      recorder,
      logger: this.#setup.logger,
    });
    return leg.open(new ResponseStream(migrating, stream.context));
  }

  #toClient(stream: ResponseStream<EngineItem>): ResponseStream<EngineItem> {
    return new ResponseStream(this.#client.readFrom(stream[Symbol.asyncIterator](), false), stream.context);
  }

  /**
   * The decode leg ended without taking the KV (its dispatch failed, it failed before
   * answering, or it was given up): a prefill still running waits for a peer that will never
   * come (SGLang's rendezvous, an early handoff) and would hold its connection, its lease and
   * its KV until an engine timeout. It is stopped once the request has finished, so that the
   * client is told decode's failure, not the stop's.
   */
  #decodeGaveUp(): void {
    this.#decodeGone = true;
    if (this.#setup.recorder.finished) this.#stopPeerlessPrefill();
  }

  #stopPeerlessPrefill(): void {
    if (!this.#decodeGone || !this.#prefillRunning()) return;
    this.#setup
      .logger()
      .debug({ requestId: this.#setup.client.id }, 'Stopping a prefill whose decode leg ended without taking the KV');
    this.#prefillContext.kill();
  }

  #clientEnded(): void {
    this.#stopPeerlessPrefill();
    this.#cancelTotal();
    this.#cancelHandoff?.();
    this.#unwatchClient?.();
  }

  #cleanUpBeforeStream(): void {
    this.#clientEnded();
    this.#cancelFirstOutput?.();
    if (this.#leg === undefined) this.#decodeLease?.release();
    if (this.#prefill.kind === 'idle') this.#setup.prefillLease?.release();
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
    const { client, recorder } = this.#setup;
    client.stopped().then(() => {
      const run = link.run;
      link.run = undefined;
      if (run !== undefined && !run.#prefillFailed()) {
        recorder.finish('cancelled');
        // A stream nobody is reading would hold its legs and leases until someone did.
        run.#client.clientLeft();
      }
    }, ignore);
    this.#unwatchClient = () => {
      link.run = undefined;
    };
  }

  #prefillFailed(): boolean {
    return prefillFailed(this.#prefill);
  }

  /**
   * Follows a background prefill (concurrent and early families) to its end: as it settles,
   * before the guard it wakes acts on it, so that `prefillCompleted` comes before the
   * terminal it releases. One listener per request, dropped by the outcome when it settles.
   */
  #watch(task: PrefillTask): void {
    this.#prefill = nextPrefill(this.#prefill, { kind: 'handed', task });
    const outcome = outcomeOf(task);
    if (task.state === 'pending') {
      outcome.listen(() => this.#prefillEnded(task.state === 'failed' ? outcome.error : undefined));
      return;
    }
    task.wait().then(
      () => this.#prefillEnded(),
      (error: unknown) => this.#prefillEnded(error),
    );
  }

  #prefillEnded(error?: unknown): void {
    if (this.#prefill.kind === 'done' || this.#prefill.kind === 'failed') return;
    this.#prefill = nextPrefill(this.#prefill, { kind: 'ended', failed: error !== undefined });
    this.#cancelFirstOutput?.();
    this.#cancelFirstOutput = undefined;
    const { recorder } = this.#setup;
    if (error === undefined) {
      recorder.emit({ type: 'prefillCompleted' });
      this.#leg?.prefillEnded();
      this.#handoffDone();
    } else {
      recorder.emit({ type: 'prefillFailed', error: PrefillError.from(error) });
      // No KV will come: a decode waiting for it is stopped now, not cleaned up later.
      this.#leg?.abandon();
      // The client's next answer is this failure: without a reader, it is read now.
      this.#client.settleUnread();
    }
    this.#setup.prefillLease?.release(error === undefined ? 'success' : 'failure');
    this.#releasePrefill?.();
  }

  /** The handoff is over once prefill has completed and decode's stream is open. */
  #handoffDone(): void {
    if (this.#prefill.kind === 'done' && this.#decodeOpened) {
      this.#cancelHandoff?.();
      this.#cancelHandoff = undefined;
    }
  }

  #prefillRunning(): boolean {
    return prefillRunning(this.#prefill);
  }

  /** A deadline of prefill's: the prefill leg is stopped for good (the router's decision). */
  #expirePrefill(error: DeadlineError): void {
    if (!this.#prefillRunning()) return;
    this.#prefillTrip.trip(error);
    this.#prefillContext.kill();
    this.#prefillReader?.expire(error);
  }

  /** A request deadline (total, handoff): stop what is still running. */
  #expire(error: DeadlineError): void {
    if (this.#setup.recorder.finished) return;
    this.#expirePrefill(error);
    this.#flowTrip.trip(error);
    this.#leg?.expire(error);
  }

  #taskOptions(): { logger: Logger; handled: boolean } {
    // The flow reports a prefill failure itself (the call rejects, or the stream ends with it).
    return { logger: this.#setup.logger(), handled: true };
  }
}

/** `request` without `fields` (the same object when there are none). */
function withoutFields(request: RequestBody, fields: readonly string[] | undefined): RequestBody {
  if (fields === undefined || fields.length === 0) return request;
  const body = { ...request };
  for (const field of fields) delete body[field];
  return body;
}

/**
 * A decode stream whose reads wait for `ready` (prefill's answer, to be merged into them);
 * once it has come, reads go straight to the stream. Closing it closes the stream at once.
 */
function heldUntil(stream: DecodeStream, ready: Promise<void>): DecodeStream {
  const source = stream[Symbol.asyncIterator]();
  let held = true;
  ready.then(() => {
    held = false;
  });
  const iterator: AsyncIterableIterator<EngineItem> = {
    next: () => (held ? ready.then(() => source.next()) : source.next()),
    return: () => {
      closeQuietly(source);
      return Promise.resolve({ value: undefined, done: true });
    },
    [Symbol.asyncIterator]() {
      return iterator;
    },
  };
  return new ResponseStream(iterator, stream.context);
}

/**
 * Whether a release call's failure is an answer of the decode worker's request handler (a
 * status below 500, a 404 for the release's model): on vLLM 0.21 and later that frees the KV.
 * A 5xx may come from something in front of it; a connection failure never reached it.
 */
function answeredBelow500(error: unknown): boolean {
  const status = findCause(error, (cause) => typeof (cause as { status?: unknown }).status === 'number') as
    | { status: number }
    | undefined;
  return status !== undefined && status.status >= 400 && status.status < 500;
}
