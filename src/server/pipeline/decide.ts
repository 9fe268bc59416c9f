import type { Avoid, Decision } from '../../routing/scheduler.js';
import { NoWorkerError } from '../../routing/worker-pool.js';
import { libraryLogger } from '../../runtime/library-logger.js';
import type { ModelPool } from '../fleet/pool-set.js';
import { poolLabel } from '../observability/scaling-metrics.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { RequestContext } from './request-context.js';
import { sloRefusal } from './shedding.js';

/**
 * The P/D decider's verdict for a request of `pool`: the reason to serve it on decode alone
 * (`'short-prompt'`, `'decode-cached'`, a sidecar's `'no-prefill-header'`), or undefined to
 * disaggregate it. Asked once per request, by the prepare stage; a decider that throws is
 * logged and the request disaggregated.
 *
 * @internal
 */
export async function verdictOf(request: RequestContext, pool: ModelPool): Promise<string | undefined> {
  try {
    // The pool's scheduler holds its deciders; the flow, asking again, gets the same answer.
    return await pool.scheduler.verdict(request.input);
  } catch (error) {
    libraryLogger(request.proxy.logger).warn(
      { err: error, requestId: request.requestId },
      'The P/D decider failed; disaggregating the request',
    );
    return undefined;
  }
}

/**
 * The one decision for a request once its stages let it on: the workers of its pool, as the
 * pool's scheduler picks them with the verdict the prepare stage found; for a passthrough
 * endpoint, a decode worker alone (`'passthrough'`). Passes over `avoid` while others are in
 * rotation. At the request's first decision (`attempt` 0, before any worker is called), a
 * sheddable request no worker was predicted to meet the service levels of is refused
 * ({@link sloRefusal}), its leases released. The leases are the caller's to release.
 *
 * @throws {NoWorkerError} when no worker is in rotation for a leg it needs (counted as refused
 *   `no-worker` for the pool); nothing is leased then. {OverloadedError} (limit `slo`) for a
 *   sheddable request shed; nothing is leased then either.
 *
 * @internal
 */
export function decide(
  request: RequestContext,
  avoid: Avoid<ProxyPrefillWorker, ProxyDecodeWorker> = {},
  attempt = 0,
): Decision<ProxyPrefillWorker, ProxyDecodeWorker> {
  // The resolve stage refused a request no pool serves.
  const pool = request.pool as ModelPool;
  let decision: Decision<ProxyPrefillWorker, ProxyDecodeWorker>;
  try {
    decision =
      request.endpoint.serving !== 'disaggregated'
        ? { strategy: 'aggregated', reason: 'passthrough', decode: pool.decode.acquire(avoid.decode, request.input) }
        : pool.scheduler.decide(request.input, avoid, request.verdict);
  } catch (error) {
    if (NoWorkerError.is(error)) request.proxy.metrics.refused(poolLabel(pool), 'no-worker');
    throw error;
  }
  const shed = attempt === 0 ? sloRefusal(request) : undefined;
  if (shed !== undefined) {
    // Given back untouched: no worker was called, none is at fault.
    if (decision.strategy === 'disaggregated') decision.prefill?.release();
    decision.decode?.release();
    throw shed;
  }
  return decision;
}
