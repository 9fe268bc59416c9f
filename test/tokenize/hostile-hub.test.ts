// `--tokenizer` ids and hub answers that would name a path outside the Hugging Face cache (the
// round 5 security pass, "Tokenizer ids"): refused in one line, nothing written outside, against
// a permissive mirror that answers for any revision and a hostile HF_ENDPOINT alike.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TokenizerError } from '../../src/tokenize/tokenizer-pool.js';
import { findTokenizer } from '../../src/tokenize/tokenizer-source.js';
import { type HubStandIn, hubStandIn, STAND_IN_COMMIT } from '../support/hub-stand-in.js';

const files = { 'tokenizer.json': '{}', 'tokenizer_config.json': '{}' };
const BAD_SHA = '../../../../outside/sha';
let hub: HubStandIn;
beforeAll(async () => {
  hub = await hubStandIn({
    // A mirror that resolves any revision, `..` and all (the real hub answers 404).
    'org/name': { files, anyRevision: true },
    'Qwen/Qwen3-0.6B': { files },
    'evil/sha': { files, commit: BAD_SHA },
    'evil/etag': { files, oids: { 'tokenizer.json': '../../../../outside/etag' } },
  });
});
afterAll(() => hub.close());

// HF_HOME three levels below root: four `..` from refs/, blobs/ or snapshots/ land in root.
let root = '';
let env: Record<string, string> = {};
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'disagg-hostile-hub-'));
  env = { HF_HOME: join(root, 'hf'), HF_ENDPOINT: hub.url };
  mkdirSync(cache(), { recursive: true });
  hub.requests.length = 0;
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

const cache = () => join(root, 'hf', 'hub');
/** Every path under the temporary root, relative to it. */
function listing(): string[] {
  return readdirSync(root, { recursive: true }).map(String).sort();
}
/** What appeared under root outside the cache (which exists from the start) since `before`. */
function outsideTheCache(before: string[]): string[] {
  return listing().filter((path) => !before.includes(path) && !join(root, path).startsWith(`${cache()}/`));
}

async function refusal(value: string, given = env): Promise<string> {
  const error = await findTokenizer(value, { env: given }).catch((caught: unknown) => caught);
  expect(TokenizerError.is(error), String(error)).toBe(true);
  expect((error as TokenizerError).message).not.toContain('\n');
  return (error as TokenizerError).message;
}

describe('a revision with .. against a hub that answers for it', () => {
  it('org/name@../../../../outside/x is refused before any request, and nothing is written', async () => {
    const before = listing();
    expect(await refusal('org/name@../../../../outside/x')).toBe(
      "--tokenizer org/name@../../../../outside/x: no such directory, nor a revision the Hugging Face hub allows after @ ('..' in it): give a branch or tag as git names them (main, v1.0, refs/pr/1) or a 40-hex commit",
    );
    expect(hub.requests).toEqual([]);
    expect(listing()).toEqual(before);
  });

  it('enough .. to reach / and then an absolute path is refused, and nothing is written there', async () => {
    const before = listing();
    const target = `${'../'.repeat(40)}${root.slice(1)}/absolute/x`;
    expect(await refusal(`org/name@${target}`)).toContain("('..' in it)");
    expect(hub.requests).toEqual([]);
    expect(listing()).toEqual(before);
  });
});

describe("a hub's answers that would name a path", () => {
  it('a commit with .. is refused before anything is written: no ref, no blob, nothing outside', async () => {
    const before = listing();
    expect(await refusal('evil/sha')).toMatch(
      /^--tokenizer evil\/sha@main: http:\/\/127\.0\.0\.1:\d+ answered a commit that is not 40 hex digits \(\.\.\/\.\.\/\.\.\/\.\.\/outside\/sha\), refused before it named a path in the cache: check HF_ENDPOINT/,
    );
    expect(outsideTheCache(before)).toEqual([]);
    expect(listing()).toEqual(before);
  });

  it('an absolute commit is refused too (it would be a snapshot of that name)', async () => {
    const absolute = await hubStandIn({ 'evil/abs': { files, commit: `${root}/absolute-sha` } });
    try {
      const before = listing();
      expect(await refusal('evil/abs', { ...env, HF_ENDPOINT: absolute.url })).toContain(
        'answered a commit that is not 40 hex digits',
      );
      expect(listing()).toEqual(before);
    } finally {
      await absolute.close();
    }
  });

  it('a blob id with / is refused before any file is written: nothing outside, no blob', async () => {
    const before = listing();
    expect(await refusal('evil/etag')).toContain(
      'answered a file id that is not a file name (../../../../outside/etag), refused before it named a path in the cache',
    );
    expect(outsideTheCache(before)).toEqual([]);
    // Only where main is (a commit) was recorded: no blob, no snapshot.
    expect(listing().filter((path) => !before.includes(path))).toEqual([
      'hf/hub/models--evil--etag',
      'hf/hub/models--evil--etag/refs',
      'hf/hub/models--evil--etag/refs/main',
    ]);
  });
});

