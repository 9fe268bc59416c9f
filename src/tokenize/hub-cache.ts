// The Hugging Face hub cache, laid out as huggingface_hub (Python) and vLLM lay it out, so that
// a pod can share the engine's cache volume: <cache>/models--org--name/ holds blobs/<etag>,
// snapshots/<commit>/<file> (a relative link to its blob) and refs/<revision> (a commit).
// Plain files only: the cache is read without the client package, offline too.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readlink, rename, symlink, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, relative } from 'node:path';

/** The file whose presence marks a snapshot as usable: it is written last. */
export const TOKENIZER_FILE = 'tokenizer.json';

const COMMIT = /^[0-9a-f]{40}$/;

/** True for a full 40-hex commit id, which names a snapshot without asking the hub. */
export function isCommit(revision: string): boolean {
  return COMMIT.test(revision);
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

/** A model's folder in the cache: `models--org--name`. */
export function modelFolder(cacheDir: string, model: string): string {
  return join(cacheDir, ['models', ...model.split('/')].join('--'));
}

/**
 * The snapshot directory of `revision` (a commit, or a branch or tag whose commit refs/ records)
 * if it holds a `tokenizer.json`; undefined otherwise.
 */
export function cachedSnapshot(folder: string, revision: string): { dir: string; commit: string } | undefined {
  let commit = revision;
  if (!isCommit(revision)) {
    const ref = join(folder, 'refs', revision);
    if (!existsSync(ref)) return undefined;
    commit = readFileSync(ref, 'utf8').trim();
  }
  const dir = join(folder, 'snapshots', commit);
  return existsSync(join(dir, TOKENIZER_FILE)) ? { dir, commit } : undefined;
}

/** Records that `revision` is at `commit` (refs/<revision>), as huggingface_hub does; nothing for a commit. */
export async function writeRef(folder: string, revision: string, commit: string): Promise<void> {
  if (revision === commit) return;
  const ref = join(folder, 'refs', revision);
  await mkdir(dirname(ref), { recursive: true });
  await replaceWith(ref, (temporary) => writeFile(temporary, commit));
}

/**
 * Puts a file into snapshots/<commit>/ as a link to blobs/<etag>, writing the blob from
 * `content` unless the cache has it (another revision, or the engine, fetched it). Each write
 * lands whole by a rename, so two pods filling one shared volume never see half a file.
 */
export async function storeFile(
  folder: string,
  commit: string,
  path: string,
  etag: string,
  content: () => Promise<Uint8Array>,
): Promise<number> {
  const blob = join(folder, 'blobs', etag);
  let written = 0;
  if (!existsSync(blob)) {
    const bytes = await content();
    await mkdir(dirname(blob), { recursive: true });
    await replaceWith(blob, (temporary) => writeFile(temporary, bytes));
    written = bytes.byteLength;
  }
  const pointer = join(folder, 'snapshots', commit, path);
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
