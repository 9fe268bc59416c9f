import { describe, expect, it } from 'vitest';
import { isBlobName, isCommit, modelIdProblem, revisionProblem } from '../../src/tokenize/hub-ids.js';

const COMMIT = 'c0ffee0000000000000000000000000000000001';

describe("the hub's rules for model ids (huggingface_hub's validate_repo_id)", () => {
  it('org/name with letters, digits, -, _ and ., up to 96 characters a part, is allowed', () => {
    for (const id of [
      'Qwen/Qwen3-0.6B',
      'meta-llama/Llama-3.1-8B-Instruct',
      'org/name',
      '_org/name_',
      'a/b',
      `${'o'.repeat(96)}/${'n'.repeat(96)}`,
    ]) {
      expect(modelIdProblem(id), id).toBeUndefined();
    }
  });

  it('.., --, a leading or trailing - or ., .git, other characters, other shapes and long parts are refused', () => {
    const refused: Record<string, string> = {
      'org/..': "starts or ends with '-' or '.'",
      'org/.hidden': "starts or ends with '-' or '.'",
      'org/name-': "starts or ends with '-' or '.'",
      'org/na..me': "'..'",
      'a--b/c': "'--'",
      'org/name.git': '.git',
      'org/café': 'a character other than',
      'org/na%2Fme': 'a character other than',
      'org/na me': 'a character other than',
      'org/a/b': 'not org/name',
      name: 'not org/name',
      '/name': 'not 1 to 96',
      [`org/${'n'.repeat(97)}`]: 'not 1 to 96',
      [`a/${'a'.repeat(100_000)}`]: 'not 1 to 96',
    };
    for (const [id, problem] of Object.entries(refused)) expect(modelIdProblem(id), id).toContain(problem);
  });
});

describe("the hub's rules for revisions (git's check-ref-format, or a commit)", () => {
  it('branches, tags, refs/pr/N and 40-hex commits are allowed', () => {
    for (const revision of ['main', 'v1.0', 'refs/pr/1', 'release/2026-01', 'feature_x', COMMIT, 'ünïcode']) {
      expect(revisionProblem(revision), revision).toBeUndefined();
    }
  });

  it('.., a leading / or -, a backslash, control characters and the other characters git refuses are refused', () => {
    const refused: Record<string, string> = {
      '../..': "'..'",
      '../../../../outside/x': "'..'",
      'a/../b': "'..'",
      '/etc/passwd': "starts with '/' or '-'",
      '-rf': "starts with '/' or '-'",
      'a\\b': 'backslash',
      'a\nb': 'control character',
      'a\u0000b': 'control character',
      'a\u007fb': 'control character',
      'a b': 'space',
      'a~1': '~',
      'a^1': '~',
      'a:b': '~',
      'a?': '~',
      'a*': '~',
      'a[0]': '~',
      'refs//pr': "'//'",
      'main/': "ends with '/' or '.'",
      'main.': "ends with '/' or '.'",
      'main.lock': '.lock',
      'refs/.pr/1': "starts with '.'",
      '.hidden': "starts with '.'",
      '@': "'@' alone",
      'main@{1}': "'@{'",
      '': 'empty',
      ['a'.repeat(256)]: 'longer than 255 bytes',
      ['é'.repeat(128)]: 'longer than 255 bytes',
    };
    for (const [revision, problem] of Object.entries(refused)) {
      expect(revisionProblem(revision), JSON.stringify(revision)).toContain(problem);
    }
  });
});

describe("what the cache takes from the hub's answers", () => {
  it('a commit is 40 lower-case hex digits, nothing else', () => {
    expect(isCommit(COMMIT)).toBe(true);
    for (const sha of ['../../x', `/${COMMIT.slice(1)}`, COMMIT.toUpperCase(), `${COMMIT}0`, 'main', 'undefined']) {
      expect(isCommit(sha), sha).toBe(false);
    }
  });

  it('a blob is one file name: a git blob id, an LFS sha256, no separator, no leading dot', () => {
    for (const etag of [COMMIT, 'a'.repeat(64), `${COMMIT}tokenizer.json`]) expect(isBlobName(etag), etag).toBe(true);
    for (const etag of ['../x', 'a/b', 'a\\b', '/abs', '.', '..', '.x', '', 'a'.repeat(256)]) {
      expect(isBlobName(etag), etag).toBe(false);
    }
  });
});
