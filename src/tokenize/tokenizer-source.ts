// Where `--tokenizer` comes from: a directory, or a Hugging Face model id fetched once into the
// hub cache through the client package `@huggingface/hub` (loaded only for an id).
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  cachedSnapshot,
  hfHome,
  hubCacheDir,
  inside,
  modelFolder,
  storeFile,
  TOKENIZER_FILE,
  writeRef,
} from './hub-cache.js';
import { isBlobName, isCommit, modelIdProblem, revisionProblem } from './hub-ids.js';
import { TokenizerError } from './tokenizer-pool.js';

/** What the tokenizer's threads read, `tokenizer.json` last: its presence marks a whole snapshot. */
const FILES = ['tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja', TOKENIZER_FILE];
const HUB = 'https://huggingface.co';
// The shape of org/name with a revision after `@` (a branch, a tag, a commit, refs/pr/1): what
// is taken for a model id. hub-ids then holds it to the hub's rules.
const MODEL_ID = /^([A-Za-z0-9][\w.-]*\/[\w.-]+)(?:@(.+))?$/;

/** `--tokenizer`'s value read: a directory on this machine, or a model on the hub at a revision. */
export type TokenizerSpec = { kind: 'directory'; dir: string } | { kind: 'hub'; model: string; revision: string };

/**
 * Reads `--tokenizer`'s value: a directory that exists is a directory; else `org/name` or
 * `org/name@revision` (a branch, a tag or a commit; `main` by default) is a Hugging Face model id;
 * anything else is taken as a directory (which {@link findTokenizer} then reports missing). An id
 * is not checked against the hub's rules here: {@link findTokenizer} refuses one they do not allow.
 *
 * @example
 * tokenizerSpec('Qwen/Qwen3-8B@main'); // { kind: 'hub', model: 'Qwen/Qwen3-8B', revision: 'main' }
 */
export function tokenizerSpec(value: string): TokenizerSpec {
  const id = MODEL_ID.exec(value);
  if (id === null || isDirectory(value)) return { kind: 'directory', dir: value };
  return { kind: 'hub', model: id[1] as string, revision: id[2] ?? 'main' };
}

/**
 * Where the tokenizer's files were found: a directory given; the hub cache (`why`: a pinned
 * commit already there, the hub's revision already there, `HF_HUB_OFFLINE`, or the hub out of
 * reach); or downloaded now from `hub` (`bytes` written into the cache in `ms`).
 */
export type FoundTokenizer =
  | { from: 'directory'; dir: string }
  | {
      from: 'cache';
      dir: string;
      model: string;
      commit: string;
      why: 'pinned' | 'current' | 'offline' | 'unreachable';
      /** For `unreachable`: what failed. */
      detail?: string;
    }
  | {
      from: 'hub';
      dir: string;
      model: string;
      commit: string;
      hub: string;
      files: string[];
      bytes: number;
      ms: number;
    };

/** Options of {@link findTokenizer}. */
export interface FindTokenizerOptions {
  /**
   * The environment read: `HF_TOKEN` (else `HF_TOKEN_PATH` or `HF_HOME/token`), `HF_ENDPOINT`
   * (a mirror; https://huggingface.co by default), `HF_HUB_OFFLINE`, and the cache's place
   * (`HF_HUB_CACHE`, `HF_HOME`, by default `~/.cache/huggingface/hub`). `process.env` by default.
   */
  env?: Readonly<Record<string, string | undefined>> | undefined;
  /** Each request to the hub is given up after this long, then the cache is tried; 30 s by default. */
  timeoutMs?: number | undefined;
}

/**
 * The directory of `--tokenizer`'s files. A Hugging Face model id is fetched from the hub
 * (`HF_ENDPOINT`) into the hub cache once, `tokenizer.json` and whichever of
 * `tokenizer_config.json`, `special_tokens_map.json` and `chat_template.jinja` it has, with
 * `HF_TOKEN` for gated models; later it comes from the cache: at once for a pinned commit, after
 * one request for a branch (or without any under `HF_HUB_OFFLINE=1`, or when the hub is out of
 * reach).
 *
 * @throws {TokenizerError} one line saying what to change: a missing directory or one without
 * `tokenizer.json`, a model id or revision the hub does not allow (`org/name`, each part up to 96
 * letters, digits, `-`, `_`, `.`; a revision as git names branches and tags, no `..`), refused
 * before the cache is read, a hub answer that is not a commit or a blob name (before anything is
 * written), an unknown model (404), a gated one without a token or with a bad one
 * (401, 403), the hub out of reach with nothing cached, a model without `tokenizer.json`.
 * @example
 * const found = await findTokenizer('Qwen/Qwen3-8B');
 * const pool = await TokenizerPool.start({ dir: found.dir });
 */
