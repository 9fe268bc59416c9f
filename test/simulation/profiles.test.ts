import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { EngineProfile } from '../../src/simulation/profile-types.js';
import {
  checkProfile,
  DEFAULT_PROFILE,
  findProfile,
  PROFILES,
  ProfileError,
  profileSummary,
  readProfile,
} from '../../src/simulation/profiles.js';

const dir = mkdtempSync(join(tmpdir(), 'disagg-profiles-'));
const defaultProfile = findProfile(DEFAULT_PROFILE) as EngineProfile;

/** A copy of the default profile with `change` applied, written to a file; its path. */
const fileWith = (name: string, change: (profile: Record<string, unknown>) => void) => {
  const profile = structuredClone(defaultProfile) as unknown as Record<string, unknown>;
  change(profile);
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(profile));
  return path;
};

const failure = async (nameOrPath: string) => {
  try {
    await readProfile(nameOrPath);
  } catch (error) {
    return error as ProfileError;
  }
  throw new Error('read');
};

describe('the built-in profiles', () => {
  it.each([...PROFILES.keys()])('%s checks against the schema and names a source a reader can open', (name) => {
    const profile = PROFILES.get(name) as EngineProfile;
    expect(checkProfile(JSON.parse(JSON.stringify(profile)), name)).toEqual(profile);
    expect(profile.sources.some((source) => /^https:\/\/\S+$/.test(source.url))).toBe(true);
  });

  it('cover at least two models and two GPUs', () => {
    const profiles = [...PROFILES.values()];
    expect(new Set(profiles.map((profile) => profile.model)).size).toBeGreaterThanOrEqual(2);
    expect(new Set(profiles.map((profile) => profile.gpu)).size).toBeGreaterThanOrEqual(2);
  });

  it('the default is built in, and its context and KV cache hold a 128k-token prompt', () => {
    expect([...PROFILES.keys()][0]).toBe(DEFAULT_PROFILE);
    expect(defaultProfile.maxContextTokens).toBeGreaterThanOrEqual(131072);
    expect(defaultProfile.kvCacheTokens).toBeGreaterThanOrEqual(131072);
    // The curve reaches that far: no 128k prompt's time is extrapolated from 16k.
    expect(defaultProfile.prefill.at(-1)?.x).toBeGreaterThanOrEqual(131072);
  });

  it('a name is found, an unknown one is not', () => {
    expect(findProfile('llama-2-70b-a100-tp8-vllm')?.gpu).toBe('A100-SXM-80GB');
    expect(findProfile('gpt-5-on-a-toaster')).toBeUndefined();
  });

  it('a summary is one line with the name, model, GPU, parallelism, engine, context, KV and source', () => {
    const line = profileSummary(PROFILES.get('llama-2-70b-h100-tp4-vllm') as EngineProfile);
    expect(line).toBe(
      'llama-2-70b-h100-tp4-vllm: meta-llama/Llama-2-70b-hf on H100-SXM-80GB, TP4, vllm; context 4096, KV 522718 tokens; ' +
        'from Splitwise (ISCA 2024) profiling data, Llama2-70B on DGX-H100, TP4',
    );
  });
});

describe('readProfile', () => {
  it('gives a built-in profile by its name', async () => {
    expect(await readProfile(DEFAULT_PROFILE)).toBe(defaultProfile);
  });

  it('reads a profile of one’s own from a JSON file', async () => {
    const path = fileWith('mine.json', (profile) => {
      profile.name = 'mine';
      profile.engine = 'sglang';
    });
    const profile = await readProfile(path);
    expect(profile.name).toBe('mine');
    expect(profile.engine).toBe('sglang');
  });

  it('an unknown name is DISAGG_PROFILE, listing the built-in names on one line', async () => {
    const error = await failure('llama-9000b');
    expect(ProfileError.is(error)).toBe(true);
    expect(error.code).toBe('DISAGG_PROFILE');
    expect(error.message).not.toContain('\n');
    expect(error.message).toContain('llama-9000b');
    for (const name of PROFILES.keys()) expect(error.message).toContain(name);
  });

  it('a file that cannot be read, or is not JSON, is named', async () => {
    const missing = join(dir, 'absent.json');
    expect((await failure(missing)).message).toMatch(new RegExp(`^${missing}: cannot be read`));
    const path = join(dir, 'broken.json');
    writeFileSync(path, '{"name": ');
    expect((await failure(path)).message).toMatch(new RegExp(`^${path}: not JSON`));
  });

  it('a field of the wrong type names the file and the field', async () => {
    const path = fileWith('typed.json', (profile) => {
      (profile.decode as unknown[])[2] = { x: 64, ms: 'slow' };
    });
    const error = await failure(path);
    expect(error.code).toBe('DISAGG_PROFILE');
    expect(error.message).toMatch(new RegExp(`^${path}: decode\\[2\\]\\.ms: `));
  });

  it('a missing field, a field out of range and an unknown field are each named', async () => {
    const missing = await failure(fileWith('missing.json', (profile) => delete profile.kvBytesPerToken));
    expect(missing.message).toContain('kvBytesPerToken: ');
    const range = await failure(fileWith('range.json', (profile) => (profile.attentionShare = 1.5)));
    expect(range.message).toContain('attentionShare: ');
    const unknown = await failure(fileWith('unknown.json', (profile) => (profile.kvCacheToken = 5)));
    expect(unknown.message).toMatch(/\(the whole profile\): .*kvCacheToken/);
  });

  it('a profile without a source with an http(s) URL does not check', async () => {
    const none = await failure(fileWith('unsourced.json', (profile) => (profile.sources = [])));
    expect(none.message).toContain('sources: ');
    const local = await failure(
      fileWith('local.json', (profile) => (profile.sources = [{ title: 'my notes', url: 'file:///notes', notes: '' }])),
    );
    expect(local.message).toContain('sources[0].url: ');
  });

  it('a curve whose x does not ascend, or whose time falls, names the point', async () => {
    const order = await failure(
      fileWith('order.json', (profile) => {
        const prefill = profile.prefill as { x: number; ms: number }[];
        prefill[1] = { x: prefill[0]?.x as number, ms: prefill[1]?.ms as number };
      }),
    );
    expect(order.message).toMatch(/: prefill\[1\]\.x: .* must be greater than prefill\[0\]\.x/);
    const falls = await failure(
      fileWith('falls.json', (profile) => {
        const decode = profile.decode as { x: number; ms: number }[];
        decode[3] = { x: decode[3]?.x as number, ms: 1 };
      }),
    );
    expect(falls.message).toMatch(/: decode\[3\]\.ms: 1 is less than decode\[2\]\.ms .*must not fall/);
  });
});
