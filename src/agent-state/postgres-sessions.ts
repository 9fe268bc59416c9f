// How the PostgreSQL store talks to its server: one pooled connection per call, every round
// trip of the call within one budget, a failure of the server (down, slow, restarting) turned
// into AgentStoreUnavailableError, which names the server but never its password.

import type { Pool, PoolClient, QueryConfig, QueryResult } from 'pg';
import type { Logger } from '../runtime/logger.js';
import { FailureLog } from '../runtime/repeated-log.js';
import { DisaggError } from '../util/disagg-error.js';
import { AgentStoreUnavailableError } from './agent-store.js';
import { LOCK_CLASS, PostgresStoreSettingError, type Query } from './postgres-schema.js';

/** A server's address as the store tells it: `host:port/database`, and the URL without its password. @internal */
export interface PostgresAddress {
  /** `host:port/database`, for messages. */
  readonly where: string;
  /** `postgres://user@host:port/database`, for logs. */
  readonly description: string;
  /** The password as written in the URL and decoded (empty without one): kept out of every message. */
  readonly secrets: readonly string[];
}

/**
 * The address of `url` (`postgres://user:password@host:port/database`), without the password.
 *
 * @throws {PostgresStoreSettingError} for a URL that does not parse.
 * @internal
 * @example
 * postgresAddress('postgres://disagg:pw@db:5432/agents').where; // 'db:5432/agents'
 */
export function postgresAddress(url: string): PostgresAddress {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new PostgresStoreSettingError(
      'the agent store URL is not a URL: give --responses-store as postgres://user:password@host:5432/database',
    );
  }
  const host = parsed.searchParams.get('host') ?? (parsed.hostname === '' ? 'localhost' : parsed.hostname);
  const user = decodeURIComponent(parsed.username);
  const database = decodeURIComponent(parsed.pathname.slice(1)) || user || 'postgres';
  const where = `${host}:${parsed.port === '' ? '5432' : parsed.port}/${database}`;
  const secrets = [parsed.password, decodeURIComponent(parsed.password)].filter((secret) => secret !== '');
  return { where, description: `postgres://${user === '' ? '' : `${user}@`}${where}`, secrets };
}

/**
 * An owner's lock key (the second int of its advisory lock): FNV-1a of its name, as a signed
 * 32-bit integer. Computed here, so that the lock can be taken in BEGIN's own round trip;
 * two owners with one hash only wait for each other.
 *
 * @internal
 * @example
 * ownerLockKey('team-a'); // the same number on every replica
 */
export function ownerLockKey(owner: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(owner)) hash = Math.imul(hash ^ byte, 0x01000193);
  return hash | 0;
}

/** A call's budget ran out before it could send its next round trip. */
class BudgetSpent extends Error {}

/** Tries of one call at most, each after a stale connection (the pool's size and a fresh one, with room). */
const MAX_TRIES = 16;

/** A pooled connection that the server had closed: see {@link PostgresSessions.run}. */
class StaleConnection extends Error {
  constructor(override readonly cause: unknown) {
    super('stale connection');
  }
}

/** A connection the server ended (shutdown, restart) or reset: not a timeout, nor an SQL error. */
function isDropped(error: unknown): boolean {
  const { message, code } = (error ?? {}) as { message?: unknown; code?: unknown };
  if (code === '57P01' || code === '57P02' || code === 'ECONNRESET' || code === 'EPIPE') return true;
  return typeof message === 'string' && /Connection terminated unexpectedly|connection error/i.test(message);
}

/** The messages of the driver's own timeouts (connect, a query's read), and the server's cancel of a statement. */
function isTimeout(error: unknown): boolean {
  if (error instanceof BudgetSpent) return true;
  const { message, code } = error as { message?: unknown; code?: unknown };
  return code === '57014' || (typeof message === 'string' && /timeout|timed out/i.test(message));
}

/** The error's own words: an AggregateError of a refused connect has none but its code. */
function wordsOf(error: unknown): string {
  const { message, code } = (error ?? {}) as { message?: unknown; code?: unknown };
  if (typeof message === 'string' && message !== '') return message;
  if (typeof code === 'string') return code;
  return String(error);
}

/** Options of {@link PostgresSessions}. @internal */
export interface PostgresSessionsOptions {
  readonly address: PostgresAddress;
  /** A call's whole budget, in milliseconds. */
  readonly timeoutMs: number;
  readonly logger?: Logger | undefined;
}

/**
 * Calls on a `pg.Pool`, each on one connection of its own and within one budget (its
 * connect, and each round trip given what is left). A connection that failed, or whose
 * round trip ran out of time, is destroyed rather than given back to the pool, so that the
 * next call opens a fresh one: the store works again as soon as the server does.
 *
 * @internal
 */
export class PostgresSessions {
  readonly #pool: Pool;
  readonly #address: PostgresAddress;
  readonly #timeoutMs: number;
  readonly #log: FailureLog;

