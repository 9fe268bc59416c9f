import { AgentState } from '../../agent-state/agent-state.js';
import type { Logger } from '../../runtime/logger.js';
import type { ResolvedProxyOptions } from '../settings/types.js';

/**
 * The proxy's {@link AgentState}: its `responses` settings as the store's address and limits
 * (a TTL in hours becomes milliseconds; the per-tenant bounds are the owners').
 *
 * @internal
 */
export function agentStateOf(options: Pick<ResolvedProxyOptions, 'responses'>, logger: Logger): AgentState {
  const { store, ttlHours, maxObjects, maxBytes, memoryBytes } = options.responses;
  return new AgentState({
    store,
    limits: { ttlMs: ttlHours * 3_600_000, maxObjectsPerOwner: maxObjects, maxBytesPerOwner: maxBytes },
    memoryBytes,
    logger,
  });
}
