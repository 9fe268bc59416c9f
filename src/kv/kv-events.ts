import { branded, DisaggError } from '../util/disagg-error.js';
import { msgpack } from '../util/msgpack.js';

/**
 * An engine's handle for one KV block: its own hash, kept opaque. vLLM sends a uint64 (older
 * producers a signed int64, the same bits), or the 32-byte digest as bin; all become one
 * string, so that a parent or a removal names the block the store named.
 */
export type BlockHandle = string;

/** One KV cache event of an engine, in the form every engine's variants are read into. */
export type KvEvent =
  | {
      readonly kind: 'stored';
      /** One handle per block stored, in order. */
      readonly blocks: readonly BlockHandle[];
      /** The block before the first one; undefined at the root of a prompt. */
      readonly parent: BlockHandle | undefined;
      /** The blocks' tokens, concatenated (blocks x blockSize); undefined when the engine sent none. */
      readonly tokenIds: readonly number[] | undefined;
      readonly blockSize: number;
      /** The LoRA adapter the blocks were computed with, by name (else by id); undefined for the base model. */
      readonly lora: string | undefined;
      /** The cache salt the blocks were computed under (SGLang's newer events say it); undefined for none. */
      readonly salt?: string | undefined;
      /** `GPU` unless the engine says otherwise (CPU offload stores say `CPU`). */
      readonly medium: string;
      /** The KV cache group (hybrid models have several); 0 when not said. */
      readonly group: number;
    }
  | {
      readonly kind: 'removed';
      readonly blocks: readonly BlockHandle[];
      readonly medium: string;
      readonly group: number;
    }
  | { readonly kind: 'cleared' };

/** One published batch: the events of one engine step. */
export interface KvEventBatch {
  /** The engine's timestamp (seconds since the epoch). */
  readonly ts: number;
  readonly events: readonly KvEvent[];
  /** The data-parallel rank that published it; undefined when the batch does not say. */
  readonly dpRank: number | undefined;
  /** Events of a kind this reader does not know (a newer engine): skipped, counted here. */
  readonly unknown: number;
}

/** A payload that is not a KV event batch in any form the engines send. */
export class KvEventFormatError extends DisaggError {
  static override readonly is = branded<KvEventFormatError>('KvEventFormatError');
  declare readonly code: 'DISAGG_KV_EVENT_FORMAT';

  constructor(message: string, options?: { cause?: unknown }) {
    super('DISAGG_KV_EVENT_FORMAT', message, options);
  }
}

/**
 * Reads one msgpack payload of an engine's KV event stream (the third frame of a live
 * message, or of a replayed one): the batch as a positional array `[ts, events, rank]` or as
 * a map (`data_parallel_rank`, SGLang's `attn_dp_rank`); each event as a tagged array (older
 * vLLM and SGLang: `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium,
 * lora_name, ...]`) or a tagged map (`{type: "BlockStored", ...}`). Fields it does not know
 * are ignored; events of a kind it does not know are skipped and counted.
 *
 * @throws {KvEventFormatError} for a payload that is not msgpack or not a batch.
 * @example
 * const [, , payload] = frames; // [topic, sequence, batch], as a SUB socket receives them
 * const batch = decodeKvEventBatch(payload as Uint8Array);
 * for (const event of batch.events) index.apply(worker, event);
 */
export function decodeKvEventBatch(payload: Uint8Array): KvEventBatch {
  let raw: unknown;
  try {
    raw = msgpack().decoder.decode(payload);
  } catch (error) {
    throw new KvEventFormatError(`a KV event payload is not msgpack: ${(error as Error).message}`, { cause: error });
  }
  let ts: unknown;
  let events: unknown;
  let rank: unknown;
  if (Array.isArray(raw)) [ts, events, rank] = raw;
  else if (isMap(raw)) {
    ts = raw.ts;
    events = raw.events;
    rank = raw.data_parallel_rank ?? raw.attn_dp_rank;
  } else throw new KvEventFormatError(`a KV event batch is an array or a map, got ${typeof raw}`);
  if (!Array.isArray(events)) throw new KvEventFormatError('a KV event batch has no list of events');
  const read: KvEvent[] = [];
  let unknown = 0;
  for (const each of events) {
    const event = readEvent(each);
    if (event === undefined) unknown++;
    else read.push(event);
  }
  return { ts: toNumber(ts) ?? 0, events: read, dpRank: toNumber(rank), unknown };
}

function readEvent(raw: unknown): KvEvent | undefined {
  if (Array.isArray(raw)) {
    switch (raw[0]) {
      case 'BlockStored':
        return stored({
          block_hashes: raw[1],
          parent_block_hash: raw[2],
          token_ids: raw[3],
          block_size: raw[4],
          lora_id: raw[5],
          medium: raw[6],
          lora_name: raw[7],
          group_idx: raw[9],
        });
      case 'BlockRemoved':
        return removed({ block_hashes: raw[1], medium: raw[2], group_idx: raw[3] });
      case 'AllBlocksCleared':
        return { kind: 'cleared' };
      default:
        return undefined;
    }
  }
  if (!isMap(raw)) return undefined;
  switch (raw.type) {
    case 'BlockStored':
      return stored(raw);
    case 'BlockRemoved':
      return removed(raw);
    case 'AllBlocksCleared':
      return { kind: 'cleared' };
    default:
      return undefined;
  }
}

function stored(fields: Record<string, unknown>): KvEvent {
  const tokens = fields.token_ids;
  const lora = fields.lora_name ?? fields.lora_id;
  return {
    kind: 'stored',
    blocks: handles(fields.block_hashes),
    parent:
      fields.parent_block_hash === null || fields.parent_block_hash === undefined
        ? undefined
        : handle(fields.parent_block_hash),
    tokenIds: Array.isArray(tokens) && tokens.length > 0 ? tokens.map((id) => Number(id)) : undefined,
    blockSize: toNumber(fields.block_size) ?? 0,
    lora: lora === null || lora === undefined ? undefined : String(lora),
    ...(typeof fields.cache_salt === 'string' && fields.cache_salt !== '' ? { salt: fields.cache_salt } : {}),
    medium: typeof fields.medium === 'string' ? fields.medium : 'GPU',
    group: toNumber(fields.group_idx) ?? 0,
  };
}

function removed(fields: Record<string, unknown>): KvEvent {
  return {
    kind: 'removed',
    blocks: handles(fields.block_hashes),
    medium: typeof fields.medium === 'string' ? fields.medium : 'GPU',
    group: toNumber(fields.group_idx) ?? 0,
  };
}

function handles(value: unknown): BlockHandle[] {
  if (!Array.isArray(value)) throw new KvEventFormatError('a KV block event has no list of block hashes');
  return value.map(handle);
}

/** One engine hash as its handle: an integer as its unsigned 64 bits, a digest as hex. */
export function handle(value: unknown): BlockHandle {
  if (typeof value === 'bigint') return BigInt.asUintN(64, value).toString();
  if (typeof value === 'number' && Number.isInteger(value)) return BigInt.asUintN(64, BigInt(value)).toString();
  if (value instanceof Uint8Array)
    return `x${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`;
  throw new KvEventFormatError(`a KV block hash is an integer or bytes, got ${typeof value}`);
}

function toNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  return undefined;
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}