export async function findTokenizer(value: string, options: FindTokenizerOptions = {}): Promise<FoundTokenizer> {
  const spec = tokenizerSpec(value);
  if (spec.kind === 'directory') {
    if (!isDirectory(spec.dir)) {
      throw new TokenizerError(
        `--tokenizer ${shown(value)}: no such directory, nor a Hugging Face model id (org/name, or org/name@revision)`,
      );
    }
    if (!existsSync(join(spec.dir, TOKENIZER_FILE))) {
      throw new TokenizerError(
        `--tokenizer ${shown(value)} has no tokenizer.json: give the directory of a Hugging Face model (tokenizer.json and tokenizer_config.json), or its model id (org/name)`,
      );
    }
    return { from: 'directory', dir: spec.dir };
  }
  refuseDisallowed(value, spec);
  const env = options.env ?? process.env;
  const folder = modelFolder(hubCacheDir(env), spec.model);
  const cached = cachedSnapshot(folder, spec.revision);
  if (cached !== undefined && isCommit(spec.revision))
    return { from: 'cache', model: spec.model, ...cached, why: 'pinned' };
  if (isOn(env.HF_HUB_OFFLINE)) {
    if (cached !== undefined) return { from: 'cache', model: spec.model, ...cached, why: 'offline' };
    throw new TokenizerError(
      `--tokenizer ${value} is not in the Hugging Face cache (${hubCacheDir(env)}) and HF_HUB_OFFLINE is set: download it beforehand (npx disagg tokenizer fetch ${value}) into that cache, point HF_HOME or HF_HUB_CACHE at the cache that has it, or unset HF_HUB_OFFLINE`,
    );
  }
  const hub = (env.HF_ENDPOINT || HUB).replace(/\/+$/, '');
  try {
    return await download(spec, { folder, hub, token: tokenOf(env), timeoutMs: options.timeoutMs ?? 30_000, cached });
  } catch (error) {
    if (TokenizerError.is(error)) throw error;
    const unreachable = unreachableWhy(error);
    if (unreachable === undefined) throw hubError(value, hub, error, tokenOf(env) !== undefined);
    // As huggingface_hub does: a hub out of reach is no reason not to start from the cache.
    if (cached !== undefined)
      return { from: 'cache', model: spec.model, ...cached, why: 'unreachable', detail: unreachable };
    throw new TokenizerError(
      `--tokenizer ${value}: ${hub} is out of reach (${unreachable}) and the model is not in the Hugging Face cache (${hubCacheDir(env)}): check the network or HF_ENDPOINT (a mirror), or download it beforehand (npx disagg tokenizer fetch ${value}) into that cache`,
      { cause: error },
    );
  }
}

type Hub = typeof import('@huggingface/hub');

async function download(
  spec: { model: string; revision: string },
  where: {
    folder: string;
    hub: string;
    token: string | undefined;
    timeoutMs: number;
    cached: { dir: string; commit: string } | undefined;
  },
): Promise<FoundTokenizer> {
  let hub: Hub;
  try {
    hub = await import('@huggingface/hub');
  } catch (error) {
    throw new TokenizerError(
      `--tokenizer ${spec.model} is a Hugging Face model id: downloading it needs the optional package @huggingface/hub (npm install @huggingface/hub), or give a directory holding tokenizer.json`,
      { cause: error },
    );
  }
  const started = performance.now();
  const timed: typeof fetch = (input, init) => fetch(input, { ...init, signal: AbortSignal.timeout(where.timeoutMs) });
  const common = { hubUrl: where.hub, accessToken: where.token, fetch: timed };
  const { sha } = await hub.modelInfo({
    ...common,
    name: spec.model,
    revision: spec.revision,
    additionalFields: ['sha'],
  });
  // The hub's answers name paths in the cache: a commit and blob ids only, checked before any write.
  const commit = String(sha);
  if (!isCommit(commit)) throw hubAnswerError(spec, where.hub, 'a commit that is not 40 hex digits', commit);
  await writeRef(where.folder, spec.revision, commit);
  if (where.cached?.commit === commit) return { from: 'cache', model: spec.model, ...where.cached, why: 'current' };
  const infos = await hub.pathsInfo({ ...common, repo: spec.model, revision: commit, paths: FILES });
  const present = FILES.flatMap((path) => infos.filter((info) => info.path === path && info.type === 'file'));
  if (!present.some((info) => info.path === TOKENIZER_FILE)) {
    throw new TokenizerError(
      `--tokenizer ${spec.model}@${spec.revision} has no tokenizer.json on ${where.hub} (only a slow tokenizer?): give a directory holding one (transformers' AutoTokenizer.from_pretrained(...).save_pretrained(dir) writes it)`,
    );
  }
  const etags = present.map((info) => info.lfs?.oid ?? info.oid ?? commit + info.path);
  const badEtag = etags.find((etag) => !isBlobName(etag));
  if (badEtag !== undefined) throw hubAnswerError(spec, where.hub, 'a file id that is not a file name', badEtag);
  let bytes = 0;
  for (const [index, info] of present.entries()) {
    bytes += await storeFile(where.folder, commit, info.path, etags[index] as string, async () => {
      // Plain HTTP (no Xet): what mirrors serve too, and small files need no chunked transfer.
      const blob = await hub.downloadFile({
        ...common,
        repo: spec.model,
        path: info.path,
        revision: commit,
        xet: false,
      });
      if (blob === null)
        throw new TokenizerError(`${info.path} of ${spec.model} vanished from ${where.hub} while downloading`);
      const content = new Uint8Array(await blob.arrayBuffer());
      if (content.byteLength !== info.size) {
        throw new TokenizerError(
          `${info.path} of ${spec.model} came incomplete from ${where.hub} (${content.byteLength} of ${info.size} bytes): start again`,
        );
      }
      return content;
    });
  }
  return {
    from: 'hub',
    dir: inside(inside(where.folder, 'snapshots'), commit),
    model: spec.model,
    commit,
    hub: where.hub,
    files: present.map((info) => info.path),
    bytes,
    ms: Math.round(performance.now() - started),
  };
}

