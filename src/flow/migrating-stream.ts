// The decode stream of a request that may migrate: it reads the worker's stream, and when that
// breaks after the first token it continues the generation elsewhere and reads on, so that the
// client reads one stream. See `migration` for which requests qualify and how they continue.
import { completions } from '../endpoints/completions.js';
import type { Endpoint } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import type { Logger } from '../runtime/logger.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { findCause } from '../util/cause-chain.js';
import { closeQuietly, ignore } from '../util/close-quietly.js';
import { briefly } from '../util/worker-text.js';
import { StreamRecord } from './continuation-chunks.js';
import { DeadlineError, pause } from './deadlines.js';
import type { FlowRecorder } from './events.js';
import { type MigrationPlan, resumeBody } from './migration.js';
import type { RequestBody } from './request-shaping.js';

/**
 * Why a stream was taken for broken: an error (the worker's event, a reset, a cut), silence
 * past the idle budget, or its worker taken out of rotation (failed health checks, an open
 * circuit) while it streamed.
 */
export type BreakReason = 'stream_error' | 'idle' | 'worker_down';

/** What a migration came to: continued on another worker, not continued (and why), or a continuation that could not start. */
export type MigrationOutcome = 'migrated' | 'refused' | 'failed';

/** A continuation, started: its stream (the client stream of a request of its own) and the worker it went to. */
export interface ContinuationStart {
  stream: ResponseStream<EngineItem>;
  worker: unknown;
}

/** @internal */
export interface MigratingSetup {
  /** The client's request (as the flow sanitized it). */
  request: RequestBody;
  /** The API it came in on. */
  endpoint: Endpoint;
  plan: MigrationPlan;
  limit: number;
  maxSeqLen: number | undefined;
  maxModelLen: number | undefined;
  /** The budget for each of the first worker's later reads (a continuation has its own flow's). */
  idleMs: number | undefined;
  /** The prompt's ids as the router's tokenizer made them, if it did. */
  promptIds: readonly number[] | undefined;
  /** The worker of the first stream. */
  worker: unknown;
  /** The leg's context: stopped when the client has left (then nothing is continued); a continuation's is its child. */
  client: AsyncEngineContext;
  /** The first stream's context (the engine call's), killed when it is given up for silence. */
  context: Controller;
  /** Watches a worker for being taken out of rotation (its pool's `onDown`); none without a pool. */
  watchDown: ((worker: unknown, listener: () => void) => () => void) | undefined;
  /** Sends a continuation, passing over `avoid`; rejects when none could start. */
  start: (
    body: RequestBody,
    avoid: readonly unknown[],
    context: AsyncEngineContext,
    endpoint: Endpoint,
  ) => Promise<ContinuationStart>;
  /** The first worker is done with (its lease released as failed): called once, at the first break. */
  leftWorker: () => void;
  recorder: FlowRecorder;
  logger: () => Logger;
}

type Read = { kind: 'step'; step: IteratorResult<EngineItem> } | { kind: 'threw'; error: unknown } | { kind: 'idle' };

/**
 * Watches the worker being read for being taken out of rotation: then its call's context is
 * killed, which ends the read under way (no promise is raced per read), and `down` says why.
 */
function watchWorker(setup: MigratingSetup, worker: unknown, context: AsyncEngineContext) {
  const watch = { down: false, cancel: ignore };
  if (setup.watchDown !== undefined && worker !== undefined) {
    watch.cancel = setup.watchDown(worker, () => {
      watch.down = true;
      context.kill();
    });
  }
  return watch;
}

/**
 * The first worker's stream, continued on another worker each time it breaks after its first
 * token (up to `limit` times), for a request `plan` says can be. Items go on rewritten as the
 * client's stream (see {@link StreamRecord}); a break that is not continued ends the stream
 * with its error, as without migration, and the log says why. Each break is a `migration`
 * event. Closing the stream closes whichever worker's stream is being read.
 *
 * @internal
 */