describe('offline, the hostile ids of the security pass fail in one line and touch nothing', () => {
  it('each id is refused with its own words, and no path appears', async () => {
    const offline = { ...env, HF_HUB_OFFLINE: '1' };
    const before = listing();
    const cases: Record<string, RegExp> = {
      '/etc': /^--tokenizer \/etc has no tokenizer\.json/,
      '/etc/passwd': /^--tokenizer \/etc\/passwd: no such directory, nor a Hugging Face model id/,
      'org/../../..': /no such directory, nor a Hugging Face model id/,
      '..%2F..%2Fetc': /no such directory, nor a Hugging Face model id/,
      'org/..%2F..': /no such directory, nor a Hugging Face model id/,
      'org/..': /nor a model id the Hugging Face hub allows \(a part starts or ends with '-' or '\.'\)/,
      [`a/${'a'.repeat(5_000)}`]: /nor a model id the Hugging Face hub allows \(a part is not 1 to 96 characters\)/,
      [`a/${'a'.repeat(100_000)}`]:
        /^--tokenizer a\/a{198}\.\.\. \(100002 characters\): no such directory, nor a model id/,
      'org/name@../..': /nor a revision the Hugging Face hub allows after @ \('\.\.' in it\)/,
      'org/name@main\nx': /^--tokenizer "org\/name@main\\nx": no such directory/,
    };
    for (const [value, line] of Object.entries(cases)) expect(await refusal(value, offline), value).toMatch(line);
    expect(listing()).toEqual(before);
  });

  it('a revision of ../.. with a cache already there is refused, not read (refs/../.. is a folder)', async () => {
    mkdirSync(join(cache(), 'models--org--name', 'refs'), { recursive: true });
    expect(await refusal('org/name@../..', { ...env, HF_HUB_OFFLINE: '1' })).toContain("('..' in it)");
  });

  it('a revision with .. is refused before the cache is read: a file outside naming a cached commit does not serve', async () => {
    // A snapshot in the cache, fetched by commit; then a file outside the cache holding that commit.
    await findTokenizer(`org/name@${STAND_IN_COMMIT}`, { env });
    mkdirSync(join(root, 'outside'));
    writeFileSync(join(root, 'outside', 'x'), STAND_IN_COMMIT);
    expect(await refusal('org/name@../../../../outside/x', { ...env, HF_HUB_OFFLINE: '1' })).toContain("('..' in it)");
  });
});

describe('ordinary ids still work', () => {
  it('Qwen/Qwen3-0.6B, org/name@main, org/name@refs/pr/1 and a 40-hex commit are fetched into the cache', async () => {
    const qwen = await findTokenizer('Qwen/Qwen3-0.6B', { env });
    expect(qwen).toMatchObject({
      from: 'hub',
      dir: join(cache(), 'models--Qwen--Qwen3-0.6B', 'snapshots', STAND_IN_COMMIT),
    });
    const folder = join(cache(), 'models--org--name');
    const snapshot = join(folder, 'snapshots', STAND_IN_COMMIT);
    expect(await findTokenizer('org/name@main', { env })).toMatchObject({ from: 'hub', dir: snapshot });
    // Its commit's blobs are there already: nothing downloaded again.
    expect(await findTokenizer('org/name@refs/pr/1', { env })).toMatchObject({ dir: snapshot, bytes: 0 });
    expect(readFileSync(join(folder, 'refs', 'refs', 'pr', '1'), 'utf8')).toBe(STAND_IN_COMMIT);
    expect(await findTokenizer(`org/name@${STAND_IN_COMMIT}`, { env })).toMatchObject({ why: 'pinned' });
    expect(await findTokenizer('org/name@refs/pr/1', { env: { ...env, HF_HUB_OFFLINE: '1' } })).toMatchObject({
      why: 'offline',
      dir: snapshot,
    });
    expect(readFileSync(join(snapshot, 'tokenizer.json'), 'utf8')).toBe('{}');
  });
});
