// A profile for checking the engine model's arithmetic, not a real engine's: round numbers so
// that a test's expected time reads as a sum. Real engines' profiles are in src/simulation/profiles.
import type { EngineProfile } from '../../src/simulation/profile-types.js';

export const ARITHMETIC_PROFILE: EngineProfile = {
  name: 'arithmetic-check',
  model: 'none',
  gpu: 'none',
  engine: 'vllm',
  tensorParallel: 1,
  maxContextTokens: 131_072,
  kvCacheTokens: 65_536,
  kvBytesPerToken: 131_072,
  blockTokens: 16,
  maxBatchTokens: 8192,
  maxRunning: 64,
  prefill: [
    { x: 1024, ms: 50 },
    { x: 8192, ms: 450 },
    { x: 32_768, ms: 2200 },
  ],
  decode: [
    { x: 1, ms: 10 },
    { x: 64, ms: 20 },
  ],
  decodeContextTokens: 4096,
  attentionShare: 0.25,
  transferGBps: 25,
  cpuCacheTokens: 0,
  cpuLoadGBps: 32,
  sources: [{ title: 'a test fixture', url: 'test/simulation/sim-fixtures.ts', notes: 'round numbers for arithmetic' }],
};

/** A request of `blocks` hashes, `inputTokens` long (the blocks' 512 tokens each, the last what is left). */
export function traceRequest(
  arrivalMs: number,
  blocks: number[],
  outputTokens: number,
  inputTokens = blocks.length * 512,
) {
  return { arrivalMs, inputTokens, outputTokens, blocks };
}
