import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// docs/security.md links each defence to the tests that prove it, as `[file](../test/path) ›
// "test name"`: each name must still be a test of its file, and every defence (a `###` section
// of the page) must name at least one, so that the page cannot promise what nothing checks.
const root = fileURLToPath(new URL('../..', import.meta.url));
const page = readFileSync(join(root, 'docs/security.md'), 'utf8');

/** Every `[label](../test/file) › "name"` of a text. */
function citations(text: string): Array<{ file: string; name: string }> {
  return [...text.matchAll(/\]\(\.\.\/(test\/[^)#\s]+)\) › "([^"]+)"/g)].map((match) => ({
    file: match[1] as string,
    name: match[2] as string,
  }));
}

/** The cited tests that are not (or no longer) a test of their file. */
function missing(cited: Array<{ file: string; name: string }>): string[] {
  return cited
    .filter(({ file, name }) => {
      let source: string;
      try {
        source = readFileSync(join(root, file), 'utf8');
      } catch {
        return true;
      }
      return !source.includes(name);
    })
    .map(({ file, name }) => `${file} › ${name}`);
}

describe('docs/security.md', () => {
  it('names only tests that exist, in the files it links', () => {
    const cited = citations(page);
    expect(cited.length).toBeGreaterThan(20);
    expect(missing(cited)).toEqual([]);
  });

  it('links each defence to at least one test', () => {
    const sections = page.split(/^### /m).slice(1);
    expect(sections.length).toBeGreaterThan(8);
    const untested = sections
      .filter((section) => citations(section).length === 0)
      .map((section) => section.split('\n')[0]);
    expect(untested).toEqual([]);
  });

  it('a test renamed or gone is caught', () => {
    expect(
      missing([{ file: 'test/docs/security.test.ts', name: 'names only tests that exist, in the files it links' }]),
    ).toEqual([]);
    expect(missing([{ file: 'test/docs/links.test.ts', name: 'a test that was never written' }])).toHaveLength(1);
    expect(missing([{ file: 'test/no-such-file.test.ts', name: 'anything' }])).toHaveLength(1);
  });
});
