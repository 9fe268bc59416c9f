import { randomFillSync } from 'node:crypto';
import { describeValue } from '../util/describe-value.js';
import type { BootstrapInfo } from './prefill-stream.js';

/** Rooms must stay below 2^63: SGLang crashes on larger ones. */
export const MAX_BOOTSTRAP_ROOM = (1n << 63n) - 1n;

/** Options of {@link mintBootstrapRoom}. */
export interface BootstrapRoomOptions {
  /** The prefill worker's data-parallel rank, when it has several. */
  dpRank?: number | undefined;
  /** The prefill worker's data-parallel size. */
  dpSize?: number | undefined;
  /** 8 random bytes; by default 8 of the process's pool of cryptographic random bytes. For tests. */
  randomBytes?: (() => Uint8Array) | undefined;
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
  let room: bigint;
  if (options.randomBytes === undefined) room = pooledRandom64();
  else {
    const bytes = options.randomBytes();
    if (bytes.length < 8) throw new RangeError(`randomBytes must give 8 bytes, gave ${bytes.length}`);
    room = 0n;
    for (let i = 0; i < 8; i++) room = (room << 8n) | BigInt(bytes[i] as number);
  }
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

/**
 * Cryptographic random bytes drawn 4 KiB at a time, as Node's own `randomUUID` does: one call
 * into OpenSSL per 512 rooms instead of one (and a buffer) per room, which was 1 % of the
 * proxy's CPU with SGLang's connector. Every 8 bytes are handed out once.
 */
const POOL = Buffer.alloc(4096);
let poolOffset = POOL.length;

function pooledRandom64(): bigint {
  if (poolOffset + 8 > POOL.length) {
    randomFillSync(POOL);
    poolOffset = 0;
  }
  const value = POOL.readBigUInt64BE(poolOffset);
  poolOffset += 8;
  return value;
}

/**
 * The rendezvous of a prefill worker as SGLang names it (concurrent family): its
 * `bootstrapHost` (the host of its `url` by default) and `bootstrapPort`, and for data
 * parallelism its `dpRank` of `dpSize`; one room, or one per element of a batched request
 * (with as many hosts and ports), each congruent to the worker's DP rank.
 *
 * @throws {TypeError} naming `connector` for a worker without a bootstrap port or host, or
 *   with `dpSize` but no `dpRank`.
 * @example workerRendezvous({ url: 'http://p0:30000', bootstrapPort: 8998 }, 'sglang-bootstrap', 1); // { bootstrap_host: 'p0', bootstrap_port: 8998, bootstrap_room: 123n }
 */
export function workerRendezvous(worker: unknown, connector: string, elements: number): BootstrapInfo {
  const { bootstrapPort, dpRank, dpSize, url } = (worker ?? {}) as Record<string, unknown>;
  // The host defaults to the worker's own: its bootstrap server runs beside its HTTP server.
  const bootstrapHost = (worker as { bootstrapHost?: unknown } | undefined)?.bootstrapHost ?? hostOf(url);
  if (typeof bootstrapHost !== 'string' || bootstrapHost === '' || !Number.isInteger(bootstrapPort)) {
    throw new TypeError(
      `The ${connector} connector sends both legs at once and needs the prefill worker's rendezvous: prefillWorker (or prefillWorkers) with { bootstrapPort } and { bootstrapHost } or a { url } to take the host from`,
    );
  }
  if (dpSize !== undefined && dpRank === undefined) {
    throw new TypeError(
      `The prefill worker ${describeValue(url ?? bootstrapHost)} has dpSize ${describeValue(dpSize)} but no dpRank: a room is routed to the rank it is congruent to, so say which rank (0 to dpSize - 1) this worker entry stands for`,
    );
  }
  const dp = dpSize === undefined ? {} : { dpRank: dpRank as number, dpSize: dpSize as number };
  if (elements <= 1) {
    return {
      bootstrap_host: bootstrapHost,
      bootstrap_port: bootstrapPort as number,
      bootstrap_room: mintBootstrapRoom(dp),
    };
  }
  return {
    bootstrap_host: Array.from({ length: elements }, () => bootstrapHost),
    bootstrap_port: Array.from({ length: elements }, () => bootstrapPort as number),
    bootstrap_room: Array.from({ length: elements }, () => mintBootstrapRoom(dp)),
  };
}

function hostOf(url: unknown): string | undefined {
  if (typeof url !== 'string') return undefined;
  try {
    return new URL(url).hostname;
  } catch {
    return undefined;
  }
}
