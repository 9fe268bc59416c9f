import type { OverLimit } from '../../tenancy/rate-window.js';
import { LimitsUnavailableError } from '../../tenancy/redis-windows.js';
import { poolLabel } from '../observability/scaling-metrics.js';
import { OverloadedError, type PreemptedError } from './admission.js';
import { serviceLevelsOf } from './service-levels.js';
import { type RequestStage, refusalOf } from './stage.js';

const LIMIT_WORDS = { requestsPerMinute: 'requests', tokensPerMinute: 'tokens' } as const;

/** The 429 of a tenant over a per-minute limit: which one, how much of it is used, when to try again. */
function overLimit(tenant: string, over: OverLimit): OverloadedError {
  return new OverloadedError(
    `Tenant ${tenant} is over its limit of ${over.allowed} ${LIMIT_WORDS[over.limit]} per minute (${Math.round(over.used)} in the last minute); try again in ${over.retryAfterS} s`,
    over.retryAfterS,
    over.limit === 'requestsPerMinute' ? 'requests_per_minute' : 'tokens_per_minute',
  );
}

/**
 * The request's service levels (its headers, else its tenant's) and its tenant's priority, as
 * the decision reads them; a malformed level is a 400 before anything is counted. Then the
 * tenant's per-minute limits, then a slot of the router's admission (by the tenant's
 * priority, fair between tenants), or a wait for one; a client that leaves meanwhile leaves the
 * queue. Over a limit: a 429 with Retry-After naming it, before any worker is called. With
 * `--preempt`, a request of a host that can end it (the proxy's) may be preempted once under
 * way: counted for its tenant, then ended by its exchange. Once the request is over, the slot
 * is freed and the tokens counted before are corrected by what the answer said it used.
 */
export const admitStage: RequestStage = {
  name: 'admit',
  run: async (request) => {
    const { proxy, exchange } = request;
    const tenant = proxy.tenants.tenantOf(request.headers);
    const label = proxy.tenantLabel(tenant.name);
    request.tenant = tenant.name;
    try {
      request.input.serviceLevels = serviceLevelsOf(request.headers, tenant.slo);
    } catch (error) {
      return refusalOf(request, error);
    }
    // What a sheddable request (below 0) is told apart by once the scheduler has decided.
    request.input.priority = tenant.priority;
    // A tokens-per-minute limit is held to what answers used: every answer must say it.
    request.usageNeeded = tenant.tokensPerMinute !== undefined;
    // Tokens per minute: the prompt's by the router's tokenizer where there is one (only for a
    // tenant so limited: tokenized once, routing reuses the ids), else a quarter of its text.
    const estimate =
      tenant.tokensPerMinute === undefined ? request.input.promptTokens : await request.estimatedTokens();
    let release: () => void;
    try {
      const over = await proxy.limits.take(tenant, estimate);
      if (over !== undefined) throw overLimit(tenant.name, over);
      const ticket = await proxy.admission.enter(exchange.gone, {
        tenant: tenant.name,
        priority: tenant.priority,
        maxConcurrent: tenant.maxConcurrent,
        // Only a host that can end its request itself offers it for preemption (`--preempt`).
        ...(exchange.preempt === undefined
          ? {}
          : {
              preempt: (error: PreemptedError) => {
                if (exchange.preempt?.(error) === true) proxy.metrics.tenantRequest(label, 'preempted');
              },
              // Not while its KV is made or in transit: nothing cancels a prefill, so ending it
              // then would free no worker (and its KV must still be taken or freed).
              stoppable: () => request.events?.handoffOpen !== true,
            }),
      });
      release = () => ticket.release();
    } catch (error) {
      const pool = poolLabel(request.pool);
      if (OverloadedError.is(error)) {
        exchange.setHeader('retry-after', String(error.retryAfterS));
        proxy.metrics.tenantRequest(label, error.limit);
        proxy.metrics.refused(pool, error.limit);
      } else if (LimitsUnavailableError.is(error)) {
        proxy.metrics.tenantRequest(label, 'limits_unavailable');
        proxy.metrics.refused(pool, 'limits_unavailable');
      }
      return refusalOf(request, error);
    }
    proxy.metrics.tenantRequest(label, 'admitted');
    return {
      after: () => {
        release();
        // What the answer said it used, against what was counted for it before.
        const { usage } = request;
        const used = usage === undefined ? estimate : usage.prompt_tokens + usage.completion_tokens;
        // A correction Redis does not take is logged there; nothing waits for it.
        void Promise.resolve(proxy.limits.correct(tenant, used - estimate));
        proxy.metrics.tenantTokens(label, used);
      },
    };
  },
};
