import { describe, expect, it } from 'vitest';
import {
  cpuLoadMs,
  decodeStepMs,
  decodeThroughput,
  prefillMs,
  transferMs,
} from '../../src/simulation/profile-timing.js';
import type { EngineProfile } from '../../src/simulation/profile-types.js';
import { DEFAULT_PROFILE, PROFILES } from '../../src/simulation/profiles.js';

const all = [...PROFILES.values()];
const byName = all.map((profile) => [profile.name, profile] as const);

// A profile small enough to check by hand.
const toy: EngineProfile = {
  ...(PROFILES.get(DEFAULT_PROFILE) as EngineProfile),
  name: 'toy',
  prefill: [
    { x: 100, ms: 20 },
    { x: 1000, ms: 50 },
    { x: 2000, ms: 110 },
  ],
  decode: [
    { x: 1, ms: 5 },
    { x: 10, ms: 8 },
    { x: 100, ms: 40 },
  ],
  decodeContextTokens: 1000,
  attentionShare: 0.5,
  kvBytesPerToken: 131072,
  transferGBps: 50,
  cpuLoadGBps: 64,
};

describe('prefill time', () => {
  it.each(byName)('%s: a prefill of n tokens from nothing is the curve at n, at every point', (_, profile) => {
    for (const point of profile.prefill) expect(prefillMs(profile, 0, point.x)).toBeCloseTo(point.ms, 9);
  });

  it('below the first point the curve runs straight from the origin', () => {
    expect(prefillMs(toy, 0, 50)).toBeCloseTo(10, 9);
    expect(prefillMs(toy, 0, 550)).toBeCloseTo(35, 9);
  });

  it('past the last point it goes on at the last segment’s slope', () => {
    expect(prefillMs(toy, 0, 3000)).toBeCloseTo(170, 9);
  });

  it('a cached prefix costs only the new tokens: T(c + n) − T(c)', () => {
    expect(prefillMs(toy, 1000, 1000)).toBeCloseTo(60, 9);
    expect(prefillMs(toy, 100, 400)).toBeCloseTo((30 * 400) / 900, 9);
  });

  it.each(byName)('%s: a cached prefix makes a prompt cheaper, and the parts add up to the whole', (_, profile) => {
    for (const [cached, fresh] of [
      [512, 512],
      [4096, 1024],
      [1000, 7000],
    ] as const) {
      expect(prefillMs(profile, cached, fresh)).toBeLessThan(prefillMs(profile, 0, cached + fresh));
      expect(prefillMs(profile, 0, cached) + prefillMs(profile, cached, fresh)).toBeCloseTo(
        prefillMs(profile, 0, cached + fresh),
        9,
      );
    }
  });

  it('no new tokens cost nothing, and a negative cache counts as none', () => {
    expect(prefillMs(toy, 500, 0)).toBe(0);
    expect(prefillMs(toy, -5, 100)).toBeCloseTo(20, 9);
  });
});

describe('decode step time', () => {
  it.each(byName)('%s: at the curve’s context, a step is the curve at each batch', (_, profile) => {
    for (const point of profile.decode) {
      expect(decodeStepMs(profile, point.x, profile.decodeContextTokens)).toBeCloseTo(point.ms, 9);
    }
  });

  it.each(byName)(
    '%s: from the curve’s context up, a larger batch never takes less time, nor a longer context',
    (_, profile) => {
      // Below the curve's context a flat stretch of the measured curve can dip by the cache reads
      // it saves (a tenth of a ms on Splitwise's pooled points): the rule holds from c0 up.
      for (const context of [profile.decodeContextTokens, 8192, profile.maxContextTokens]) {
        let before = 0;
        for (let batch = 1; batch <= profile.maxRunning; batch++) {
          const step = decodeStepMs(profile, batch, context);
          expect(step).toBeGreaterThanOrEqual(before);
          expect(decodeStepMs(profile, batch, context * 2)).toBeGreaterThanOrEqual(step);
          before = step;
        }
      }
    },
  );

  it('an empty batch costs nothing; below the first batch the curve runs from the origin', () => {
    expect(decodeStepMs(toy, 0, 1000)).toBe(0);
    expect(decodeStepMs(toy, 0.5, 1000)).toBeCloseTo(2.5, 9);
  });

  it('past the last batch it goes on at the last segment’s slope', () => {
    expect(decodeStepMs(toy, 190, 1000)).toBeCloseTo(72, 9);
  });

  it('at the last batch, the attention share of the step grows with the context', () => {
    // 40 ms at batch 100 and 1000 tokens, half of it reading the cache: twice the context, 60 ms.
    expect(decodeStepMs(toy, 100, 2000)).toBeCloseTo(60, 9);
    expect(decodeStepMs(toy, 100, 500)).toBeCloseTo(30, 9);
  });

  it('the part that reads the cache grows with the batch, not with the step’s fixed cost', () => {
    // γ = 0.5 × 40 / (100 × 1000) ms a token a sequence: one sequence of 11,000 tokens adds 2 ms.
    expect(decodeStepMs(toy, 1, 11_000)).toBeCloseTo(7, 9);
  });

  it('a shorter context takes off what it does not read, never below (1 − share) of the curve', () => {
    expect(decodeStepMs(toy, 1, 0)).toBeCloseTo(5 - 0.0002 * 1000, 9);
    expect(decodeStepMs(toy, 100, 0)).toBeCloseTo(20, 9);
    // Past the last batch the curve rises slower than the reads: 72 − 38 would be 34 ms.
    expect(decodeStepMs(toy, 190, 0)).toBeCloseTo(36, 9);
  });

  it('throughput is one token a sequence a step', () => {
    expect(decodeThroughput(toy, 10, 1000)).toBeCloseTo(1250, 9);
    expect(decodeThroughput(toy, 0, 1000)).toBe(0);
  });
});

describe('moving KV', () => {
  it('a transfer is tokens × bytes a token over the link', () => {
    // 1000 tokens × 131,072 bytes at 50 GB/s.
    expect(transferMs(toy, 1000)).toBeCloseTo(2.62144, 9);
    expect(transferMs(toy, 0)).toBe(0);
  });

  it('a load from the CPU tier is tokens × bytes a token over PCIe', () => {
    expect(cpuLoadMs(toy, 1000)).toBeCloseTo(2.048, 9);
    expect(cpuLoadMs(toy, -1)).toBe(0);
  });
});
