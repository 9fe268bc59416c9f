// msgpack is read from engines' KV event streams and written by the fake publisher; a proxy
// that follows no engine's events never needs it. Loaded on first use: imported with the
// `disagg` command (which bundles both), it was 1.5 MB of every idle proxy's resident set.
import { createRequire } from 'node:module';
import type { Decoder, Encoder } from '@msgpack/msgpack';

type Msgpack = typeof import('@msgpack/msgpack');
let codec: { decoder: Decoder; encoder: Encoder } | undefined;

/**
 * The process's msgpack decoder and encoder, made on first use, with 64-bit integers as
 * `bigint` (block hashes are uint64: as numbers they would lose precision).
 *
 * @example
 * const batch = msgpack().decoder.decode(frames[2]);
 */
export function msgpack(): { decoder: Decoder; encoder: Encoder } {
  if (codec === undefined) {
    const { Decoder: MadeDecoder, Encoder: MadeEncoder } = createRequire(import.meta.url)(
      '@msgpack/msgpack',
    ) as Msgpack;
    codec = { decoder: new MadeDecoder({ useBigInt64: true }), encoder: new MadeEncoder({ useBigInt64: true }) };
  }
  return codec;
}
