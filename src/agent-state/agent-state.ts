import type { Logger } from '../runtime/logger.js';
import { DisaggError } from '../util/disagg-error.js';
import { type AgentStore, AgentStoreUnavailableError, type StoreLimits } from './agent-store.js';
import type { BackgroundRun } from './background-run.js';
import { openAgentStore } from './open-store.js';

/** What {@link AgentState} opens its store with. */
export interface AgentStateOptions {
  /** `memory`, or a redis:// or postgres:// URL (see {@link openAgentStore}). */
  readonly store: string;
  readonly limits: StoreLimits;
  /** The memory backend's bound on all it holds. */
  readonly memoryBytes?: number | undefined;
  readonly logger?: Logger | undefined;
  /** How the store is opened: {@link openAgentStore} unless a test gives its own. */
  readonly open?: ((address: string, options: Parameters<typeof openAgentStore>[1]) => Promise<AgentStore>) | undefined;
}

/**
 * What a router keeps of agents' turns: its store of Responses and Conversations, opened once
 * on first use (or at start), so that a router whose clients never store anything never
 * connects; a store that could not be opened is tried again by the next request that needs it
 * (each such request a 503 meanwhile).
 *
 * @example
 * const agents = new AgentState({ store: 'memory', limits: {} });
 * const store = await agents.store();
 * await agents.close();
 */
export class AgentState {
  /** The background responses under way on this replica, by id. */
  readonly runs = new Map<string, BackgroundRun>();
  readonly #options: AgentStateOptions;
  #store: Promise<AgentStore> | undefined;
  #closed = false;

  constructor(options: AgentStateOptions) {
    this.#options = options;
  }

  /**
   * The store, opened on first call.
   *
   * @throws {AgentStoreUnavailableError} when it cannot be opened now, or after `close()`.
   */
  store(): Promise<AgentStore> {
    if (this.#closed) return Promise.reject(new AgentStoreUnavailableError('The router is shutting down'));
    if (this.#store === undefined) {
      const { store, limits, memoryBytes, logger } = this.#options;
      const open = this.#options.open ?? openAgentStore;
      const opening = open(store, { limits, memoryBytes, logger });
      this.#store = opening;
      // A failed open is not kept: the next request tries again.
      opening.catch(() => {
        if (this.#store === opening) this.#store = undefined;
      });
    }
    return this.#store.catch((error: unknown) => {
      // The store's own errors as they are (an operator's mistake stays one); the rest an outage.
      throw DisaggError.is(error)
        ? error
        : new AgentStoreUnavailableError(
            `The store of responses could not be opened: ${String((error as Error)?.message ?? error)}`,
            { cause: error },
          );
    });
  }

  /**
   * Opens the store now, at start, where it is a server (Redis, PostgreSQL: its schema is
   * created or migrated then) and says where it keeps things; one that cannot be reached is
   * logged and tried again by the first request that needs it (each a 503 meanwhile).
   *
   * @throws {DisaggError} with code `DISAGG_CONFIG` for what no retry mends (a database migrated
   *   by a newer disagg, an address that does not parse).
   */
  async open(): Promise<void> {
    const { logger, store: address } = this.#options;
    if (address === 'memory') return;
    try {
      const store = await this.store();
      logger?.info({ store: store.description }, 'Stored Responses and Conversations are kept in the store given');
    } catch (error) {
      if ((error as { code?: unknown }).code === 'DISAGG_CONFIG') throw error;
      logger?.warn(
        { err: error },
        'The store of Responses and Conversations cannot be reached at start: the requests that need it get a 503 until it answers',
      );
    }
  }

  /** Lets the store go (its connections, timers). Never throws. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const run of this.runs.values()) run.stop();
    const opened = this.#store;
    this.#store = undefined;
    if (opened === undefined) return;
    try {
      await (await opened).close();
    } catch {
      // A store that never opened has nothing to let go.
    }
  }
}
