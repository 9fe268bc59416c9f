import type { ProxyState } from './pipeline/proxy-state.js';

/** One pool's readiness: why not, and its workers in rotation. */
export interface PoolReadiness {
  readonly model: string | null;
  readonly ready: boolean;
  readonly reason: string | undefined;
  readonly prefill: number;
  readonly decode: number;
}

/**
 * Whether requests can be served now: some pool with a decode worker in rotation (without a
 * prefill worker they are served by decode alone, unless `--require-disaggregation`) and not
 * draining for shutdown; `reason` says why not. What `/ready` answers, and the endpoint
 * picker's gRPC `readiness`.
 *
 * @internal
 */
export function readiness(proxy: Pick<ProxyState, 'options' | 'pools' | 'draining'>): {
  ready: boolean;
  reason: string | undefined;
  pools: PoolReadiness[];
} {
  const required = proxy.options.requireDisaggregation;
  const pools = proxy.pools.all().map((pool) => {
    const prefill = pool.prefill.available.length;
    const decode = pool.decode.available.length;
    // A pool named for its models without prefill workers serves on decode alone by design.
    const reason =
      decode === 0
        ? 'no decode worker in rotation'
        : prefill === 0 && required && (pool.models === undefined || pool.prefill.workers.length > 0)
          ? 'no prefill worker in rotation (--require-disaggregation)'
          : undefined;
    return { model: pool.model ?? null, ready: reason === undefined, reason, prefill, decode };
  });
  const isReady = !proxy.draining && pools.some((pool) => pool.ready);
  const reason = proxy.draining
    ? 'shutting down'
    : isReady
      ? undefined
      : pools.length === 1
        ? pools[0]?.reason
        : `no pool can serve a request (${pools.map((pool) => `${pool.model ?? 'any model'}: ${pool.reason}`).join('; ')})`;
  return { ready: isReady, reason, pools };
}
