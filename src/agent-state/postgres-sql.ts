// The PostgreSQL store's statements that keep what each owner holds (the purge of its expired
// rows with its counters, in one statement; the read of what it holds now), and a
// conversation's items as rows.

import type { JsonObject } from './agent-store.js';
import type { Query } from './postgres-schema.js';

/**
 * Deletes owner `$1`'s rows expired at `$2` (responses, conversations and their items), takes
 * them off its counters (made at 0 for a new owner), and answers the counters after
 * (`objects`, `bytes`) and the objects deleted (`purged`). Run under the owner's lock.
 *
 * @internal
 */
export const PURGE_OWNER = `
WITH responses AS (
  DELETE FROM disagg_responses WHERE owner = $1 AND expires_at < $2 RETURNING bytes
), conversations AS (
  DELETE FROM disagg_conversations WHERE owner = $1 AND expires_at < $2 RETURNING id, bytes
), items AS (
  DELETE FROM disagg_items WHERE owner = $1 AND conversation_id IN (SELECT id FROM conversations) RETURNING bytes
), gone AS (
  SELECT count(*) AS objects, coalesce(sum(bytes), 0) AS bytes FROM (
    SELECT bytes FROM responses UNION ALL SELECT bytes FROM conversations UNION ALL SELECT bytes FROM items
  ) every_one
)
INSERT INTO disagg_owner_usage AS u (owner, objects, bytes) VALUES ($1, 0, 0)
ON CONFLICT (owner) DO UPDATE
  SET objects = u.objects - (SELECT objects FROM gone), bytes = u.bytes - (SELECT bytes FROM gone)
RETURNING u.objects, u.bytes, (SELECT objects FROM gone) AS purged`;

/**
 * What owner `$1` holds at `$2`: its counters less what has expired and is not deleted yet
 * (one statement, so one snapshot: no write of the owner is half seen).
 *
 * @internal
 */
export const USAGE = `
SELECT coalesce(u.objects, 0) - r.objects - c.objects - i.objects AS objects,
       coalesce(u.bytes, 0) - r.bytes - c.bytes - i.bytes AS bytes
FROM (SELECT count(*) AS objects, coalesce(sum(bytes), 0) AS bytes
      FROM disagg_responses WHERE owner = $1 AND expires_at < $2) r,
     (SELECT count(*) AS objects, coalesce(sum(bytes), 0) AS bytes
      FROM disagg_conversations WHERE owner = $1 AND expires_at < $2) c,
     (SELECT count(*) AS objects, coalesce(sum(i.bytes), 0) AS bytes
      FROM disagg_items i JOIN disagg_conversations ic ON ic.owner = i.owner AND ic.id = i.conversation_id
      WHERE ic.owner = $1 AND ic.expires_at < $2) i
LEFT JOIN disagg_owner_usage u ON u.owner = $1`;

/** Up to `$2` owners with rows expired at `$1`: those a sweep purges. @internal */
export const PURGEABLE_OWNERS = `
SELECT owner FROM (
  SELECT owner FROM disagg_responses WHERE expires_at < $1
  UNION
  SELECT owner FROM disagg_conversations WHERE expires_at < $1
) expired LIMIT $2`;

/**
 * Items as rows, as the other backends keep them: an id given twice is one item, at the place
 * of the first, with the JSON of the last.
 *
 * @internal
 */
export function itemRows(items: readonly JsonObject[]): ItemRows {
  const bodies = new Map<string, string>();
  for (const item of items) bodies.set(String(item.id), JSON.stringify(item));
  const bytes = [...bodies.values()].map((body) => Buffer.byteLength(body));
  return {
    ids: [...bodies.keys()],
    bodies: [...bodies.values()],
    bytes,
    total: bytes.reduce((sum, one) => sum + one, 0),
  };
}

/** Items as rows: each one's id, body (its JSON) and bytes, and their bytes in all. @internal */
export interface ItemRows {
  readonly ids: readonly string[];
  readonly bodies: readonly string[];
  readonly bytes: readonly number[];
  readonly total: number;
}

/**
 * Inserts `rows` into conversation `conversationId` of `owner`, in order, numbered on from
 * `firstSeq` (the conversation's `next_seq`, which the caller moves on by as many); one whose
 * id the conversation holds replaces that item in place (its number kept).
 *
 * @internal
 */
export async function insertItems(
  query: Query,
  owner: string,
  conversationId: string,
  firstSeq: number,
  rows: ItemRows,
): Promise<void> {
  if (rows.ids.length === 0) return;
  await query(
    `INSERT INTO disagg_items (owner, conversation_id, item_id, seq, bytes, body)
     SELECT $1, $2, item_id, $3 + ordinality, bytes, body
     FROM unnest($4::text[], $5::bigint[], $6::text[]) WITH ORDINALITY AS t(item_id, bytes, body, ordinality)
     ON CONFLICT (owner, conversation_id, item_id) DO UPDATE SET bytes = excluded.bytes, body = excluded.body`,
    [owner, conversationId, firstSeq, rows.ids, rows.bytes, rows.bodies],
  );
}
