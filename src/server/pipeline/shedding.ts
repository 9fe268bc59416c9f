import type { ServiceLevelTargets } from '../../routing/routing-input.js';
import { shedForServiceLevels } from '../../routing/slo/shedding-rule.js';
import { DEFAULT_TENANT } from '../../tenancy/tenants.js';
import { poolLabel } from '../observability/scaling-metrics.js';
import { OverloadedError } from './admission.js';
import type { RequestContext } from './request-context.js';

/** The longest Retry-After a shed request is told, in s: a client with a lax target still comes back soon. */
const MAX_RETRY_AFTER_S = 10;

/**
 * When a shed request may try again, in whole seconds: its TTFT target, rounded up, between 1
 * and {@link MAX_RETRY_AFTER_S}; 1 without one. The prediction that shed it said the work ahead
 * of it would hold its first token past that target; by the time one target has passed, that
 * work has had its own first tokens and the queues it was predicted against have turned over,
 * whereas a retry sooner meets the same queues and the same prediction. An inter-token target
 * alone names no wait; 1 s then, as the proxy's other capacity refusals say.
 *
 * @example
 * sloRetryAfterS({ ttftMs: 2500 }); // 3
 */
export function sloRetryAfterS(levels: ServiceLevelTargets | undefined): number {
  const ttftMs = levels?.ttftMs;
  if (ttftMs === undefined) return 1;
  return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(ttftMs / 1000)));
}

/** The targets of `levels` in words: `TTFT target of 500 ms and ITL target of 20 ms`. */
function targetsOf(levels: ServiceLevelTargets | undefined): string {
  const named = [
    ...(levels?.ttftMs === undefined ? [] : [`TTFT target of ${levels.ttftMs} ms`]),
    ...(levels?.itlMs === undefined ? [] : [`ITL target of ${levels.itlMs} ms`]),
  ];
  return named.length === 0 ? 'service levels' : named.join(' and ');
}

/**
 * What becomes of a request once the scheduler decided: refused when it is sheddable and no
 * worker of one of its legs' pools was predicted to meet its service levels
 * ({@link shedForServiceLevels}); else served, best effort where a leg was unmeetable. A refusal is a 429 {@link OverloadedError} of limit `slo`, its
 * `Retry-After` set on the answer ({@link sloRetryAfterS}) and counted as refused `slo` for its
 * pool and its tenant (after its `admitted`: it was admitted before the decision). The caller
 * releases the decision's leases and answers the error before any worker is called.
 *
 * @internal
 */
export function sloRefusal(request: RequestContext): OverloadedError | undefined {
  const { input, proxy } = request;
  if (!shedForServiceLevels(input)) return undefined;
  const legs = input.unmeetable;
  const levels = input.serviceLevels;
  const retryAfterS = sloRetryAfterS(levels);
  const error = new OverloadedError(
    `No ${legs.join(' or ')} worker is predicted to meet this request's ${targetsOf(levels)}; being sheddable (priority ${input.priority}), it is refused rather than served late; try again in ${retryAfterS} s`,
    retryAfterS,
    'slo',
  );
  request.exchange.setHeader('retry-after', String(retryAfterS));
  proxy.metrics.refused(poolLabel(request.pool), 'slo');
  proxy.metrics.tenantRequest(proxy.tenantLabel(request.tenant ?? DEFAULT_TENANT), 'slo');
  return error;
}
