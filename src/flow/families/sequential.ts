import { PrefillError } from '../../handoff/prefill-error.js';
import type { DecodeStream } from '../../handoff/prefill-task.js';
import type { EngineItem } from '../../protocol/annotated.js';
import type { Lease } from '../../routing/worker-pool.js';
import { ResponseStream } from '../../runtime/response-stream.js';
import { neverConnected } from '../../util/cause-chain.js';
import { once } from '../../util/once.js';
import { pause } from '../deadlines.js';
import { classifyPrefill, type PrefillResult } from '../prefill-stream.js';
import { releaseElsewhere, releaseHandoff } from '../release-handoff.js';
import type { RequestBody } from '../request-shaping.js';
import { type ConcurrentRun, guarded } from './concurrent.js';

/** @internal What the sequential and early families read of the run. */
export interface SequentialRun extends Omit<ConcurrentRun, 'startHandoff'> {
  /** The decode worker of the current decode leg: a decode retry changes it. */
  decodeLease: Lease<unknown> | undefined;
  /** Prefill is over, failed with `error` when there is one. */
  prefillEnded(error?: unknown): void;
  /** What the client reads of `stream`. */
  toClient(stream: ResponseStream<EngineItem>): ResponseStream<EngineItem>;
}

/**
 * The sequential and early families: prefill is read first; its answer says whether the
 * request is finished, handed off early (decode under a background prefill) or handed off
 * with parameters once prefill is done.
 *
 * @internal
 */
export async function sequentialOrEarly(run: SequentialRun): Promise<ResponseStream<EngineItem>> {
  const { connector, request, recorder } = run.setup;
  let result: PrefillResult;
  try {
    const reader = await run.dispatchPrefill(connector.prefillBody(request, undefined, run.setup.endpoint));
    result = await classifyPrefill(reader, run.taskOptions());
  } catch (error) {
    run.prefillEnded(error);
    throw PrefillError.from(error);
  }
  switch (result.kind) {
    case 'finished': {
      run.prefillEnded();
      releaseHandoff(run.setup, result.params, run.decodeLease);
      const context = run.setup.client;
      return run.toClient(new ResponseStream(once(result.output), context));
    }
    case 'early': {
      run.watch(result.task);
      recorder.emit({ type: 'handoff', handoff: 'bootstrap' });
      const body = connector.decodeBody(request, { kind: 'bootstrap', bootstrap: result.bootstrap });
      return await guarded(run, result.task, body);
    }
    case 'handoff': {
      run.prefillEnded();
      recorder.emit({ type: 'handoff', handoff: 'params' });
      if (run.promptSide !== undefined) run.clientStream.mergeWith(run.promptSide.merge(result.output));
      const { promptTokensDetails } = result;
      const body = connector.decodeBody(run.decodeSource, {
        kind: 'params',
        params: result.params,
        ...(promptTokensDetails === undefined ? {} : { promptTokensDetails }),
      });
      // Dispatched even if the client has gone: the decode worker must take the KV.
      return run.toClient(await decodeHandoff(run, body, result.params));
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
 * {@link releaseHandoff}), so that it does not wait for the engine's lease.
 */
async function decodeHandoff(run: SequentialRun, body: RequestBody, params: unknown): Promise<DecodeStream> {
  const { recorder, reacquireDecode, retryDecode, reuseHandoff } = run.setup;
  const failed: unknown[] = [];
  for (let attempt = 0; ; attempt++) {
    try {
      return await run.flowTrip.guard(run.dispatchDecode(body, { handoff: true }));
    } catch (error) {
      const unreached = neverConnected(error);
      const reusable = reuseHandoff === 'always' || unreached;
      const delayMs =
        reusable && run.flowTrip.error === undefined && reacquireDecode !== undefined
          ? retryDecode?.(error, attempt)
          : undefined;
      if (run.decodeLease !== undefined) failed.push(run.decodeLease.worker);
      if (delayMs === undefined) {
        if (unreached) releaseElsewhere(run.setup, params, failed);
        throw error;
      }
      try {
        // Picked now, so that the event names it; the lease waits with the request.
        run.decodeLease = reacquireDecode?.(failed);
      } catch {
        throw error; // no decode worker in rotation any more: decode's own failure is the answer
      }
      recorder.emit({
        type: 'decodeRetried',
        attempt: attempt + 1,
        error: error instanceof Error ? error : new Error(String(error)),
        delayMs,
        ...(run.decodeLease === undefined ? {} : { decodeWorker: run.decodeLease.worker }),
        ...(failed.length === 0 ? {} : { fromWorker: failed[failed.length - 1] }),
      });
      const wait = pause(delayMs);
      try {
        await run.flowTrip.guard(wait.done);
      } catch (deadline) {
        run.decodeLease?.release();
        throw deadline;
      } finally {
        wait.cancel();
      }
    }
  }
}
