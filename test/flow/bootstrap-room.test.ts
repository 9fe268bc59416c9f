import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_BOOTSTRAP_ROOM, mintBootstrapRoom, workerRendezvous } from '../../src/flow/bootstrap-room.js';

const bytes =
  (...values: number[]) =>
  () =>
    Uint8Array.from(values);
const allOnes = bytes(255, 255, 255, 255, 255, 255, 255, 255);

describe('mintBootstrapRoom', () => {
  it('is a bigint in [0, 2^63 - 1], also at the top of the random range', () => {
    expect(mintBootstrapRoom({ randomBytes: allOnes })).toBe(MAX_BOOTSTRAP_ROOM);
    expect(mintBootstrapRoom({ randomBytes: bytes(0, 0, 0, 0, 0, 0, 0, 0) })).toBe(0n);
    expect(MAX_BOOTSTRAP_ROOM).toBe(9223372036854775807n);
  });

  it('rooms above 2^53 - 1 stay exact', () => {
    const room = mintBootstrapRoom({ randomBytes: bytes(0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf1) });
    expect(room).toBe(0x123456789abcdef1n);
    expect(room > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(room.toString()).toBe('1311768467463790321');
  });

  it('is congruent to the dp rank modulo the dp size, and below 2^63, for any random bytes', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 8, maxLength: 8 }),
        fc
          .integer({ min: 1, max: 1024 })
          .chain((size) => fc.tuple(fc.constant(size), fc.integer({ min: 0, max: size - 1 }))),
        (random, [dpSize, dpRank]) => {
          const room = mintBootstrapRoom({ dpRank, dpSize, randomBytes: () => random });
          expect(room % BigInt(dpSize)).toBe(BigInt(dpRank));
          expect(room >= 0n && room <= MAX_BOOTSTRAP_ROOM).toBe(true);
        },
      ),
      { seed: 7, numRuns: 2000 },
    );
  });

  it('at the top edge, the congruent room steps down rather than past 2^63 - 1', () => {
    // 2^63 - 1 is 7 mod 8; rank 7 fits, and the largest room of rank 6 is one lower.
    expect(mintBootstrapRoom({ dpRank: 7, dpSize: 8, randomBytes: allOnes })).toBe(MAX_BOOTSTRAP_ROOM);
    expect(mintBootstrapRoom({ dpRank: 6, dpSize: 8, randomBytes: allOnes })).toBe(MAX_BOOTSTRAP_ROOM - 1n);
    // A size that does not divide 2^63: the adjusted room would exceed the top.
    const room = mintBootstrapRoom({ dpRank: 4, dpSize: 5, randomBytes: allOnes });
    expect(room <= MAX_BOOTSTRAP_ROOM).toBe(true);
    expect(room % 5n).toBe(4n);
  });

  it('differs from call to call by default', () => {
    expect(mintBootstrapRoom()).not.toBe(mintBootstrapRoom());
  });

  it('by default never hands out the same random bytes twice, across refills of its pool', () => {
    // The pool holds 512 rooms: several refills, every room in range and none repeated.
    const rooms = Array.from({ length: 2048 }, () => mintBootstrapRoom());
    expect(new Set(rooms).size).toBe(rooms.length);
    for (const room of rooms) expect(room >= 0n && room <= MAX_BOOTSTRAP_ROOM).toBe(true);
    // With a DP rank the pooled room is still congruent to it.
    for (let i = 0; i < 600; i++) expect(mintBootstrapRoom({ dpRank: 5, dpSize: 8 }) % 8n).toBe(5n);
  });

  it.each([
    [{ dpRank: 0 }, 'dpSize must be a positive integer, got undefined'],
    [{ dpRank: 0, dpSize: 0 }, 'dpSize must be a positive integer, got 0'],
    [{ dpRank: 2, dpSize: 2 }, 'dpRank must be an integer in [0, 2), got 2'],
    [{ dpRank: -1, dpSize: 2 }, 'dpRank must be an integer in [0, 2), got -1'],
    [{ dpRank: 0.5, dpSize: 2 }, 'dpRank must be an integer in [0, 2), got 0.5'],
    [{ dpSize: 4 }, 'dpRank must be an integer in [0, 4), got undefined'],
  ])('refuses %j', (options, message) => {
    expect(() => mintBootstrapRoom(options)).toThrow(new RangeError(message));
  });
});

describe('workerRendezvous: what it needs of a worker, and says when it lacks it', () => {
  const refusal = "The sglang-bootstrap connector sends both legs at once and needs the prefill worker's rendezvous";
  it.each([
    ['an empty host', { bootstrapHost: '', bootstrapPort: 1 }],
    ['a host that is not a string', { bootstrapHost: 7, bootstrapPort: 1 }],
    ['a url that is not one', { url: 'not a url', bootstrapPort: 1 }],
    ['a url that is not a string', { url: 7, bootstrapPort: 1 }],
    ['no port', { bootstrapHost: 'p0' }],
  ])('%s: refused', (_, worker) => {
    expect(() => workerRendezvous(worker, 'sglang-bootstrap', 1)).toThrow(refusal);
  });

  it("the host is the url's by default; a dpSize without a dpRank names the worker by its url", () => {
    expect(workerRendezvous({ url: 'http://p0:30000', bootstrapPort: 8998 }, 'c', 1)).toMatchObject({
      bootstrap_host: 'p0',
      bootstrap_port: 8998,
    });
    expect(() =>
      workerRendezvous({ url: 'http://p0:30000', bootstrapHost: 'h', bootstrapPort: 1, dpSize: 2 }, 'c', 1),
    ).toThrow('The prefill worker "http://p0:30000" has dpSize 2 but no dpRank');
  });

  it('random bytes given must be 8', () => {
    expect(() => mintBootstrapRoom({ randomBytes: bytes(1, 2, 3) })).toThrow('randomBytes must give 8 bytes, gave 3');
  });
});
