// The Hugging Face hub cache, laid out as huggingface_hub (Python) and vLLM lay it out, so that
// a pod can share the engine's cache volume: <cache>/models--org--name/ holds blobs/<etag>,
// snapshots/<commit>/<file> (a relative link to its blob) and refs/<revision> (a commit).
// Plain files only: the cache is read without the client package, offline too.
// Every path below a model's folder is made by `inside`, which refuses one that leaves it: the
// second line of defence behind hub-ids' rules for ids, revisions and the hub's answers.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readlink, rename, symlink, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { isCommit } from './hub-ids.js';
import { TokenizerError } from './tokenizer-pool.js';

/** The file whose presence marks a snapshot as usable: it is written last. */
export const TOKENIZER_FILE = 'tokenizer.json';

/**
 * `parts` resolved under `folder`, required to stay strictly inside it: the one join of every
 * path this module reads or writes in the cache.
 *
 * @throws {TokenizerError} when the path would leave `folder` (`..`, an absolute part).
 * @example
 * inside('/hf/hub/models--org--name', 'refs', 'main'); // '/hf/hub/models--org--name/refs/main'
 * inside('/hf/hub/models--org--name', 'refs', '../../x'); // throws
 */
export function inside(folder: string, ...parts: string[]): string {
  const base = resolve(folder);
  const path = resolve(base, ...parts);
  if (!path.startsWith(base + sep)) {
    throw new TokenizerError(
      `refused to use ${JSON.stringify(parts.join('/')).slice(0, 300)} in the Hugging Face cache: it leads outside ${base}`,
    );
  }
  return path;
}

/**
 * The hub cache directory, as huggingface_hub finds it: `HF_HUB_CACHE`, else
 * `HUGGINGFACE_HUB_CACHE`, else `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`, else
 * `~/.cache/huggingface/hub`.
 *
 * @example
 * hubCacheDir({ HF_HOME: '/models' }); // '/models/hub'
 */
export function hubCacheDir(env: Readonly<Record<string, string | undefined>>): string {
  return env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE || join(hfHome(env), 'hub');
}

/** `HF_HOME`, else `XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`. */
export function hfHome(env: Readonly<Record<string, string | undefined>>): string {
  return env.HF_HOME || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface');
}

/**
 * A model's folder in the cache: `models--org--name`.
 *
 * @throws {TokenizerError} when `model` would lead outside `cacheDir`.
 */
export function modelFolder(cacheDir: string, model: string): string {
  return inside(cacheDir, ['models', ...model.split('/')].join('--'));
}

/**
 * The snapshot directory of `revision` (a commit, or a branch or tag whose commit refs/ records)
 * if it holds a `tokenizer.json`; undefined otherwise, a ref that does not hold a commit too.
 *
 * @throws {TokenizerError} when `revision` would lead outside refs/.
 */
export function cachedSnapshot(folder: string, revision: string): { dir: string; commit: string } | undefined {
  let commit = revision;
  if (!isCommit(revision)) {
    const ref = inside(inside(folder, 'refs'), revision);
    if (!existsSync(ref)) return undefined;
    try {
      commit = readFileSync(ref, 'utf8').trim();
    } catch {
      // A directory (refs/pr beside refs/pr/1): no ref of that name.
      return undefined;
    }
    // Whatever a ref holds names a folder next: only a commit does.
    if (!isCommit(commit)) return undefined;
  }
  const dir = inside(inside(folder, 'snapshots'), commit);
  return existsSync(inside(dir, TOKENIZER_FILE)) ? { dir, commit } : undefined;
}

/**
 * Records that `revision` is at `commit` (refs/<revision>), as huggingface_hub does; nothing for a commit.
 *
 * @throws {TokenizerError} when `revision` would lead outside refs/, or `commit` is not 40 hex digits.
 */
export async function writeRef(folder: string, revision: string, commit: string): Promise<void> {
  if (revision === commit) return;
  if (!isCommit(commit))
    throw new TokenizerError(
      `refused to record ${JSON.stringify(commit).slice(0, 100)} as a commit: not 40 hex digits`,
    );
  const ref = inside(inside(folder, 'refs'), revision);
  await mkdir(dirname(ref), { recursive: true });
  await replaceWith(ref, (temporary) => writeFile(temporary, commit));
}

/**
 * Puts a file into snapshots/<commit>/ as a link to blobs/<etag>, writing the blob from
 * `content` unless the cache has it (another revision, or the engine, fetched it). Each write
 * lands whole by a rename, so two pods filling one shared volume never see half a file.
 *
 * @throws {TokenizerError} when `etag` would lead outside blobs/, `commit` outside snapshots/ or
 * `path` outside the snapshot, before anything is written.
 */
export async function storeFile(
  folder: string,
  commit: string,
  path: string,
  etag: string,
  content: () => Promise<Uint8Array>,
): Promise<number> {
  const blob = inside(inside(folder, 'blobs'), etag);
  const pointer = inside(inside(inside(folder, 'snapshots'), commit), path);
  let written = 0;
  if (!existsSync(blob)) {
    const bytes = await content();
    await mkdir(dirname(blob), { recursive: true });
    await replaceWith(blob, (temporary) => writeFile(temporary, bytes));
    written = bytes.byteLength;
  }
  await mkdir(dirname(pointer), { recursive: true });
  const target = relative(dirname(pointer), blob);
  if ((await readlink(pointer).catch(() => undefined)) !== target) {
    await replaceWith(pointer, (temporary) => symlink(target, temporary));
  }
  return written;
}

/** Writes to a name of its own beside `path`, then renames it over `path`. */
async function replaceWith(path: string, write: (temporary: string) => Promise<void>): Promise<void> {
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.incomplete`;
  try {
    await write(temporary);
    await rename(temporary, path);
  } catch (error) {
    await unlink(temporary).catch(() => {});
    throw error;
  }
}