/**
 * Refuses an id or a revision the hub does not allow, before the cache is read: each names a
 * path in it (models--org--name, refs/<revision>).
 */
function refuseDisallowed(value: string, spec: { model: string; revision: string }): void {
  const model = modelIdProblem(spec.model);
  if (model !== undefined) {
    throw new TokenizerError(
      `--tokenizer ${shown(value)}: no such directory, nor a model id the Hugging Face hub allows (${model}): give org/name, each part up to 96 letters, digits, '-', '_' or '.', or a directory holding tokenizer.json`,
    );
  }
  const revision = revisionProblem(spec.revision);
  if (revision !== undefined) {
    throw new TokenizerError(
      `--tokenizer ${shown(value)}: no such directory, nor a revision the Hugging Face hub allows after @ (${revision}): give a branch or tag as git names them (main, v1.0, refs/pr/1) or a 40-hex commit`,
    );
  }
}

/** A hub (a mirror, HF_ENDPOINT) answered something that cannot name a path in the cache. */
function hubAnswerError(
  spec: { model: string; revision: string },
  hub: string,
  what: string,
  answered: string,
): TokenizerError {
  return new TokenizerError(
    `--tokenizer ${spec.model}@${spec.revision}: ${hub} answered ${what} (${shown(answered)}), refused before it named a path in the cache: check HF_ENDPOINT (the hub, or a mirror of it)`,
  );
}

/** A value as a message shows it: on one line (JSON-quoted if it holds a control character), clipped. */
function shown(value: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it looks for
  const line = /[\u0000-\u001f\u007f]/.test(value) ? JSON.stringify(value) : value;
  return line.length > 500 ? `${line.slice(0, 200)}... (${value.length} characters)` : line;
}

/** The one line of a hub's refusal, saying what to change. */
function hubError(value: string, hub: string, error: unknown, withToken: boolean): TokenizerError {
  const status = (error as { statusCode?: unknown }).statusCode;
  const line = (text: string) => new TokenizerError(`--tokenizer ${value}: ${text}`, { cause: error });
  if (error instanceof TypeError && /access token/i.test(error.message)) {
    return line('HF_TOKEN is not a Hugging Face access token (they start with hf_): set HF_TOKEN to a read token');
  }
  if (status === 404) {
    return line(
      `no such model or revision on ${hub} (404): check the id (org/name, as on the model's page) and the revision after @, or give a directory holding tokenizer.json`,
    );
  }
  if (status === 401) {
    return withToken
      ? line(
          `${hub} refused HF_TOKEN (401): set HF_TOKEN to a valid read token (an expired or revoked one is refused), and check the id (the hub answers 401 for a model that does not exist too)`,
        )
      : line(
          `${hub} asks for a token (401): the model is gated or private (or does not exist): set HF_TOKEN to a read token of an account that has accepted the model's terms, and check the id`,
        );
  }
  if (status === 403) {
    return line(
      `the account of HF_TOKEN has no access to this model on ${hub} (403): accept the model's terms on its page with that account, or use a token (with read access) of an account that has`,
    );
  }
  const said = error instanceof Error ? error.message.split('\n')[0] : String(error);
  return line(`${hub} answered ${typeof status === 'number' ? status : 'with an error'}: ${said}`);
}

/** Why the hub could not be reached (a refused connection, an unknown host, a timeout); undefined for anything else. */
function unreachableWhy(error: unknown): string | undefined {
  if (error instanceof DOMException && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return 'no answer in time';
  }
  if (error instanceof TypeError && error.message === 'fetch failed') {
    const cause = error.cause as { code?: string; message?: string } | undefined;
    return cause?.code ?? cause?.message ?? 'fetch failed';
  }
  return undefined;
}

/** `HF_TOKEN`, else the token `huggingface-cli login` stored (`HF_TOKEN_PATH`, else `HF_HOME/token`). */
function tokenOf(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const given = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN;
  if (given) return given.trim();
  const path = env.HF_TOKEN_PATH || join(hfHome(env), 'token');
  if (!existsSync(path)) return undefined;
  const stored = readFileSync(path, 'utf8').trim();
  return stored === '' ? undefined : stored;
}

/** huggingface_hub's truthy values. */
function isOn(value: string | undefined): boolean {
  return ['1', 'on', 'yes', 'true'].includes((value ?? '').trim().toLowerCase());
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
