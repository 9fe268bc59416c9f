// The profiles a simulated engine can take by name, each a data file under profiles/ with its
// sources named: published profiling of real engines, the derivations written in each
// source's notes. A profile of one's own is a JSON file of the same shape, given by its path.
import { readFile } from 'node:fs/promises';
import { checkProfile, ProfileError } from './profile-schema.js';
import type { EngineProfile } from './profile-types.js';
import llama70bA100Tp4 from './profiles/llama-2-70b-a100-tp4-vllm.json' with { type: 'json' };
import llama70bA100Tp8 from './profiles/llama-2-70b-a100-tp8-vllm.json' with { type: 'json' };
import llama70bH100Tp4 from './profiles/llama-2-70b-h100-tp4-vllm.json' with { type: 'json' };
import llama70bH100Tp8 from './profiles/llama-2-70b-h100-tp8-vllm.json' with { type: 'json' };
import llama8bH200Tp1 from './profiles/llama-3.1-8b-fp8-h200-tp1-vllm.json' with { type: 'json' };

export { checkProfile, ProfileError } from './profile-schema.js';

// JSON's strings widen to `string` where the type has `'vllm' | 'sglang'`: the files are
// checked against the schema by test/simulation/profiles.test.ts instead of at every start.
const BUILT_IN = [
  llama8bH200Tp1,
  llama70bH100Tp4,
  llama70bH100Tp8,
  llama70bA100Tp4,
  llama70bA100Tp8,
] as readonly EngineProfile[];

/** Every built-in profile by its name, the default first. */
export const PROFILES: ReadonlyMap<string, EngineProfile> = new Map(BUILT_IN.map((profile) => [profile.name, profile]));

/**
 * The profile `disagg simulate` takes when none is named: Llama 3.1 8B (FP8) on one H200 with
 * vLLM, from Dynamo's published planner profiling; its context holds 128k-token prompts.
 */
export const DEFAULT_PROFILE = 'llama-3.1-8b-fp8-h200-tp1-vllm';

/**
 * The built-in profile of that name, if there is one.
 *
 * @example
 * findProfile(DEFAULT_PROFILE)?.maxContextTokens; // 131072
 */
export function findProfile(name: string): EngineProfile | undefined {
  return PROFILES.get(name);
}

// A path, not a name: names have neither slashes nor a `.json` ending.
const looksLikePath = (value: string) => /[\\/]/.test(value) || value.toLowerCase().endsWith('.json');

/**
 * A built-in profile by name, or a profile of one's own from the JSON file at a path.
 *
 * @param nameOrPath a name from {@link PROFILES}, or a path (with a slash, or ending `.json`).
 * @throws {ProfileError} for an unknown name (listing the built-in ones, on one line), a file
 *   that cannot be read or is not JSON (naming it), or a profile that does not check (naming
 *   the file and the field, see {@link checkProfile}).
 * @example
 * const profile = await readProfile('llama-2-70b-h100-tp4-vllm');
 * const mine = await readProfile('./profiles/qwen3-32b-h200-tp2.json');
 */
export async function readProfile(nameOrPath: string): Promise<EngineProfile> {
  const builtIn = findProfile(nameOrPath);
  if (builtIn !== undefined) return builtIn;
  if (!looksLikePath(nameOrPath)) {
    throw new ProfileError(
      `No profile is named ${nameOrPath}: the built-in ones are ${[...PROFILES.keys()].join(', ')} (or give the path of a profile's JSON file)`,
    );
  }
  let text: string;
  try {
    text = await readFile(nameOrPath, 'utf8');
  } catch (error) {
    throw new ProfileError(`${nameOrPath}: cannot be read (${(error as Error).message})`, { cause: error });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ProfileError(`${nameOrPath}: not JSON (${(error as Error).message})`, { cause: error });
  }
  return checkProfile(value, nameOrPath);
}

/**
 * One line of `--list-profiles`: the name, the model, the GPU and its parallelism, the engine,
 * the context, the KV cache, and where the numbers come from.
 *
 * @example
 * profileSummary(findProfile(DEFAULT_PROFILE)!);
 * // 'llama-3.1-8b-fp8-h200-tp1-vllm: nvidia/Llama-3.1-8B-Instruct-FP8 on H200-SXM-141GB, TP1, vllm; context 131072, KV 945029 tokens; from Dynamo SLA planner …'
 */
export function profileSummary(profile: EngineProfile): string {
  const source = profile.sources[0]?.title ?? 'no source';
  return (
    `${profile.name}: ${profile.model} on ${profile.gpu}, TP${profile.tensorParallel}, ${profile.engine}; ` +
    `context ${profile.maxContextTokens}, KV ${profile.kvCacheTokens} tokens; from ${source}`
  );
}
