import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BodyBuffer } from '../../src/epp/body-buffer.js';
import { propertyOptions } from '../support/property.js';

describe('a request body read in chunks', () => {
  it('keeps every byte in order, whatever the chunking and the content-length it was told', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 20_000 }),
        fc.array(fc.integer({ min: 0, max: 5_000 }), { maxLength: 40 }),
        fc.option(fc.nat(30_000), { nil: undefined }),
        (bytes, cuts, expected) => {
          const body = new BodyBuffer(1 << 20, expected);
          let at = 0;
          for (const cut of cuts) {
            expect(body.append(bytes.subarray(at, at + cut))).toBe(true);
            at = Math.min(bytes.length, at + cut);
          }
          body.append(bytes.subarray(at));
          expect(Buffer.from(bytes).equals(body.bytes())).toBe(true);
          expect(body.size).toBe(bytes.length);
        },
      ),
      propertyOptions(200, 69_007),
    );
  });

  it('holds one buffer of at most twice the bytes read (1 KiB at least), never more than the limit, when sent a byte at a time', () => {
    const limit = 300_000;
    const body = new BodyBuffer(limit);
    const byte = Buffer.from('x');
    const over: number[] = [];
    for (let read = 1; read <= limit; read++) {
      body.append(byte);
      if (body.held > Math.min(limit, Math.max(1024, 2 * read))) over.push(read);
    }
    expect(over).toEqual([]);
    expect(body.held).toBe(limit);
    expect(body.bytes().length).toBe(limit);
  });

  it('grows to the content-length it was told and no further; past it when more comes; a content-length past the limit is no reason to hold more', () => {
    const told = new BodyBuffer(1 << 20, 70_000);
    for (let i = 0; i < 70; i++) told.append(Buffer.alloc(1000));
    expect(told.held).toBe(70_000);
    told.append(Buffer.alloc(1000));
    expect(told.held).toBeGreaterThanOrEqual(71_000);
    const lying = new BodyBuffer(100_000, 10_000_000);
    lying.append(Buffer.alloc(10));
    expect(lying.held).toBe(1024);
  });

  it('past the limit: refuses the chunk, lets its bytes go, and only counts what comes after', () => {
    const body = new BodyBuffer(1000);
    expect(body.append(Buffer.alloc(1000))).toBe(true);
    expect(body.over).toBe(false);
    expect(body.append(Buffer.alloc(1))).toBe(false);
    expect(body.over).toBe(true);
    expect(body.held).toBe(0);
    expect(body.append(Buffer.alloc(5000))).toBe(false);
    expect(body.held).toBe(0);
    expect(body.size).toBe(6001);
    expect(body.bytes().length).toBe(0);
  });
});
