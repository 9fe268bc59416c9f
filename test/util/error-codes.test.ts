import { readdirSync, readFileSync } from 'node:fs';
import { join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const src = fileURLToPath(new URL('../../src', import.meta.url));

/** Every `.ts` file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );
}

/** The quoted `DISAGG_*` strings of `text`, outside comments. */
function codesIn(text: string): string[] {
  const code = text
    .split('\n')
    .filter((line) => !/^\s*(\*|\/\/|\/\*)/.test(line))
    .join('\n');
  return [...code.matchAll(/'(DISAGG_[A-Z_]+)'/g)].map((match) => match[1] as string);
}

describe('ErrorCode: the one list of the codes the library throws', () => {
  it('names every code in the sources, and no other', () => {
    const listed = new Set(codesIn(readFileSync(join(src, 'util/error-codes.ts'), 'utf8')));
    const thrown = new Set(
      sources(src)
        // The settings' strings (server/settings/) are environment variables, not error codes.
        .filter((file) => !file.includes(`server${sep}settings${sep}`) && !file.endsWith('util/error-codes.ts'))
        .flatMap((file) => codesIn(readFileSync(file, 'utf8'))),
    );
    expect([...thrown].filter((code) => !listed.has(code))).toEqual([]);
    expect([...listed].filter((code) => !thrown.has(code))).toEqual([]);
  });
});
