import { describe, expect, it } from 'vitest';
import { msgpack } from '../../src/util/msgpack.js';

describe('msgpack', () => {
  it('a uint64 block hash survives a round trip whole, as a bigint', () => {
    const hash = 0xfedcba9876543210n;
    const { encoder, decoder } = msgpack();
    expect(decoder.decode(encoder.encode([hash, 'BlockStored', [1, 2]]))).toEqual([hash, 'BlockStored', [1, 2]]);
  });

  it('is made once: every caller shares the same decoder and encoder', () => {
    expect(msgpack()).toBe(msgpack());
  });
});