  constructor(pool: Pool, options: PostgresSessionsOptions) {
    this.#pool = pool;
    this.#address = options.address;
    this.#timeoutMs = options.timeoutMs;
    this.#log = new FailureLog(options.logger, {
      failure:
        'PostgreSQL (the agent store) is unreachable: requests that need stored responses or conversations fail with 503 until it answers',
      recovery: 'PostgreSQL (the agent store) answers again',
    });
    // An idle connection the server closed (a restart) is reported here: the pool drops it,
    // and the next call opens another. Without a listener it would crash the process.
    pool.on('error', (error) => this.#log.failed({ err: this.#unavailable('lost an idle connection', error) }));
  }

  /**
   * Runs `work` on one connection, each of its round trips within what is left of `budgetMs`
   * (the store's timeout by default).
   *
   * @throws {AgentStoreUnavailableError} when the server cannot be reached, fails, or does not answer in time.
   * @throws the `DisaggError` that `work` throws, as it is.
   */
  async run<T>(what: string, work: (query: Query) => Promise<T>, budgetMs = this.#timeoutMs): Promise<T> {
    const deadline = performance.now() + budgetMs;
    try {
      let answer: { value: T } | undefined;
      // A connection the server closed while it sat in the pool (a restart) fails on the
      // call's first round trip, which never changes anything (a read, or BEGIN): the call
      // runs again on the next connection (destroyed ones are not handed out again), within
      // its budget.
      for (let tries = 1; answer === undefined; tries++) {
        try {
          answer = { value: await this.#attempt(work, deadline, budgetMs) };
        } catch (error) {
          if (!(error instanceof StaleConnection) || tries >= MAX_TRIES) throw error;
        }
      }
      this.#log.recovered({ where: this.#address.where });
      return answer.value;
    } catch (error) {
      if (DisaggError.is(error)) throw error;
      const unavailable = this.#unavailable(what, error instanceof StaleConnection ? error.cause : error, budgetMs);
      this.#log.failed({ err: unavailable });
      throw unavailable;
    }
  }

  /**
   * Runs `work` in one transaction holding `owner`'s advisory lock, so that the writes of one
   * owner, from any replica, run one at a time (a quota checked in it holds when it commits).
   * A `DisaggError` from `work` (a quota refused) rolls it back and is thrown as it is.
   *
   * @throws {AgentStoreUnavailableError} as {@link run}; then nothing was committed, unless
   * the COMMIT itself was sent and its answer lost.
   */
  async write<T>(what: string, owner: string, work: (query: Query) => Promise<T>): Promise<T> {
    return this.run(what, async (query) => {
      await query(`BEGIN; SELECT pg_advisory_xact_lock(${LOCK_CLASS + 1}, ${ownerLockKey(owner)})`);
      let answer: T;
      try {
        answer = await work(query);
      } catch (error) {
        if (DisaggError.is(error)) await query('ROLLBACK');
        throw error;
      }
      await query('COMMIT');
      return answer;
    });
  }

  /** Lets go of the pool's connections; never throws. */
  async close(): Promise<void> {
    this.#log.flush();
    await this.#pool.end().catch(() => {});
  }

  async #attempt<T>(work: (query: Query) => Promise<T>, deadline: number, budgetMs: number): Promise<T> {
    let client: PoolClient | undefined;
    let answered = 0;
    try {
      client = await this.#pool.connect();
      const connected = client;
      const answer = await work(async (text, values) => {
        const left = Math.ceil(deadline - performance.now());
        if (left <= 0) throw new BudgetSpent(`no answer within ${budgetMs} ms`);
        // The driver reads a query's own `query_timeout` (its types do not list it).
        const config: QueryConfig & { query_timeout: number } = {
          text,
          values: values as unknown[],
          query_timeout: left,
        };
        const result: QueryResult | QueryResult[] = await connected.query(config);
        answered++;
        // A multi-statement text answers with one result per statement: the last one's rows.
        const last = Array.isArray(result) ? result[result.length - 1] : result;
        return last.rows;
      });
      client.release();
      return answer;
    } catch (error) {
      // A refusal of the store's own (a quota) leaves the connection as good as it was; any
      // other failure destroys it rather than give it back: the next call opens a fresh one.
      client?.release(!DisaggError.is(error));
      if (client !== undefined && answered === 0 && isDropped(error)) throw new StaleConnection(error);
      throw error;
    }
  }

  #unavailable(what: string, error: unknown, budgetMs = this.#timeoutMs): AgentStoreUnavailableError {
    let words = isTimeout(error) ? `did not answer within ${budgetMs} ms (${wordsOf(error)})` : wordsOf(error);
    for (const secret of this.#address.secrets) words = words.replaceAll(secret, '***');
    return new AgentStoreUnavailableError(`PostgreSQL at ${this.#address.where} failed to ${what}: ${words}`, {
      cause: error,
    });
  }
}