export async function* migratingStream(
  first: AsyncIterator<EngineItem>,
  setup: MigratingSetup,
): AsyncGenerator<EngineItem, void, undefined> {
  const { plan, request } = setup;
  const route = setup.endpoint.answer === 'chat' ? 'chat' : 'completions';
  const record = new StreamRecord(route, request.return_token_ids === true, setup.promptIds);
  let source = first;
  let context: AsyncEngineContext = setup.context;
  let worker = setup.worker;
  let continuing = false;
  const avoid: unknown[] = [];
  let watch = watchWorker(setup, worker, context);
  try {
    for (let attempt = 1; ; ) {
      const read = await readOnce(source, continuing ? undefined : setup.idleMs);
      let error: Error;
      let reason: BreakReason;
      if (watch.down && !record.finished && !isPlainItem(read)) {
        // What the killed call ended with (a cancellation, a cut) is not the stream's end.
        error = new Error('the decode worker was taken out of rotation (failed health checks or an open circuit)');
        reason = 'worker_down';
      } else if (read.kind === 'step') {
        if (read.step.done === true) return;
        const item = read.step.value;
        const failure = Annotated.err(item);
        if (failure === undefined || record.finished) {
          const out = continuing ? record.continued(item) : record.original(item);
          if (out !== undefined) yield out;
          continue;
        }
        error = failure;
        reason = 'stream_error';
      } else if (read.kind === 'threw') {
        error = read.error instanceof Error ? read.error : new Error(String(read.error));
        reason = 'stream_error';
      } else {
        error = new DeadlineError('idle', setup.idleMs as number, 'decode');
        reason = 'idle';
        context.kill();
      }
      watch.cancel();
      closeQuietly(source);
      if (attempt === 1) setup.leftWorker();
      // Before the first token there is nothing to continue: the flow's retries are for that.
      if (record.generatedIds.length === 0 && record.delivered === '') {
        yield Annotated.fromError<LLMEngineOutput>(error);
        return;
      }
      const why = refusal(record, setup, attempt, error);
      const base = { attempt, reason, error, generatedTokens: record.generatedIds.length, fromWorker: worker };
      if (why !== undefined) {
        setup.recorder.emit({ type: 'migration', ...base, outcome: 'refused', why });
        setup
          .logger()
          .warn({ requestId: setup.client.id, err: error, reason, why }, 'Decode stream broke; not migrated');
        yield Annotated.fromError<LLMEngineOutput>(error);
        return;
      }
      const kind = plan.kind === 'resume' && !record.missingIds ? 'resume' : 'replay';
      avoid.push(worker);
      let started: ContinuationStart;
      try {
        const body =
          kind === 'resume'
            ? resumeBody(
                request,
                { promptIds: record.promptIds as readonly number[], generatedIds: record.generatedIds },
                setup.maxModelLen,
                setup.endpoint,
              )
            : { ...request, stream: true };
        const child = new Controller(setup.client.id);
        setup.client.linkChild(child);
        // A resume is a token-id completion; a replay, the client's request again.
        started = await setup.start(body, avoid, child, kind === 'resume' ? completions : setup.endpoint);
        context = child;
      } catch (failure) {
        if (kind === 'resume' && failure instanceof RangeError && /is spent/.test(failure.message)) {
          // Every token of the budget came; only the finish was lost with the worker.
          const why = 'the token budget was all generated: finished with length';
          setup.recorder.emit({ type: 'migration', ...base, outcome: 'migrated', mode: kind, why });
          setup.logger().info({ requestId: setup.client.id, ...briefly(error), reason }, `Decode stream broke; ${why}`);
          const wantsUsage =
            (request.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
          yield record.lengthFinish(wantsUsage);
          return;
        }
        setup.recorder.emit({ type: 'migration', ...base, outcome: 'failed', why: String(failure) });
        setup
          .logger()
          .warn(
            { requestId: setup.client.id, err: error, reason, cause: failure },
            'Decode stream broke; its continuation could not start',
          );
        yield Annotated.fromError<LLMEngineOutput>(error);
        return;
      }
      setup.recorder.emit({ type: 'migration', ...base, outcome: 'migrated', mode: kind, toWorker: started.worker });
      setup.logger().info(
        {
          requestId: setup.client.id,
          ...briefly(error),
          reason,
          attempt,
          mode: kind,
          generatedTokens: base.generatedTokens,
        },
        'Decode stream broke; continued on another worker',
      );
      record.continueAs(kind);
      source = started.stream[Symbol.asyncIterator]();
      worker = started.worker;
      watch = watchWorker(setup, worker, context);
      continuing = true;
      attempt++;
    }
  } finally {
    watch.cancel();
    closeQuietly(source);
  }
}

/** Why a break is not continued, or undefined when it is. */
function refusal(record: StreamRecord, setup: MigratingSetup, attempt: number, error: Error): string | undefined {
  const { plan } = setup;
  if (plan.kind === 'refused') return plan.why;
  if (setup.client.isStopped()) return 'the client has left';
  if (attempt > setup.limit) return `the migration limit (${setup.limit}) is reached`;
  const refusedByWorker = findCause(error, (candidate) => {
    const status = (candidate as { status?: unknown }).status;
    return typeof status === 'number' && status >= 400 && status < 500 && status !== 408 && status !== 429;
  });
  if (refusedByWorker !== undefined) return 'the worker refused the request (a 4xx): another would too';
  if (record.parsed !== undefined) return `the output is in ${record.parsed}, which the chat server parses as a whole`;
  const resume = plan.kind === 'resume' && !record.missingIds;
  if (resume && record.promptIds === undefined) return "the prompt's token ids are not known";
  if (!resume && setup.request.return_token_ids === true) return 'the worker did not return token ids';
  const length = (record.promptIds?.length ?? 0) + record.generatedIds.length;
  if (setup.maxSeqLen !== undefined && length > setup.maxSeqLen) {
    return `the sequence (${length} tokens) is longer than the migration's maximum (${setup.maxSeqLen})`;
  }
  return undefined;
}

/** A read of an item that is neither an error nor a finish (what a killed call does not end with). */
function isPlainItem(read: Read): boolean {
  if (read.kind !== 'step' || read.step.done === true) return false;
  const item = read.step.value;
  const finish = item.data?.finish_reason;
  return !Annotated.isError(item) && (finish === undefined || finish === null);
}

/** One read of `source`, or `idle` when it says nothing for `idleMs` (a timer per read, cancelled). */
async function readOnce(source: AsyncIterator<EngineItem>, idleMs: number | undefined): Promise<Read> {
  const next = Promise.resolve()
    .then(() => source.next())
    .then(
      (step): Read => ({ kind: 'step', step }),
      (error: unknown): Read => ({ kind: 'threw', error }),
    );
  if (idleMs === undefined) return next;
  const wait = pause(idleMs);
  try {
    return await Promise.race([next, wait.done.then((): Read => ({ kind: 'idle' }))]);
  } finally {
    wait.cancel();
    next.then(ignore, ignore);
  }
}
