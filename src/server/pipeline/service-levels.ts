// The service levels a request asks for, from its headers or its tenant's defaults: what the
// SLO-aware plugins route by, and what a sheddable request is refused early for.

import { UnsupportedRequestError } from '../../flow/request-shaping.js';
import { headerValue } from '../../http/node-server.js';
import type { ServiceLevelTargets } from '../../routing/routing-input.js';
import type { RequestHeaders } from './exchange.js';

/**
 * The headers a request names its targets in, in ms, ours first: where both are given, ours
 * win. llm-d's names are the Gateway API Inference Extension's, read there as a float in ms,
 * positive (`x-slo-ttft-ms`, `x-slo-tpot-ms`: kubernetes-sigs/gateway-api-inference-extension
 * pkg/epp/framework/plugins/requestcontrol/admission/latencyadmission/latency_admission.go,
 * and scheduling/scorer/predictedlatency/headers.go, which answers a malformed one
 * BadRequest). Its time per output token is the mean gap between tokens, our inter-token level.
 */
export const SERVICE_LEVEL_HEADERS = {
  ttftMs: ['x-disagg-slo-ttft-ms', 'x-slo-ttft-ms'],
  itlMs: ['x-disagg-slo-itl-ms', 'x-slo-tpot-ms'],
} as const satisfies Record<keyof ServiceLevelTargets, readonly string[]>;

/** A plain decimal number (a fraction, an exponent): what a Go `ParseFloat` takes, less its hex, `inf` and `nan`. */
const DECIMAL = /^(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;

/**
 * The service levels of a request with `headers`, whose tenant's defaults are `defaults`: each
 * target from the first of its headers the request sends ({@link SERVICE_LEVEL_HEADERS}), else
 * the tenant's. Undefined when neither gives any.
 *
 * @example
 * serviceLevelsOf({ 'x-slo-ttft-ms': '500', 'x-disagg-slo-ttft-ms': '250' }, { itlMs: 50 });
 * // { ttftMs: 250, itlMs: 50 }
 *
 * @throws {UnsupportedRequestError} (a 400 naming the header) for a value read that is not a
 *   positive number of ms.
 */
export function serviceLevelsOf(
  headers: RequestHeaders,
  defaults: ServiceLevelTargets | undefined,
): ServiceLevelTargets | undefined {
  const ttftMs = targetOf(headers, SERVICE_LEVEL_HEADERS.ttftMs) ?? defaults?.ttftMs;
  const itlMs = targetOf(headers, SERVICE_LEVEL_HEADERS.itlMs) ?? defaults?.itlMs;
  if (ttftMs === undefined && itlMs === undefined) return undefined;
  return {
    ...(ttftMs === undefined ? {} : { ttftMs }),
    ...(itlMs === undefined ? {} : { itlMs }),
  };
}

/**
 * The target of the first header of `names` the request sends. Only that one is read: a
 * gateway's header that ours overrides cannot refuse the request.
 */
function targetOf(headers: RequestHeaders, names: readonly string[]): number | undefined {
  for (const name of names) {
    const raw = headers[name];
    if (raw === undefined) continue;
    const text = (headerValue(raw) ?? '').trim();
    const value = DECIMAL.test(text) ? Number(text) : Number.NaN;
    if (!(Number.isFinite(value) && value > 0)) {
      throw new UnsupportedRequestError(
        name,
        `${name} must be a positive number of milliseconds, got ${JSON.stringify(text.slice(0, 32))}`,
      );
    }
    return value;
  }
  return undefined;
}
