// The PostgreSQL store's tables, and how a database is brought to them: a version row, and the
// steps from each version to the next, run at start in one transaction under an advisory lock,
// so that replicas starting together migrate once and never half.

import { branded, DisaggError } from '../util/disagg-error.js';

/** One round trip: a statement and its parameters, its rows back. @internal */
export type Query = (text: string, values?: readonly unknown[]) => Promise<Array<Record<string, unknown>>>;

/**
 * The first key of the store's advisory locks (`pg_advisory_xact_lock(int, int)`): "disg", so
 * that they keep clear of another application's locks on the same database. The schema's lock
 * is (`LOCK_CLASS`, 0); an owner's writes take (`LOCK_CLASS` + 1, the owner's hash).
 *
 * @internal
 */
export const LOCK_CLASS = 0x64697367;

/**
 * The schema, as the steps that make it: step N brings a database from version N to N + 1.
 * Never change a step once released (a database that ran it would not run it again): add one.
 * @internal
 *
 * Bodies are text, not jsonb: the store must give back exactly the object it was given, and
 * jsonb reorders keys, drops duplicate ones and refuses `\u0000` in strings. Times are the
 * store's clock's milliseconds (an injected clock in tests), not the server's, as double
 * precision: a clock may give fractions, and a TTL of Infinity never expires.
 */
export const MIGRATIONS: readonly (readonly string[])[] = [
  [
    `CREATE TABLE disagg_responses (
       owner text NOT NULL,
       id text NOT NULL,
       previous_id text,
       conversation_id text,
       stored_at double precision NOT NULL,
       expires_at double precision NOT NULL,
       bytes bigint NOT NULL,
       body text NOT NULL,
       PRIMARY KEY (owner, id)
     )`,
    'CREATE INDEX disagg_responses_owner_expiry ON disagg_responses (owner, expires_at)',
    'CREATE INDEX disagg_responses_expiry ON disagg_responses (expires_at)',
    `CREATE TABLE disagg_conversations (
       owner text NOT NULL,
       id text NOT NULL,
       expires_at double precision NOT NULL,
       next_seq bigint NOT NULL,
       bytes bigint NOT NULL,
       body text NOT NULL,
       PRIMARY KEY (owner, id)
     )`,
    'CREATE INDEX disagg_conversations_owner_expiry ON disagg_conversations (owner, expires_at)',
    'CREATE INDEX disagg_conversations_expiry ON disagg_conversations (expires_at)',
    `CREATE TABLE disagg_items (
       owner text NOT NULL,
       conversation_id text NOT NULL,
       item_id text NOT NULL,
       seq bigint NOT NULL,
       bytes bigint NOT NULL,
       body text NOT NULL,
       PRIMARY KEY (owner, conversation_id, item_id),
       UNIQUE (owner, conversation_id, seq)
     )`,
    // What each owner holds, kept by every write in its transaction (expired rows are
    // subtracted as they are deleted), so that a quota check reads one row.
    `CREATE TABLE disagg_owner_usage (
       owner text PRIMARY KEY,
       objects bigint NOT NULL,
       bytes bigint NOT NULL
     )`,
  ],
];

/** The schema version this build knows (the number of its steps): a database past it is refused. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/**
 * The PostgreSQL store cannot work with the database as set (its schema is newer than this
 * build knows): a setting to change, so `code` is `DISAGG_CONFIG`, and the message is one line
 * saying what to change.
 *
 * @example
 * if (PostgresStoreSettingError.is(error)) process.exitCode = 2;
 */
export class PostgresStoreSettingError extends DisaggError {
  static override readonly is = branded<PostgresStoreSettingError>('PostgresStoreSettingError');
  declare readonly code: 'DISAGG_CONFIG';

  constructor(message: string) {
    super('DISAGG_CONFIG', message);
  }
}

/**
 * Brings the database to {@link SCHEMA_VERSION}, inside the transaction `query` runs in (the
 * caller's BEGIN and COMMIT): takes the schema's advisory lock (a replica starting beside
 * another waits for it, then finds the work done), creates the version table if need be, and
 * runs the steps past the version found. What it found and what it left.
 *
 * @throws {PostgresStoreSettingError} when the database is at a newer version than
 * `migrations` reach (`where` names it in the message).
 * @internal
 * @example
 * await query('BEGIN');
 * const { from, to } = await migrateSchema(query, 'db.internal:5432/disagg');
 * await query('COMMIT');
 */
export async function migrateSchema(
  query: Query,
  where: string,
  migrations: readonly (readonly string[])[] = MIGRATIONS,
): Promise<{ from: number; to: number }> {
  await query('SELECT pg_advisory_xact_lock($1, 0)', [LOCK_CLASS]);
  await query(
    `CREATE TABLE IF NOT EXISTS disagg_schema_version (
       one boolean PRIMARY KEY DEFAULT true CHECK (one),
       version integer NOT NULL
     )`,
  );
  const rows = await query('SELECT version FROM disagg_schema_version');
  const from = rows.length === 0 ? 0 : Number(rows[0]?.version);
  const to = migrations.length;
  if (from > to) {
    throw new PostgresStoreSettingError(
      `the agent store's database at ${where} has schema version ${from}, newer than this disagg knows (${to}): run a disagg as new as the one that migrated it, or point --responses-store at another database`,
    );
  }
  for (const step of migrations.slice(from)) {
    for (const statement of step) await query(statement);
  }
  if (from !== to) {
    await query(
      'INSERT INTO disagg_schema_version (one, version) VALUES (true, $1) ON CONFLICT (one) DO UPDATE SET version = $1',
      [to],
    );
  }
  return { from, to };
}
