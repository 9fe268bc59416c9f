// Where the router keeps agents' state (stored Responses, `previous_response_id` chains,
// Conversations) and how much of it each tenant may hold.

import { positiveInteger, positiveNumber } from './parsers.js';
import { Invalid, inGroup } from './setting.js';

/** `memory`, or a redis://, rediss://, postgres:// or postgresql:// URL. */
export function storeUrl(value: unknown): string {
  if (typeof value === 'string' && (value === 'memory' || /^(rediss?|postgres(ql)?):\/\/[^/]/.test(value))) {
    return value;
  }
  throw new Invalid(
    `must be memory, a redis:// URL (replicas share it) or a postgres:// URL (durable), got ${JSON.stringify(value)}`,
  );
}

/** The settings of `--help`'s Agents' state group. */
export const RESPONSES_ROWS = inGroup("Agents' state", [
  {
    key: 'responses.store',
    flag: 'responses-store',
    arg: 'memory|redis://...|postgres://...',
    help: 'where stored Responses and Conversations are kept: in this process (bounded, least recently used dropped first), in Redis (replicas share them; they expire by TTL) or in PostgreSQL (durable; the schema is created and migrated at start)',
    default: 'memory',
    parse: storeUrl,
  },
  {
    key: 'responses.ttlHours',
    flag: 'responses-ttl-hours',
    arg: 'H',
    help: 'how long a stored response or conversation lives after it was last written (30 days, as OpenAI keeps them)',
    default: 720,
    parse: positiveNumber,
  },
  {
    key: 'responses.maxObjects',
    flag: 'responses-max-objects',
    arg: 'N',
    help: 'the most stored objects (responses, conversations, conversation items) one tenant or API key may hold; past it a 429 insufficient_quota',
    default: 100_000,
    parse: positiveInteger,
  },
  {
    key: 'responses.maxBytes',
    flag: 'responses-max-bytes',
    arg: 'N',
    help: 'the most bytes of stored objects one tenant or API key may hold; past it a 429 insufficient_quota',
    default: 1024 * 1024 * 1024,
    parse: positiveInteger,
  },
  {
    key: 'responses.memoryBytes',
    flag: 'responses-memory-bytes',
    arg: 'N',
    help: 'with --responses-store memory: the most bytes held in all, the least recently used dropped past it',
    default: 256 * 1024 * 1024,
    parse: positiveInteger,
  },
]);
