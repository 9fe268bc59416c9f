// The durable AgentStore: PostgreSQL, through the optional `pg` package. Replicas share it and
// a restart keeps it; every write of an owner runs in one transaction under that owner's
// advisory lock, so that two replicas cannot both pass its quota; expired rows are invisible
// at once (by the store's clock, sent with each statement) and deleted by the writes of their
// owner and by a sweep that the writes start now and then.

import type { Logger } from '../runtime/logger.js';
import { DisaggError } from '../util/disagg-error.js';
import {
  type AgentStore,
  type AgentStoreOptions,
  AgentStoreUnavailableError,
  checkQuota,
  type ItemsPage,
  type ItemsQuery,
  type JsonObject,
  type OwnerUsage,
  type ResponseChain,
  type StoredConversation,
  type StoredResponse,
  storeLimits,
} from './agent-store.js';
import { migrateSchema, type Query } from './postgres-schema.js';
import { PostgresSessions, postgresAddress } from './postgres-sessions.js';
import { insertItems, itemRows, PURGE_OWNER, PURGEABLE_OWNERS, USAGE } from './postgres-sql.js';

/** Options of {@link PostgresAgentStore.open}. */
export interface PostgresAgentStoreOptions extends AgentStoreOptions {
  /** `postgres://user:password@host:5432/database` (the `pg` package's connection string). */
  readonly url: string;
  /** How long one call may take in all (connect and every round trip), in ms. Default: 2000. */
  readonly timeoutMs?: number | undefined;
  /** How long the schema's migration at open may take (it waits for another replica's), in ms. Default: 30,000. */
  readonly migrationTimeoutMs?: number | undefined;
  /** Connections at most. Default: 10. */
  readonly poolSize?: number | undefined;
  /** How often, at most, a write starts a sweep of every owner's expired rows, in ms. Default: 60,000. */
  readonly sweepIntervalMs?: number | undefined;
  /** Where the schema's migration and the server's outages are told (rate-limited). */
  readonly logger?: Logger | undefined;
}

/** What {@link PostgresAgentStore.open} found of the schema: its version before, and after. */
export interface SchemaMigration {
  readonly from: number;
  readonly to: number;
}

/** Owners a sweep purges at most: the next sweep takes the rest. */
const SWEEP_OWNERS = 100;

const numberOf = (value: unknown): number => Number(value ?? 0);

/** The object a row's body holds (the columns are for queries; the body is the object, as given). */
const parse = <T>(row: Record<string, unknown> | undefined): T => JSON.parse(row?.body as string) as T;

/**
 * The AgentStore on PostgreSQL: durable (a restart of the router or of the server keeps every
 * committed object), shared by replicas, with owners' quotas that hold across them.
 *
 * - Schema: created and migrated at {@link open} under an advisory lock (replicas starting
 *   together migrate once); a database at a newer version is refused.
 * - Writes: one transaction each, under the owner's advisory lock; all or none.
 * - Reads: one statement each (a chain is one recursive query).
 * - Expiry: by the store's clock, invisible at once; rows deleted by their owner's next write
 *   and by a sweep a write starts at most every `sweepIntervalMs` (no timer of its own).
 * - Outage: each call fails within `timeoutMs` with {@link AgentStoreUnavailableError} (the
 *   server's `host:port/database`, never the password) and works again once the server does.
 *
 * @example
 * const store = await PostgresAgentStore.open({ url: 'postgres://disagg:secret@db:5432/agents' });
 * const stored = await store.getResponse('resp_123', 'team-a');
 * await store.close();
 */
export class PostgresAgentStore implements AgentStore {
  readonly description: string;
  /** The schema's version when this store opened it, and after. */
  readonly schema: SchemaMigration;
  readonly #sessions: PostgresSessions;
  readonly #limits: ReturnType<typeof storeLimits>;
  readonly #clock: () => number;
  readonly #sweepIntervalMs: number;
  #lastSweep = performance.now();
  #sweep: Promise<unknown> | undefined;
  /** A sweep came due while one ran (which may have read the clock before rows expired): one more follows it. */
  #sweepAgain = false;

