import { randomBytes } from 'node:crypto';

/** Rooms must stay below 2^63: SGLang crashes on larger ones. */
export const MAX_BOOTSTRAP_ROOM = (1n << 63n) - 1n;

/** Options of {@link mintBootstrapRoom}. */
export interface BootstrapRoomOptions {
  /** The prefill worker's data-parallel rank, when it has several. */
  dpRank?: number;
  /** The prefill worker's data-parallel size. */
  dpSize?: number;
  /** 8 random bytes; defaults to `crypto.randomBytes(8)`. For tests. */
  randomBytes?: () => Uint8Array;
}

/**
 * A fresh `bootstrap_room` for an SGLang-style rendezvous: a random integer in
 * [0, 2^63 - 1], as a `bigint` so it never passes through a lossy JavaScript `number` (rooms
 * above 2^53 - 1 are the common case). When the prefill worker's data-parallel rank and size
 * are given, `room % dpSize === dpRank`, which is how the engine routes the room to that rank.
 *
 * @throws {RangeError} for a size that is not a positive integer, or a rank outside [0, size).
 * @example
 * const room = mintBootstrapRoom({ dpRank: 3, dpSize: 8 }); // room % 8n === 3n
 */
export function mintBootstrapRoom(options: BootstrapRoomOptions = {}): bigint {
  const bytes = (options.randomBytes ?? (() => randomBytes(8)))();
  if (bytes.length < 8) throw new RangeError(`randomBytes must give 8 bytes, gave ${bytes.length}`);
  let room = 0n;
  for (let i = 0; i < 8; i++) room = (room << 8n) | BigInt(bytes[i] as number);
  room &= MAX_BOOTSTRAP_ROOM;
  const { dpRank, dpSize } = options;
  if (dpRank === undefined && dpSize === undefined) return room;
  if (!Number.isSafeInteger(dpSize) || (dpSize as number) < 1) {
    throw new RangeError(`dpSize must be a positive integer, got ${String(dpSize)}`);
  }
  if (!Number.isSafeInteger(dpRank) || (dpRank as number) < 0 || (dpRank as number) >= (dpSize as number)) {
    throw new RangeError(`dpRank must be an integer in [0, ${dpSize}), got ${String(dpRank)}`);
  }
  const size = BigInt(dpSize as number);
  const rank = BigInt(dpRank as number);
  room = room - (room % size) + rank;
  // The adjustment can step past the top; the congruent room one size lower is still random.
  if (room > MAX_BOOTSTRAP_ROOM) room -= size;
  return room;
}
