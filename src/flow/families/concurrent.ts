import { type DecodeStream, type FlowGuardHooks, forwardDecodeWith, PrefillTask } from '../../handoff/prefill-task.js';
import type { EngineItem } from '../../protocol/annotated.js';
import type { Logger } from '../../runtime/logger.js';
import { ResponseStream } from '../../runtime/response-stream.js';
import { closeQuietly } from '../../util/close-quietly.js';
import { workerRendezvous } from '../bootstrap-room.js';
import type { ClientStream } from '../client-stream.js';
import { elementsOf } from '../connectors.js';
import type { DecodeDispatchOptions } from '../decode-dispatch.js';
import type { FlowSetup } from '../flow-setup.js';
import type { PromptSide } from '../prompt-side.js';
import type { RequestBody } from '../request-shaping.js';
import type { Tripwire } from '../tripwire.js';
import type { WatchedIterator } from '../watched-iterator.js';

/**
 * What a decode under a background prefill reads of the run (the concurrent and early
 * families).
 *
 * @internal
 */
export interface GuardedRun {
  readonly setup: FlowSetup;
  /** What the client reads. */
  readonly clientStream: ClientStream;
  /** The request's deadlines (total, handoff) as they interrupt an await. */
  readonly flowTrip: Tripwire;
  /** Sends the decode leg (see `decode-dispatch`). */
  dispatchDecode(body: RequestBody, options: DecodeDispatchOptions): Promise<DecodeStream>;
  /** The current decode leg's view of a step a guard read, true without a leg. */
  observeDecode(step: IteratorResult<EngineItem, undefined> | undefined): boolean;
  /** Follows a background prefill to its end. */
  watch(task: PrefillTask): void;
}

/** @internal What the concurrent family reads of the run. */
export interface ConcurrentRun extends GuardedRun {
  /** What the request asks of its prompt that only prefill computes, if anything. */
  readonly promptSide: PromptSide | undefined;
  /** The request as the decode leg gets it: without the prompt side's fields. */
  readonly decodeSource: RequestBody;
  /** Sends the prefill leg and reads it under prefill's budgets. */
  dispatchPrefill(body: RequestBody): Promise<WatchedIterator<EngineItem>>;
  /** Starts the handoff budget (once). */
  startHandoff(): void;
  taskOptions(): { logger: Logger; handled: boolean };
}

/**
 * The concurrent family: both legs sent at once to meet at a rendezvous (SGLang's bootstrap
 * room), prefill read in the background while decode is forwarded.
 *
 * @internal
 */
export async function concurrent(run: ConcurrentRun): Promise<ResponseStream<EngineItem>> {
  const { connector, request, recorder } = run.setup;
  // The connector reads its engine's worker fields; one without its own reading gets the
  // SGLang-shaped one (bootstrapHost, bootstrapPort, dpRank, dpSize).
  const worker = run.setup.prefillLease?.worker;
  const bootstrap =
    connector.rendezvous?.(worker, elementsOf(request)) ??
    workerRendezvous(worker, connector.name, elementsOf(request));
  const side = run.promptSide;
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
      const reader = await run.dispatchPrefill(connector.prefillBody(request, bootstrap, run.setup.endpoint));
      for (let step = await reader.next(); step.done !== true; step = await reader.next()) {
        PrefillTask.checkOutput(step.value);
        answer = step.value;
      }
      whole = true;
    } finally {
      // A failed prefill has nothing to merge (the stream ends with its failure anyway).
      if (side !== undefined) run.clientStream.mergeWith(side.merge(whole ? answer : undefined));
      answered?.();
    }
  }, run.taskOptions());
  run.watch(task);
  recorder.emit({ type: 'handoff', handoff: 'bootstrap' });
  // A rendezvous: the handoff begins now, with both legs sent (decode waits for prefill there).
  run.startHandoff();
  const body = connector.decodeBody(run.decodeSource, { kind: 'bootstrap', bootstrap });
  return guarded(run, task, body, prefillAnswered);
}

/**
 * Decode under the watch of a background prefill (`forwardDecode`), with the decode leg's
 * and the client stream's per-item work done by the guard itself while prefill runs.
 *
 * @internal
 */
export async function guarded(
  run: GuardedRun,
  task: PrefillTask,
  body: RequestBody,
  holdFor?: Promise<void>,
): Promise<ResponseStream<EngineItem>> {
  const client = run.clientStream;
  const hooks: FlowGuardHooks = {
    observe: (step) => run.observeDecode(step),
    answer: client.answerItem,
    end: client.endOfStream,
    fail: client.failure,
  };
  const dispatch =
    holdFor === undefined
      ? () => run.dispatchDecode(body, { handoff: true, observedAbove: true })
      : () =>
          run.dispatchDecode(body, { handoff: true, observedAbove: true }).then((stream) => heldUntil(stream, holdFor));
  const stream = await run.flowTrip.guard(forwardDecodeWith(task, dispatch, run.setup.client, hooks));
  const iterator = stream[Symbol.asyncIterator]();
  return new ResponseStream(client.readFrom(iterator, hooks.guarded === true), stream.context);
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
