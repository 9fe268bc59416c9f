// What a profile file must hold to drive a simulated engine: every field of `EngineProfile`,
// of its type and range, no field more (a misspelt one would be silently ignored otherwise),
// curves that rise from left to right, and at least one source a reader can open. A profile
// is data from outside the code (`--profile FILE`), so each fault names its file and field.
import * as z from 'zod/mini';
import en from 'zod/v4/locales/en.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import type { EngineProfile, ProfilePoint } from './profile-types.js';

// zod's functional build, bundled (see request-schemas.ts), with its English messages; the
// configuration is this bundled copy's own.
z.config(en());

/**
 * A profile unknown by name, or a profile file that does not check: the file and the field at
 * fault, or the built-in names (`code` `DISAGG_PROFILE`).
 */
export class ProfileError extends DisaggError {
  static override readonly is = branded<ProfileError>('ProfileError');
  declare readonly code: 'DISAGG_PROFILE';

  constructor(message: string, options?: { cause?: unknown }) {
    super('DISAGG_PROFILE', message, options);
  }
}

const positiveInt = () => z.int().check(z.positive());
const positive = () => z.number().check(z.positive());

const POINT = z.strictObject({ x: positive(), ms: z.number().check(z.nonnegative()) });

const SOURCE = z.strictObject({
  title: z.string().check(z.minLength(1)),
  url: z.url({ protocol: /^https?$/ }),
  notes: z.string(),
});

const PROFILE = z.strictObject({
  name: z.string().check(z.regex(/^[a-z0-9][a-z0-9._-]*$/, 'a name is lower-case letters, digits, dots and dashes')),
  model: z.string().check(z.minLength(1)),
  gpu: z.string().check(z.minLength(1)),
  engine: z.enum(['vllm', 'sglang']),
  tensorParallel: positiveInt(),
  maxContextTokens: positiveInt(),
  kvCacheTokens: positiveInt(),
  kvBytesPerToken: positiveInt(),
  blockTokens: positiveInt(),
  maxBatchTokens: positiveInt(),
  maxRunning: positiveInt(),
  prefill: z.array(POINT).check(z.minLength(1)),
  decode: z.array(POINT).check(z.minLength(1)),
  decodeContextTokens: positiveInt(),
  attentionShare: z.number().check(z.gte(0), z.lte(1)),
  transferGBps: positive(),
  cpuCacheTokens: z.int().check(z.nonnegative()),
  cpuLoadGBps: positive(),
  sources: z.array(SOURCE).check(z.minLength(1)),
});

/** A field's place as a reader writes it: `decode[2].ms`. */
function fieldName(path: readonly PropertyKey[]): string {
  let name = '';
  for (const key of path) name += typeof key === 'number' ? `[${key}]` : `${name === '' ? '' : '.'}${String(key)}`;
  return name === '' ? '(the whole profile)' : name;
}

/** The first point of `curve` that does not follow its rule, as `field[i].x: problem`. */
function curveFault(curve: readonly ProfilePoint[], field: string): string | undefined {
  for (let i = 1; i < curve.length; i++) {
    const before = curve[i - 1] as ProfilePoint;
    const point = curve[i] as ProfilePoint;
    // Ascending x: interpolation finds a segment by it. Rising ms: a longer prompt or a larger
    // batch never takes less time, so no prefill of cached tokens costs less than nothing.
    if (!(point.x > before.x))
      return `${field}[${i}].x: ${point.x} must be greater than ${field}[${i - 1}].x (${before.x})`;
    if (point.ms < before.ms)
      return `${field}[${i}].ms: ${point.ms} is less than ${field}[${i - 1}].ms (${before.ms}): the curve must not fall`;
  }
  return undefined;
}

/**
 * `value` checked as an engine profile.
 *
 * @param where what to name in a fault (the file's path).
 * @throws {ProfileError} naming `where` and each field at fault: missing, of the wrong type or
 *   range, unknown, a curve whose `x` does not ascend or whose `ms` falls, no source with an
 *   http(s) URL.
 * @example
 * const profile = checkProfile(JSON.parse(text), 'my-profile.json');
 */
export function checkProfile(value: unknown, where: string): EngineProfile {
  const parsed = PROFILE.safeParse(value);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${fieldName(issue.path)}: ${issue.message}`);
    throw new ProfileError(`${where}: ${problems.join('; ')}`);
  }
  const profile = parsed.data;
  const fault = curveFault(profile.prefill, 'prefill') ?? curveFault(profile.decode, 'decode');
  if (fault !== undefined) throw new ProfileError(`${where}: ${fault}`);
  return profile;
}
