// What the Hugging Face hub allows as a model id and a revision, and what the cache accepts from
// its answers (a commit, a blob's name). Every one of them becomes a path in the cache, so a
// value outside these rules is refused before anything is read or written: a mirror or a hostile
// HF_ENDPOINT could otherwise name `refs/../../x` or a blob at `../x`.

/** The longest part (`org`, `name`) of a model id: huggingface_hub's `validate_repo_id`. */
export const MODEL_PART_MAX = 96;
/** The longest revision accepted, in UTF-8 bytes: a file name's limit on common file systems. */
export const REVISION_MAX_BYTES = 255;

// huggingface_hub's REPO_ID_REGEX (ASCII): letters, digits, '_', '-', '.', a word character at
// each end of a part.
const MODEL_PART = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$/;
// git check-ref-format: no control characters, space, ~ ^ : ? * [ or backslash.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it refuses
const REF_FORBIDDEN = /[\u0000-\u0020\u007f~^:?*[\\]/;
const COMMIT = /^[0-9a-f]{40}$/;
// One file name: a git blob id, an LFS sha256, or another name without a separator or a leading dot.
const BLOB_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}$/;

/** True for a full 40-hex commit id, which names a snapshot without asking the hub. */
export function isCommit(revision: string): boolean {
  return COMMIT.test(revision);
}

/**
 * Why `model` is not a model id the hub allows, in a few words; undefined for one it allows:
 * `org/name`, each part 1 to 96 letters, digits, `-`, `_` or `.`, starting and ending with a
 * letter, a digit or `_`, without `--` or `..`, not ending in `.git` (huggingface_hub's
 * `validate_repo_id`, the namespace required).
 *
 * @example
 * modelIdProblem('Qwen/Qwen3-0.6B'); // undefined
 * modelIdProblem('org/..'); // "a part starts or ends with '-' or '.'"
 */
export function modelIdProblem(model: string): string | undefined {
  const parts = model.split('/');
  if (parts.length !== 2) return 'it is not org/name';
  for (const part of parts) {
    if (part.length === 0 || part.length > MODEL_PART_MAX) return `a part is not 1 to ${MODEL_PART_MAX} characters`;
    if (!/^[A-Za-z0-9_.-]+$/.test(part)) return "a character other than letters, digits, '-', '_' and '.'";
    if (!MODEL_PART.test(part)) return "a part starts or ends with '-' or '.'";
  }
  if (model.includes('--') || model.includes('..')) return "'--' or '..' in it";
  if (model.endsWith('.git')) return 'it ends in .git';
  return undefined;
}

/**
 * Why `revision` is not one the hub can have, in a few words; undefined for one it can: a 40-hex
 * commit, or a branch or tag name as git's check-ref-format allows it (`main`, `v1.0`,
 * `refs/pr/1`): no `..`, no component starting with `.` or ending in `.lock`, no leading `/` or
 * `-`, no trailing `/` or `.`, no `//`, no `@{`, not `@` alone, no control character, space,
 * `~ ^ : ? * [` or backslash; at most 255 bytes.
 *
 * @example
 * revisionProblem('refs/pr/1'); // undefined
 * revisionProblem('../../x'); // "'..' in it"
 */
export function revisionProblem(revision: string): string | undefined {
  if (revision === '') return 'it is empty';
  if (Buffer.byteLength(revision) > REVISION_MAX_BYTES) return `it is longer than ${REVISION_MAX_BYTES} bytes`;
  if (revision.includes('..')) return "'..' in it";
  if (REF_FORBIDDEN.test(revision)) return 'a control character, a space, a backslash or one of ~ ^ : ? * [ in it';
  if (revision.startsWith('/') || revision.startsWith('-')) return "it starts with '/' or '-'";
  if (revision.endsWith('/') || revision.endsWith('.')) return "it ends with '/' or '.'";
  if (revision.includes('//')) return "'//' in it";
  if (revision === '@' || revision.includes('@{')) return "'@{' in it, or '@' alone";
  if (revision.split('/').some((part) => part.startsWith('.') || part.endsWith('.lock'))) {
    return "a part starts with '.' or ends in '.lock'";
  }
  return undefined;
}

/**
 * True for a name a blob may have in the cache: one file name (the hub's git blob id or LFS
 * sha256, as it answers them), without a separator or a leading dot.
 */
export function isBlobName(name: string): boolean {
  return BLOB_NAME.test(name);
}
