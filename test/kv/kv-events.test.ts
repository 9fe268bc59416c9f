import { Encoder } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { decodeKvEventBatch, handle, KvEventFormatError } from '../../src/kv/kv-events.js';

const encoder = new Encoder({ useBigInt64: true });
const pack = (value: unknown) => encoder.encode(value);
const BIG = 15760518052499183552n; // from a real vLLM 0.26 capture: above 2^63
const tokens = Array.from({ length: 16 }, (_, i) => 151644 + i);

describe('KV event batches, every form the engines send', () => {
  it('older form: a positional batch of tagged arrays (vLLM up to ~0.23, SGLang before #37482)', () => {
    const batch = decodeKvEventBatch(
      pack([
        1789095808.83,
        [
          ['BlockStored', [BIG], null, tokens, 16, null, 'GPU', null],
          ['BlockRemoved', [BIG], 'GPU'],
          ['AllBlocksCleared'],
          ['SomethingNew', 1, 2],
        ],
        0,
      ]),
    );
    expect(batch.dpRank).toBe(0);
    expect(batch.unknown).toBe(1);
    expect(batch.events).toEqual([
      {
        kind: 'stored',
        blocks: [BIG.toString()],
        parent: undefined,
        tokenIds: tokens,
        blockSize: 16,
        lora: undefined,
        medium: 'GPU',
        group: 0,
      },
      { kind: 'removed', blocks: [BIG.toString()], medium: 'GPU', group: 0 },
      { kind: 'cleared' },
    ]);
  });

  it("newer form: tagged maps with fields it does not know, in a map batch with SGLang's rank name", () => {
    const batch = decodeKvEventBatch(
      pack({
        ts: 1.5,
        attn_dp_rank: 3,
        events: [
          {
            type: 'BlockStored',
            block_hashes: [1n, 2n],
            parent_block_hash: 9n,
            token_ids: [...tokens, ...tokens],
            block_size: 16,
            lora_id: 4,
            medium: 'CPU',
            lora_name: 'sql-adapter',
            extra_keys: [null],
            group_idx: 1,
            kv_cache_spec_kind: 'sliding_window',
            cache_salt: 'tenant-a',
            locality: 'x',
            event_version: 2,
          },
          { type: 'BlockRemoved', block_hashes: [2n], medium: null },
          { type: 'AllBlocksCleared' },
        ],
      }),
    );
    expect(batch.dpRank).toBe(3);
    expect(batch.events[0]).toMatchObject({
      parent: '9',
      lora: 'sql-adapter',
      medium: 'CPU',
      group: 1,
      blocks: ['1', '2'],
    });
    expect(batch.events[1]).toEqual({ kind: 'removed', blocks: ['2'], medium: 'GPU', group: 0 });
    expect(batch.events[2]).toEqual({ kind: 'cleared' });
  });

  it('a hash is one handle however it is sent: uint64, the same bits as a signed int64, small, or a digest', () => {
    expect(handle(BIG)).toBe('15760518052499183552');
    expect(handle(BIG - (1n << 64n))).toBe('15760518052499183552');
    expect(handle(7)).toBe('7');
    expect(handle(new Uint8Array([0xab, 0x01]))).toBe('xab01');
    const digest = new Uint8Array(32).fill(0xff);
    const batch = decodeKvEventBatch(pack([0, [['BlockRemoved', [digest], 'GPU']], 0]));
    expect(batch.events[0]).toMatchObject({ blocks: [`x${'ff'.repeat(32)}`] });
  });

  it('what is not a batch is a KvEventFormatError with a code', () => {
    expect(() => decodeKvEventBatch(new Uint8Array([0xc1]))).toThrow(KvEventFormatError);
    expect(() => decodeKvEventBatch(pack('hello'))).toThrow('a KV event batch is an array or a map');
    expect(() => decodeKvEventBatch(pack([0, 'x', 0]))).toThrow('no list of events');
    try {
      decodeKvEventBatch(pack([0, [['BlockRemoved', 'x', 'GPU']], 0]));
    } catch (error) {
      expect((error as KvEventFormatError).code).toBe('DISAGG_KV_EVENT_FORMAT');
    }
  });
});
