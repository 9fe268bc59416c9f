import type { ServerResponse } from 'node:http';
import type { Strategy } from '../../flow/events.js';
import { NoWorkerError } from '../../routing/worker-pool.js';
import type { ProxyState } from './proxy-state.js';
import type { RequestEvents } from './request-events.js';

/** How answers and the log name each strategy (`x-disagg-strategy`). */
export const STRATEGY_HEADER: Record<Strategy, string> = {
  sequential: 'disaggregated-sequential',
  concurrent: 'disaggregated-concurrent',
  early: 'disaggregated-early',
  aggregated: 'skipped-prefill',
};

/** The one log line of a request, when it is over. */
export function logRequest(
  proxy: ProxyState,
  request: {
    requestId: string;
    clientRequestId: string | undefined;
    /** The endpoint's name. */
    route: string;
    res: ServerResponse;
    events: RequestEvents;
    started: number;
    failure: unknown;
    /** The request's tenant (see `--tenants-file`). */
    tenant?: string;
    /** The priority of the request that took its slot, when it was preempted (`--preempt`). */
    preemptedBy?: number;
    /**
     * The legs no worker was predicted to meet the request's service levels on, where it was
     * served anyway (best effort: its priority is not sheddable); none by default.
     */
    bestEffort?: readonly string[];
  },
): void {
  const { routed, finished } = request.events;
  const name = (worker: { url: string } | undefined) => (worker === undefined ? undefined : proxy.nameOf(worker));
  const verdict = finished ?? noWorkerVerdict(request.failure);
  if (verdict !== undefined) proxy.metrics.verdict(request.res, verdict.outcome, verdict.leg);
  if (finished !== undefined) {
    proxy.metrics.legsFinished(
      { prefill: name(routed?.prefillWorker), decode: name(routed?.decodeWorker) },
      finished.outcome,
      finished.leg,
    );
  }
  proxy.logger.info(
    {
      requestId: request.requestId,
      ...(request.clientRequestId === undefined ? {} : { clientRequestId: request.clientRequestId }),
      route: request.route,
      ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
      strategy: routed === undefined ? undefined : STRATEGY_HEADER[routed.strategy],
      ...(routed?.reason === undefined ? {} : { aggregatedBecause: routed.reason }),
      // Served although no worker was predicted to meet its service levels on these legs.
      ...(request.bestEffort === undefined || request.bestEffort.length === 0
        ? {}
        : { sloBestEffort: request.bestEffort }),
      // Each worker by its name and, in a field of its own, its address (as every line names workers).
      prefillWorker: name(routed?.prefillWorker),
      ...(routed?.prefillWorker === undefined ? {} : { prefillUrl: routed.prefillWorker.url }),
      decodeWorker: name(routed?.decodeWorker),
      ...(routed?.decodeWorker === undefined ? {} : { decodeUrl: routed.decodeWorker.url }),
      // A migrated request: how many times its decode stream broke, and on which workers.
      ...(request.events.brokeOn.length === 0
        ? {}
        : {
            migrations: request.events.brokeOn.length,
            brokenDecodeWorkers: request.events.brokeOn.map((worker) => proxy.nameOf(worker)),
          }),
      outcome: verdict?.outcome,
      leg: verdict?.leg,
      status: request.res.statusCode,
      ...(request.preemptedBy === undefined ? {} : { preempted: true, preemptedBy: request.preemptedBy }),
      durationMs: Math.round(performance.now() - request.started),
      ...(request.failure === undefined ? {} : { err: request.failure }),
    },
    'request finished',
  );
}

/**
 * A request that found no worker in rotation before the flow began (no `finished` then): an
 * error of the leg whose pool had none, so that no error is counted without its leg.
 */
function noWorkerVerdict(failure: unknown): { outcome: 'error'; leg: 'prefill' | 'decode' } | undefined {
  if (!NoWorkerError.is(failure)) return undefined;
  return { outcome: 'error', leg: failure.pool === 'prefill' ? 'prefill' : 'decode' };
}