  private constructor(
    sessions: PostgresSessions,
    description: string,
    schema: SchemaMigration,
    options: PostgresAgentStoreOptions,
  ) {
    this.#sessions = sessions;
    this.description = description;
    this.schema = schema;
    this.#limits = storeLimits(options.limits);
    this.#clock = options.clock ?? Date.now;
    this.#sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  }

  /**
   * Connects to `url`, brings its schema to this build's version, and returns the store.
   *
   * @throws {AgentStoreUnavailableError} without the `pg` package (its message says to install
   * it), or when the server cannot be reached.
   * @throws {PostgresStoreSettingError} (`DISAGG_CONFIG`) for a URL that does not parse, or a
   * database whose schema is newer than this build knows.
   * @example
   * const store = await PostgresAgentStore.open({ url: 'postgres://disagg:secret@db:5432/agents', timeoutMs: 1000 });
   */
  static async open(options: PostgresAgentStoreOptions): Promise<PostgresAgentStore> {
    const address = postgresAddress(options.url);
    let pg: typeof import('pg');
    try {
      pg = await import('pg');
    } catch (error) {
      throw new AgentStoreUnavailableError(
        'the PostgreSQL agent store needs the optional dependency pg: npm install pg@8',
        { cause: error },
      );
    }
    const timeoutMs = options.timeoutMs ?? 2000;
    const migrationTimeoutMs = Math.max(options.migrationTimeoutMs ?? 30_000, timeoutMs);
    const pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: timeoutMs,
      statement_timeout: timeoutMs,
      idle_in_transaction_session_timeout: migrationTimeoutMs,
      application_name: 'disagg',
      keepAlive: true,
      allowExitOnIdle: true,
    });
    const sessions = new PostgresSessions(pool, { address, timeoutMs, logger: options.logger });
    let schema: SchemaMigration;
    try {
      schema = await sessions.run(
        'migrate the schema',
        async (query) => {
          await query(`BEGIN; SET LOCAL statement_timeout = ${migrationTimeoutMs}`);
          const done = await migrateSchema(query, address.where).catch(async (error: unknown) => {
            if (DisaggError.is(error)) await query('ROLLBACK');
            throw error;
          });
          await query('COMMIT');
          return done;
        },
        migrationTimeoutMs,
      );
    } catch (error) {
      await sessions.close();
      throw error;
    }
    if (schema.from !== schema.to) {
      options.logger?.info(
        { where: address.where, from: schema.from, to: schema.to },
        'Migrated the agent store schema in PostgreSQL',
      );
    }
    return new PostgresAgentStore(sessions, address.description, schema, options);
  }

  async putResponse(response: StoredResponse): Promise<void> {
    const body = JSON.stringify(response);
    const bytes = Buffer.byteLength(body);
    await this.#write('store a response', response.owner, async (query, usage) => {
      const [old] = await query('SELECT bytes FROM disagg_responses WHERE owner = $1 AND id = $2', [
        response.owner,
        response.id,
      ]);
      const added = { objects: old === undefined ? 1 : 0, bytes: bytes - numberOf(old?.bytes) };
      checkQuota(response.owner, usage, added, this.#limits);
      await query(
        `WITH stored AS (
           INSERT INTO disagg_responses (owner, id, previous_id, conversation_id, stored_at, expires_at, bytes, body)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (owner, id) DO UPDATE SET previous_id = $3, conversation_id = $4, stored_at = $5,
             expires_at = $6, bytes = $7, body = $8
         )
         UPDATE disagg_owner_usage SET objects = objects + $9, bytes = bytes + $10 WHERE owner = $1`,
        [
          response.owner,
          response.id,
          response.previousResponseId ?? null,
          response.conversationId ?? null,
          response.storedAt,
          this.#expiry(),
          bytes,
          body,
          added.objects,
          added.bytes,
        ],
      );
    });
  }

  async getResponse(id: string, owner: string): Promise<StoredResponse | undefined> {
    const rows = await this.#read('read a response', (query) =>
      query('SELECT body FROM disagg_responses WHERE owner = $1 AND id = $2 AND expires_at >= $3', [
        owner,
        id,
        this.#clock(),
      ]),
    );
    return rows.length === 0 ? undefined : parse<StoredResponse>(rows[0]);
  }

  async deleteResponse(id: string, owner: string): Promise<boolean> {
    return this.#write('delete a response', owner, async (query) => {
      const rows = await query(
        `WITH gone AS (DELETE FROM disagg_responses WHERE owner = $1 AND id = $2 RETURNING bytes)
         UPDATE disagg_owner_usage SET objects = objects - 1, bytes = bytes - (SELECT bytes FROM gone)
         WHERE owner = $1 AND EXISTS (SELECT 1 FROM gone) RETURNING 1`,
        [owner, id],
      );
      return rows.length > 0;
    });
  }

  async responseChain(id: string, owner: string, limit: number): Promise<ResponseChain | undefined> {
    const most = Math.max(1, Math.floor(limit));
    const rows = await this.#read('read a chain of responses', (query) =>
      query(
        `WITH RECURSIVE chain AS (
           SELECT previous_id, body, 1 AS depth FROM disagg_responses
           WHERE owner = $1 AND id = $2 AND expires_at >= $3
           UNION ALL
           SELECT r.previous_id, r.body, chain.depth + 1 FROM chain
           JOIN disagg_responses r ON r.owner = $1 AND r.id = chain.previous_id AND r.expires_at >= $3
           WHERE chain.depth < $4
         )
         SELECT previous_id, body FROM chain ORDER BY depth DESC`,
        [owner, id, this.#clock(), most],
      ),
    );
    const oldest = rows[0];
    if (oldest === undefined) return undefined;
    const complete = oldest.previous_id === null;
    // Fewer than asked, and the oldest names one before it: a hole.
    if (!complete && rows.length < most) return undefined;
    return { responses: rows.map((row) => parse<StoredResponse>(row)), complete };
  }

  async createConversation(conversation: StoredConversation, items: readonly JsonObject[]): Promise<void> {
    const body = JSON.stringify(conversation);
    const bytes = Buffer.byteLength(body);
    const rows = itemRows(items);
    const { owner, id } = conversation;
    await this.#write('create a conversation', owner, async (query, usage) => {
      // A conversation created again under its id replaces the one there, items and all.
      const [old] = await query(
        `SELECT c.bytes + coalesce(sum(i.bytes), 0) AS bytes, 1 + count(i.seq) AS objects
         FROM disagg_conversations c LEFT JOIN disagg_items i ON i.owner = c.owner AND i.conversation_id = c.id
         WHERE c.owner = $1 AND c.id = $2 GROUP BY c.bytes`,
        [owner, id],
      );
      const added = {
        objects: 1 + rows.ids.length - numberOf(old?.objects),
        bytes: bytes + rows.total - numberOf(old?.bytes),
      };
      checkQuota(owner, usage, added, this.#limits);
      await query(
        `WITH gone AS (DELETE FROM disagg_items WHERE owner = $1 AND conversation_id = $2),
         stored AS (
           INSERT INTO disagg_conversations (owner, id, expires_at, next_seq, bytes, body)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (owner, id) DO UPDATE SET expires_at = $3, next_seq = $4, bytes = $5, body = $6
         )
         UPDATE disagg_owner_usage SET objects = objects + $7, bytes = bytes + $8 WHERE owner = $1`,
        [owner, id, this.#expiry(), rows.ids.length, bytes, body, added.objects, added.bytes],
      );
      // After the delete above has committed its rows' removal within this transaction.
      await insertItems(query, owner, id, 0, rows);
    });
  }

  async getConversation(id: string, owner: string): Promise<StoredConversation | undefined> {
    const rows = await this.#read('read a conversation', (query) =>
      query('SELECT body FROM disagg_conversations WHERE owner = $1 AND id = $2 AND expires_at >= $3', [
        owner,
        id,
        this.#clock(),
      ]),
    );
    return rows.length === 0 ? undefined : parse<StoredConversation>(rows[0]);
  }

  async updateConversation(
    id: string,
    owner: string,
    metadata: Readonly<Record<string, string>>,
  ): Promise<StoredConversation | undefined> {
    return this.#write('update a conversation', owner, async (query, usage) => {
      const [old] = await query('SELECT bytes, body FROM disagg_conversations WHERE owner = $1 AND id = $2', [
        owner,
        id,
      ]);
      if (old === undefined) return undefined;
      const conversation: StoredConversation = { ...parse<StoredConversation>(old), metadata };
      const body = JSON.stringify(conversation);
      const added = { objects: 0, bytes: Buffer.byteLength(body) - numberOf(old.bytes) };
      checkQuota(owner, usage, added, this.#limits);
      await query(
        `WITH stored AS (
           UPDATE disagg_conversations SET body = $3, bytes = bytes + $4, expires_at = $5 WHERE owner = $1 AND id = $2
         )
         UPDATE disagg_owner_usage SET bytes = bytes + $4 WHERE owner = $1`,
        [owner, id, body, added.bytes, this.#expiry()],
      );
      return conversation;
    });
  }

  async deleteConversation(id: string, owner: string): Promise<boolean> {
    return this.#write('delete a conversation', owner, async (query) => {
      const rows = await query(
        `WITH conversation AS (DELETE FROM disagg_conversations WHERE owner = $1 AND id = $2 RETURNING bytes),
         items AS (
           DELETE FROM disagg_items WHERE owner = $1 AND conversation_id = $2 AND EXISTS (SELECT 1 FROM conversation)
           RETURNING bytes
         )
         UPDATE disagg_owner_usage
         SET objects = objects - 1 - (SELECT count(*) FROM items),
             bytes = bytes - (SELECT bytes FROM conversation) - (SELECT coalesce(sum(bytes), 0) FROM items)
         WHERE owner = $1 AND EXISTS (SELECT 1 FROM conversation) RETURNING 1`,
        [owner, id],
      );
      return rows.length > 0;
    });
  }

  async appendItems(conversationId: string, owner: string, items: readonly JsonObject[]): Promise<boolean> {
    const rows = itemRows(items);
    return this.#write('append items to a conversation', owner, async (query, usage) => {
      const [conversation] = await query('SELECT next_seq FROM disagg_conversations WHERE owner = $1 AND id = $2', [
        owner,
        conversationId,
      ]);
      if (conversation === undefined) return false;
      // An id the conversation holds is that item replaced in place, as the other backends do.
      const [held] = await query(
        `SELECT count(*) AS objects, coalesce(sum(bytes), 0) AS bytes FROM disagg_items
         WHERE owner = $1 AND conversation_id = $2 AND item_id = ANY($3::text[])`,
        [owner, conversationId, rows.ids],
      );
      const added = {
        objects: rows.ids.length - numberOf(held?.objects),
        bytes: rows.total - numberOf(held?.bytes),
      };
      checkQuota(owner, usage, added, this.#limits);
      await query(
        `WITH refreshed AS (
           UPDATE disagg_conversations SET next_seq = next_seq + $3, expires_at = $4 WHERE owner = $1 AND id = $2
         )
         UPDATE disagg_owner_usage SET objects = objects + $5, bytes = bytes + $6 WHERE owner = $1`,
        [owner, conversationId, rows.ids.length, this.#expiry(), added.objects, added.bytes],
      );
      await insertItems(query, owner, conversationId, numberOf(conversation.next_seq), rows);
      return true;
    });
  }

  async listItems(conversationId: string, owner: string, page: ItemsQuery): Promise<ItemsPage | undefined> {
    const [compare, order] = page.order === 'asc' ? ['>', 'ASC'] : ['<', 'DESC'];
    const limit = Math.max(0, Math.floor(page.limit));
    const rows = await this.#read('list the items of a conversation', (query) =>
      query(
        // A conversation found answers at least one row (its items' columns null without any);
        // an unknown cursor compares to null and matches nothing: an empty page.
        `SELECT i.body FROM disagg_conversations c
         LEFT JOIN LATERAL (
           SELECT body, seq FROM disagg_items
           WHERE owner = c.owner AND conversation_id = c.id
             AND ($4::text IS NULL OR seq ${compare} (
               SELECT seq FROM disagg_items WHERE owner = c.owner AND conversation_id = c.id AND item_id = $4))
           ORDER BY seq ${order} LIMIT $5
         ) i ON true
         WHERE c.owner = $1 AND c.id = $2 AND c.expires_at >= $3
         ORDER BY i.seq ${order}`,
        [owner, conversationId, this.#clock(), page.after ?? null, limit + 1],
      ),
    );
    if (rows.length === 0) return undefined;
    const items = rows.filter((row) => row.body !== null).map((row) => parse<JsonObject>(row));
    return { items: items.slice(0, limit), hasMore: items.length > limit };
  }

  async getItem(conversationId: string, owner: string, itemId: string): Promise<JsonObject | undefined> {
    const rows = await this.#read('read an item of a conversation', (query) =>
      query(
        `SELECT i.body FROM disagg_items i
         JOIN disagg_conversations c ON c.owner = i.owner AND c.id = i.conversation_id
         WHERE c.owner = $1 AND c.id = $2 AND c.expires_at >= $3 AND i.item_id = $4`,
        [owner, conversationId, this.#clock(), itemId],
      ),
    );
    return rows.length === 0 ? undefined : parse<JsonObject>(rows[0]);
  }

  async deleteItem(conversationId: string, owner: string, itemId: string): Promise<boolean> {
    return this.#write('delete an item of a conversation', owner, async (query) => {
      // The owner's expired conversations are purged by now: one still here is alive.
      const rows = await query(
        `WITH gone AS (
           DELETE FROM disagg_items WHERE owner = $1 AND conversation_id = $2 AND item_id = $3 RETURNING bytes
         )
         UPDATE disagg_owner_usage SET objects = objects - 1, bytes = bytes - (SELECT bytes FROM gone)
         WHERE owner = $1 AND EXISTS (SELECT 1 FROM gone) RETURNING 1`,
        [owner, conversationId, itemId],
      );
      return rows.length > 0;
    });
  }

  async usage(owner: string): Promise<OwnerUsage> {
    const [row] = await this.#read('read what an owner holds', (query) => query(USAGE, [owner, this.#clock()]));
    return { objects: numberOf(row?.objects), bytes: numberOf(row?.bytes) };
  }

  /**
   * Deletes the expired rows of up to 100 owners (each in its own transaction, under its
   * lock): what the writes start in the background at most every `sweepIntervalMs`. The
   * objects deleted.
   *
   * @throws {AgentStoreUnavailableError} when the server cannot be reached.
   */
  async purgeExpired(): Promise<number> {
    const now = this.#clock();
    const owners = await this.#read('find expired objects', (query) => query(PURGEABLE_OWNERS, [now, SWEEP_OWNERS]));
    let purged = 0;
    for (const { owner } of owners) {
      purged += await this.#sessions.write('purge expired objects', String(owner), async (query) => {
        const [row] = await query(PURGE_OWNER, [owner, now]);
        return numberOf(row?.purged);
      });
    }
    return purged;
  }

  async close(): Promise<void> {
    // A sweep that came due while another ran follows it: wait for both.
    while (this.#sweep !== undefined) await this.#sweep;
    await this.#sessions.close();
  }

  #expiry(): number {
    return this.#clock() + this.#limits.ttlMs;
  }

  #read<T>(what: string, work: (query: Query) => Promise<T>): Promise<T> {
    return this.#sessions.run(what, work);
  }

  /**
   * One write of `owner`, in its transaction and under its lock: its expired rows deleted
   * first (so that every row left is alive), then `work` with what the owner holds now.
   */
  async #write<T>(what: string, owner: string, work: (query: Query, usage: OwnerUsage) => Promise<T>): Promise<T> {
    const answer = await this.#sessions.write(what, owner, async (query) => {
      const [row] = await query(PURGE_OWNER, [owner, this.#clock()]);
      return work(query, { objects: numberOf(row?.objects), bytes: numberOf(row?.bytes) });
    });
    this.#maybeSweep();
    return answer;
  }

  /** Starts a sweep of every owner's expired rows, unless one ran within the interval (or runs). */
  #maybeSweep(): void {
    const now = performance.now();
    if (now - this.#lastSweep < this.#sweepIntervalMs) return;
    // One runs: it read its clock before this write, so rows expired since are not its own.
    if (this.#sweep !== undefined) {
      this.#sweepAgain = true;
      return;
    }
    this.#startSweep(now);
  }

  #startSweep(now: number): void {
    this.#lastSweep = now;
    // Its failure was logged by the sessions; the next write's sweep tries again.
    this.#sweep = this.purgeExpired()
      .catch(() => 0)
      .finally(() => {
        this.#sweep = undefined;
        if (!this.#sweepAgain) return;
        this.#sweepAgain = false;
        this.#startSweep(performance.now());
      });
  }
}
