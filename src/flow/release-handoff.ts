import { Annotated } from '../protocol/annotated.js';
import type { Lease } from '../routing/worker-pool.js';
import { Controller } from '../runtime/controller.js';
import { findCause } from '../util/cause-chain.js';
import { startTimer } from './deadlines.js';
import type { FlowSetup } from './flow-setup.js';

/** @internal What releasing a handoff reads of the request's setup. */
export type ReleaseSetup = Pick<
  FlowSetup,
  | 'connector'
  | 'request'
  | 'endpoint'
  | 'recorder'
  | 'cleanupBudgetMs'
  | 'decode'
  | 'client'
  | 'logger'
  | 'reacquireDecode'
>;

/**
 * The handoff of a decode worker that could not be reached, released through another decode
 * worker of the pool (none in rotation but those that failed: it waits for the engine).
 *
 * @internal
 */
export function releaseElsewhere(setup: ReleaseSetup, params: unknown, failed: readonly unknown[]): void {
  const { connector, reacquireDecode } = setup;
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
  releaseHandoff(setup, params, lease);
}

/**
 * Prefill's worker holds KV for a decode that will not come (vLLM does, when prefill finished
 * the request at its first token, or when the decode worker given it could not be reached):
 * the connector's release call goes to the decode worker of `lease` in the background,
 * within the clean-up budget, so that the KV is freed now rather than at the engine's lease.
 * The lease is held until that call is over; `settled` waits for it.
 *
 * @internal
 */
export function releaseHandoff(setup: ReleaseSetup, params: unknown, lease: Lease<unknown> | undefined): void {
  const { connector, request, recorder, cleanupBudgetMs } = setup;
  const body = params === undefined ? undefined : connector.release?.(request, params);
  if (body === undefined || lease === undefined) {
    lease?.release();
    return;
  }
  const settle = recorder.hold();
  const context = new Controller(setup.client.id);
  const cancel = startTimer(cleanupBudgetMs, () => context.kill());
  const call = async () => {
    const stream = await setup.decode(body, context, lease.worker, setup.endpoint);
    const iterator = stream[Symbol.asyncIterator]();
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) {
      const error = Annotated.err(step.value);
      if (error !== undefined) throw error;
    }
  };
  call()
    .then(
      () => released(setup, true),
      (error: unknown) => released(setup, answeredBelow500(error), error),
    )
    .finally(() => {
      cancel();
      lease.release();
      settle();
    });
}

function released(setup: ReleaseSetup, freed: boolean, error?: unknown): void {
  const { recorder, client } = setup;
  const failure = error === undefined ? undefined : error instanceof Error ? error : new Error(String(error));
  recorder.emit({ type: 'handoffReleased', freed, ...(failure === undefined ? {} : { error: failure }) });
  setup
    .logger()
    [freed ? 'debug' : 'warn'](
      { requestId: client.id, ...(failure === undefined ? {} : { err: failure }) },
      freed
        ? 'Released the KV of a handoff no decode worker took'
        : 'Could not release the KV of a handoff no decode worker took; it waits for the engine to free it',
    );
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
