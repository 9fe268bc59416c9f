import { AgentState } from '../../agent-state/agent-state.js';
import { type StoreLimits, storeLimits } from '../../agent-state/agent-store.js';
import type { Logger } from '../../runtime/logger.js';
import type { ResolvedProxyOptions } from '../settings/types.js';

/**
 * The proxy's {@link AgentState}: its `responses` settings as the store's address and limits
 * (a TTL in hours becomes milliseconds; the per-tenant bounds are the owners').
 *
 * @internal
 */
export function agentStateOf(options: Pick<ResolvedProxyOptions, 'responses'>, logger: Logger): AgentState {
  const { store, memoryBytes } = options.responses;
  return new AgentState({ store, limits: ownerLimits(options), memoryBytes, logger });
}

/**
 * Each owner's limits as the `responses` settings give them: the TTL in hours as milliseconds,
 * the per-tenant bounds as the owners'.
 *
 * @internal
 */
export function ownerLimits(
  options: Pick<ResolvedProxyOptions, 'responses'>,
): Required<{ [K in keyof StoreLimits]: number }> {
  const { ttlHours, maxObjects, maxBytes } = options.responses;
  return storeLimits({ ttlMs: ttlHours * 3_600_000, maxObjectsPerOwner: maxObjects, maxBytesPerOwner: maxBytes });
}
