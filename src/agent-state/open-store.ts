import type { Logger } from '../runtime/logger.js';
import type { AgentStore, AgentStoreOptions } from './agent-store.js';

/** What {@link openAgentStore} takes besides the address: the backends' common options and their logger. */
export interface OpenAgentStoreOptions extends AgentStoreOptions {
  /** The memory backend's bound on all it holds, in bytes (256 MiB by default). */
  readonly memoryBytes?: number | undefined;
  readonly logger?: Logger | undefined;
}

/**
 * The {@link AgentStore} at `address`: `'memory'` (this process, bounded), a `redis://` or
 * `rediss://` URL (replicas share it; objects expire by TTL), a `postgres://` or
 * `postgresql://` URL (durable; its schema created or migrated now). Each backend is loaded
 * when asked for, so a router that keeps its state in memory never loads a driver.
 *
 * @throws {AgentStoreUnavailableError} when the backend cannot be reached now (PostgreSQL's
 *   schema is read at open), or its driver is not installed.
 * @throws {TypeError} for an address of no backend.
 * @example
 * const store = await openAgentStore('memory', { limits: { ttlMs: 3_600_000 } });
 * await store.close();
 */
export async function openAgentStore(address: string, options: OpenAgentStoreOptions = {}): Promise<AgentStore> {
  if (address === 'memory') {
    const { MemoryAgentStore } = await import('./memory-store.js');
    return new MemoryAgentStore({ ...options, maxBytes: options.memoryBytes });
  }
  if (/^rediss?:\/\//.test(address)) {
    const { RedisAgentStore } = await import('./redis-store.js');
    return new RedisAgentStore({ ...options, url: address });
  }
  if (/^postgres(ql)?:\/\//.test(address)) {
    const { PostgresAgentStore } = await import('./postgres-store.js');
    return PostgresAgentStore.open({ ...options, url: address });
  }
  throw new TypeError(`No store at ${JSON.stringify(address)}: give memory, a redis:// URL or a postgres:// URL`);
}
