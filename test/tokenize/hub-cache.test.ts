// The second line of defence: whatever reaches the cache's functions (past hub-ids' rules),
// no path they read or write leaves the model's folder.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cachedSnapshot, inside, storeFile, writeRef } from '../../src/tokenize/hub-cache.js';
import { TokenizerError } from '../../src/tokenize/tokenizer-pool.js';

const COMMIT = 'c0ffee0000000000000000000000000000000001';
let root = '';
let cache = '';
let folder = '';
beforeEach(() => {
  // The cache three levels down, so that `..` from refs/, blobs/ or snapshots/ lands in root.
  root = mkdtempSync(join(tmpdir(), 'disagg-hub-cache-'));
  cache = join(root, 'hf', 'hub');
  folder = join(cache, 'models--org--name');
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** Every path under root, relative to it. */
function listing(): string[] {
  return readdirSync(root, { recursive: true }).map(String).sort();
}

async function refused(action: () => unknown): Promise<TokenizerError> {
  const error = await (async () => action())().catch((caught: unknown) => caught);
  expect(TokenizerError.is(error), String(error)).toBe(true);
  expect((error as TokenizerError).message).not.toContain('\n');
  return error as TokenizerError;
}

describe('every path in the hub cache stays inside the model folder', () => {
  it('inside() resolves parts under a folder and refuses .., an absolute part, and the folder itself', async () => {
    expect(inside(folder, 'refs', 'refs/pr/1')).toBe(join(folder, 'refs', 'refs', 'pr', '1'));
    expect(inside(folder, 'blobs', 'a..b')).toBe(join(folder, 'blobs', 'a..b'));
    expect((await refused(() => inside(folder, 'refs', '../../x'))).message).toContain('leads outside');
    await refused(() => inside(folder, '/etc/passwd'));
    await refused(() => inside(folder, 'refs', '..', '..'));
    await refused(() => inside(folder, '.'));
    // A sibling whose name starts with the folder's is outside it too.
    await refused(() => inside(folder, '../models--org--name-evil/x'));
  });

  it('writeRef refuses a revision that climbs out of refs/, and writes nothing', async () => {
    mkdirSync(cache, { recursive: true });
    const before = listing();
    await refused(() => writeRef(folder, '../../../../outside/x', COMMIT));
    await refused(() => writeRef(folder, '../blobs/x', COMMIT));
    await refused(() => writeRef(folder, `${'../'.repeat(40)}${root.slice(1)}/absolute/x`, COMMIT));
    expect(listing()).toEqual(before);
  });

  it('writeRef records only a commit: a ref holding a path would name a snapshot outside', async () => {
    mkdirSync(cache, { recursive: true });
    const before = listing();
    await refused(() => writeRef(folder, 'main', '../../../../outside'));
    expect(listing()).toEqual(before);
  });

  it('storeFile refuses an etag, a commit or a file name that climbs out, before writing anything', async () => {
    mkdirSync(cache, { recursive: true });
    const before = listing();
    const content = async () => new Uint8Array([123, 125]);
    await refused(() => storeFile(folder, COMMIT, 'tokenizer.json', '../../../../outside/etag', content));
    await refused(() => storeFile(folder, COMMIT, 'tokenizer.json', `${root}/absolute-etag`, content));
    await refused(() => storeFile(folder, '../../../../outside/sha', 'tokenizer.json', COMMIT, content));
    await refused(() => storeFile(folder, '../blobs', 'tokenizer.json', COMMIT, content));
    await refused(() => storeFile(folder, COMMIT, '../../../../../outside/file', COMMIT, content));
    expect(listing()).toEqual(before);
    // The ordinary layout still lands where huggingface_hub puts it.
    expect(await storeFile(folder, COMMIT, 'tokenizer.json', COMMIT, content)).toBe(2);
    await writeRef(folder, 'refs/pr/1', COMMIT);
    expect(cachedSnapshot(folder, 'refs/pr/1')).toEqual({ dir: join(folder, 'snapshots', COMMIT), commit: COMMIT });
  });

  it('cachedSnapshot reads no ref outside refs/, and takes only a commit from a ref', async () => {
    // A snapshot in the cache, and a file outside it that names its commit.
    await storeFile(folder, COMMIT, 'tokenizer.json', COMMIT, async () => new Uint8Array([123, 125]));
    mkdirSync(join(root, 'outside'));
    writeFileSync(join(root, 'outside', 'x'), COMMIT);
    await refused(() => cachedSnapshot(folder, '../../../../outside/x'));
    // A ref that holds a path rather than a commit, and a ref that is a folder: not cached.
    mkdirSync(join(folder, 'refs', 'refs', 'pr'), { recursive: true });
    writeFileSync(join(folder, 'refs', 'main'), `../../snapshots/${COMMIT}`);
    expect(cachedSnapshot(folder, 'main')).toBeUndefined();
    expect(cachedSnapshot(folder, 'refs/pr')).toBeUndefined();
  });
});
