import type { DecodeStream } from '../handoff/prefill-task.js';
import type { EngineItem } from '../protocol/annotated.js';
import type { Lease } from '../routing/worker-pool.js';
import { Controller } from '../runtime/controller.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { DeadlineError, startTimer } from './deadlines.js';
import { DecodeLeg } from './decode-leg.js';
import type { FlowSetup } from './flow-setup.js';
import { migratingStream } from './migrating-stream.js';
import { withTokenIds } from './migration.js';
import type { RequestBody } from './request-shaping.js';
import { Tripwire } from './tripwire.js';

/**
 * What sending a decode leg reads of the run and tells it: the run keeps the leg, the lease
 * and the prefill phase; the dispatch builds the leg and reports where it got.
 *
 * @internal
 */
export interface DecodeDispatchRun {
  readonly setup: FlowSetup;
  /** The decode worker the leg goes to (another one after a retry). */
  readonly decodeLease: Lease<unknown> | undefined;
  prefillRunning(): boolean;
  prefillFailed(): boolean;
  /** The leg now current (a retry replaces the last). */
  legStarted(leg: DecodeLeg): void;
  /** Decode answered the call: its stream is open. */
  decodeOpened(): void;
  /** The leg ended without taking the KV. */
  decodeGaveUp(): void;
}

/** @internal How a decode leg is sent. */
export interface DecodeDispatchOptions {
  /** Decode takes KV a prefill committed (none for an aggregated request). */
  handoff: boolean;
  /** A guard observes the leg's reads while prefill runs. */
  observedAbove?: boolean | undefined;
}

/**
 * Sends the decode leg on its own context (see {@link DecodeLeg}), under decode's first-token
 * budget, and wraps its stream for migration when the request has it on.
 *
 * @internal
 */
export async function dispatchDecode(
  run: DecodeDispatchRun,
  body: RequestBody,
  { handoff, observedAbove = false }: DecodeDispatchOptions,
): Promise<DecodeStream> {
  const { setup } = run;
  const { recorder, migration, deadlines } = setup;
  const decodeLease = run.decodeLease;
  const releaseLeg = recorder.hold();
  /** Decode answered the call (its stream opened): the leg did its part if it also took the KV. */
  let opened = false;
  const leg = new DecodeLeg({
    client: setup.client,
    // A migrating stream times its worker's silence itself: silence is then a break to continue.
    deadlines: migration === undefined ? deadlines : { ...deadlines, idleMs: undefined },
    cleanupBudgetMs: setup.cleanupBudgetMs,
    handoff,
    observedAbove,
    recorder,
    logger: setup.logger,
    prefillPending: () => run.prefillRunning(),
    prefillFailed: () => run.prefillFailed(),
    onEnd: (claimed) => {
      // For the policy: the decode worker holds the prompt once it answered and took the KV.
      decodeLease?.release(opened && claimed ? 'success' : 'failure');
      releaseLeg();
      if (!claimed) run.decodeGaveUp();
    },
  });
  run.legStarted(leg);
  recorder.emit({ type: 'decodeDispatched' });
  // Decode's first-token budget covers the wait for its answer too (a worker that never
  // sends its headers): past it the leg is killed and the dispatch fails with the deadline.
  const budget = deadlines.decodeFirstTokenMs;
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
    const dispatch = setup.decode(sent, engineContext, decodeLease?.worker, setup.endpoint);
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
  run.decodeOpened();
  if (migration === undefined) return leg.open(stream);
  const migrating = migratingStream(stream[Symbol.asyncIterator](), {
    request: setup.request,
    endpoint: setup.endpoint,
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
    logger: setup.logger,
  });
  return leg.open(new ResponseStream(migrating, stream.context));
}
