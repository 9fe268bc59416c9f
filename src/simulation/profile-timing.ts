// A profile's curves as step times: what a simulated engine's clock advances by. These run for
// every step of every simulated worker (millions of calls in a replay), so each profile's
// curves are laid out once, in typed arrays kept per profile, and a call allocates nothing.
//
// Prefill. T(x) runs through the origin and the `prefill` points, straight between them. A
// measured point includes the step's fixed cost (launch, sampling); drawn from the origin, that
// cost is spread over the first point's tokens, so a prefill of n tokens from nothing is
// exactly the curve at n, and prefills add up: T(c) + (T(c + n) − T(c)) = T(c + n). Past the
// last point the last segment's slope goes on.
//
// Decode. base(b) runs through the origin and the `decode` points, measured at
// `decodeContextTokens` (c0) per sequence; past the last point the last segment's slope goes
// on. The part of a step that reads the KV cache grows with the batch and with the context of
// each sequence, so it is taken as γ·b·c: γ from `attentionShare`, the share of the step at the
// curve's last point (bLast, yLast) that grows with the context, γ = share·yLast / (bLast·c0).
// At a mean context c:  step(b, c) = base(b) + γ·b·(c − c0),  never below (1 − share)·base(b).
// Scaling the whole of base(b) by the share instead would give one sequence's attention the
// weight of a full batch's: over the 38 points of Dynamo's H200 decode grid (the default
// profile's source) that is 39 % off at the best share, and 53 ms a step for one 128k-token
// sequence; this form is 5.8 % off, and 8.1 ms (a fit of α + β·b + γ·b·c to the grid: 8.3 ms).
import type { EngineProfile, ProfilePoint } from './profile-types.js';

/** A curve laid out for interpolation: the origin first, then the profile's points. */
interface Curve {
  readonly x: Float64Array;
  readonly ms: Float64Array;
  /** The slope of segment i (from point i to i + 1); the last one also beyond the last point. */
  readonly slope: Float64Array;
}

interface Laid {
  readonly prefill: Curve;
  readonly decode: Curve;
  /** γ: ms per sequence per token of context, the part of a step that reads the KV cache. */
  readonly attentionMsPerToken: number;
  readonly contextTokens: number;
  readonly share: number;
  readonly transferMsPerToken: number;
  readonly cpuLoadMsPerToken: number;
}

const LAID = new WeakMap<EngineProfile, Laid>();

function layOut(points: readonly ProfilePoint[]): Curve {
  const n = points.length + 1;
  const x = new Float64Array(n);
  const ms = new Float64Array(n);
  for (let i = 1; i < n; i++) {
    const point = points[i - 1] as ProfilePoint;
    x[i] = point.x;
    ms[i] = point.ms;
  }
  const slope = new Float64Array(n - 1);
  for (let i = 0; i < n - 1; i++)
    slope[i] = ((ms[i + 1] as number) - (ms[i] as number)) / ((x[i + 1] as number) - (x[i] as number));
  return { x, ms, slope };
}

function laid(profile: EngineProfile): Laid {
  let found = LAID.get(profile);
  if (found === undefined) {
    const decode = layOut(profile.decode);
    const last = decode.x.length - 1;
    const lastBatch = decode.x[last] as number;
    const lastMs = decode.ms[last] as number;
    found = {
      prefill: layOut(profile.prefill),
      decode,
      attentionMsPerToken: (profile.attentionShare * lastMs) / (lastBatch * profile.decodeContextTokens),
      contextTokens: profile.decodeContextTokens,
      share: profile.attentionShare,
      transferMsPerToken: profile.kvBytesPerToken / (profile.transferGBps * 1e6),
      cpuLoadMsPerToken: profile.kvBytesPerToken / (profile.cpuLoadGBps * 1e6),
    };
    LAID.set(profile, found);
  }
  return found;
}

/** The curve at `at` (0 or more): straight between points, the last slope past the last one. */
function valueAt(curve: Curve, at: number): number {
  const { x, ms, slope } = curve;
  const segments = slope.length;
  // The segment holding `at`: the last whose start is at or below it (a binary search; the
  // curves are a few dozen points).
  let low = 0;
  let high = segments - 1;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if ((x[middle] as number) <= at) low = middle;
    else high = middle - 1;
  }
  return (ms[low] as number) + (slope[low] as number) * (at - (x[low] as number));
}

/**
 * The time to prefill `newTokens` after `cachedTokens` already in the cache, in ms: T(c + n) − T(c),
 * the new tokens' own compute, their attention over the cached prefix included.
 *
 * @returns 0 for no new tokens; negative counts are taken as 0.
 * @example
 * prefillMs(profile, 0, 4096); // the profile's prefill curve at 4096 tokens
 * prefillMs(profile, 4096, 512); // less than prefillMs(profile, 0, 4608)
 */
export function prefillMs(profile: EngineProfile, cachedTokens: number, newTokens: number): number {
  if (!(newTokens > 0)) return 0;
  const curve = laid(profile).prefill;
  const cached = Math.max(cachedTokens, 0);
  return valueAt(curve, cached + newTokens) - valueAt(curve, cached);
}

/**
 * The time of one decode step of `batch` sequences whose context is `meanContextTokens` on
 * average, in ms (see the module's comment for the model).
 *
 * @returns 0 for an empty batch.
 * @example
 * decodeStepMs(profile, 32, profile.decodeContextTokens); // the decode curve at batch 32
 */
export function decodeStepMs(profile: EngineProfile, batch: number, meanContextTokens: number): number {
  if (!(batch > 0)) return 0;
  const layout = laid(profile);
  const base = valueAt(layout.decode, batch);
  const step = base + layout.attentionMsPerToken * batch * (meanContextTokens - layout.contextTokens);
  const floor = (1 - layout.share) * base;
  return Math.max(step, floor);
}

/**
 * Tokens per second a decode of `batch` sequences of `meanContextTokens` context produces: one
 * token a sequence a step.
 *
 * @returns 0 for an empty batch.
 * @example
 * decodeThroughput(profile, 64, 2048); // 64 × 1000 / decodeStepMs(profile, 64, 2048)
 */
export function decodeThroughput(profile: EngineProfile, batch: number, meanContextTokens: number): number {
  if (!(batch > 0)) return 0;
  return (batch * 1000) / decodeStepMs(profile, batch, meanContextTokens);
}

/**
 * The time to move `tokens` tokens' KV cache from a prefill worker to a decode worker over the
 * profile's link, in ms: tokens × kvBytesPerToken / transferGBps.
 *
 * @example
 * transferMs(profile, 8192);
 */
export function transferMs(profile: EngineProfile, tokens: number): number {
  return tokens > 0 ? tokens * laid(profile).transferMsPerToken : 0;
}

/**
 * The time to bring `tokens` tokens' KV cache back from the CPU offload tier to the GPU, in ms:
 * tokens × kvBytesPerToken / cpuLoadGBps.
 *
 * @example
 * cpuLoadMs(profile, 8192);
 */
export function cpuLoadMs(profile: EngineProfile, tokens: number): number {
  return tokens > 0 ? tokens * laid(profile).cpuLoadMsPerToken : 0;
}
