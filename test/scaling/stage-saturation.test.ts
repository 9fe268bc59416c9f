import { describe, expect, it } from 'vitest';
import {
  effectiveSaturation,
  SATURATION_DEFAULTS,
  sideSaturation,
  workerSaturation,
} from '../../src/scaling/stage-saturation.js';

const limits = { queueDepth: 5, kvUsage: 0.8, prefillRequests: 4, decodeRequests: 10 };

describe('stage saturation', () => {
  it("an engine's reading wins: the greater of its queue against the depth and its KV cache against the usage", () => {
    expect(workerSaturation('decode', { waiting: 10, running: 3, kvUsage: 0.4 }, 99, limits)).toEqual({
      value: 2,
      source: 'engine',
    });
    expect(workerSaturation('prefill', { waiting: 0, running: 3, kvUsage: 0.4 }, 99, limits)).toEqual({
      value: 0.5,
      source: 'engine',
    });
  });

  it("without a reading, the requests in flight against the role's capacity, not clamped", () => {
    expect(workerSaturation('prefill', undefined, 6, limits)).toEqual({ value: 1.5, source: 'in-flight' });
    expect(workerSaturation('decode', undefined, 6, limits)).toEqual({ value: 0.6, source: 'in-flight' });
  });

  it('a side is the mean of its workers in rotation, and says where each reading came from', () => {
    const load = { inFlight: (worker: string) => (worker === 'a' ? 8 : 0) };
    const engine = (worker: string) => (worker === 'b' ? { waiting: 5, running: 0, kvUsage: 0 } : undefined);
    expect(sideSaturation('prefill', ['a', 'b'], load, engine, limits)).toEqual({
      value: 1.5,
      workers: { engine: 1, 'in-flight': 1 },
    });
  });

  it('a side with no worker in rotation reads 1.0 (it takes nothing more), with no worker read', () => {
    expect(sideSaturation('decode', [], { inFlight: () => 0 }, () => undefined, limits)).toEqual({
      value: 1,
      workers: { engine: 0, 'in-flight': 0 },
    });
  });

  it('the effective stage is the busier side, or decode alone for a pool without prefill workers', () => {
    expect(effectiveSaturation(1.5, 0.5, true)).toBe(1.5);
    expect(effectiveSaturation(0.2, 0.5, true)).toBe(0.5);
    expect(effectiveSaturation(1, 0.5, false)).toBe(0.5);
  });

  it("the defaults are llm-d's thresholds", () => {
    expect(SATURATION_DEFAULTS).toMatchObject({ queueDepth: 5, kvUsage: 0.8 });
  });
});
