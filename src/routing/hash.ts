import { describeValue } from '../util/describe-value.js';

/**
 * FNV-1a over `text` from `seed`, then murmur3's finaliser for an even spread; unsigned 32 bits.
 * Deterministic across processes and restarts, so that every router replica that hashes the
 * same key with the same workers decides alike.
 *
 * @example hash32('session-42', 0x811c9dc5); // the same number on every replica
 */
export function hash32(text: string, seed = 0x811c9dc5): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * A worker's stable name for hashing: itself when it is a string, else its `url`.
 *
 * @throws {TypeError} naming `policy` for a worker that has neither.
 */
export function workerId(worker: unknown, policy: string): string {
  if (typeof worker === 'string') return worker;
  const url = (worker as { url?: unknown } | null)?.url;
  if (typeof url === 'string') return url;
  throw new TypeError(
    `${policy} needs a stable name for each worker: give workers a url, or pass idOf; got ${describeValue(worker)}`,
  );
}
