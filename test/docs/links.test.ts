// The documentation holds together: every relative link of README.md and docs/ reaches a file
// that exists, and every `#anchor` a heading of its page; the README stays a first read.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { docPages, headingAnchors, relativeLinks, root } from '../support/doc-blocks.js';

/** The parts each alert's section of docs/alerts.md has, in bold at their paragraphs' start. */
const RUNBOOK_PARTS = /^\*\*(What it means|Likely causes|What to check|What to change)[.:]\*\*/;

/** The README's length at most: what it is, the two commands, a tour and the links. */
const README_MAX_LINES = 300;

describe('the links of README.md and docs/', () => {
  it('each relative link reaches a file that exists', () => {
    const broken = docPages()
      .flatMap(relativeLinks)
      .filter((link) => !existsSync(join(root, link.file)))
      .map((link) => `${link.page}:${link.line}: ${link.target}`);
    expect(broken).toEqual([]);
  });

  it('each #anchor names a heading of its page, as GitHub names them', () => {
    const broken = docPages()
      .flatMap(relativeLinks)
      .filter((link) => link.anchor !== undefined && link.file.endsWith('.md') && existsSync(join(root, link.file)))
      .filter((link) => statSync(join(root, link.file)).isFile())
      .filter((link) => !headingAnchors(link.file).has(link.anchor as string))
      .map((link) => `${link.page}:${link.line}: ${link.target}`);
    expect(broken).toEqual([]);
  });

  it('the README links every page of docs/', () => {
    const linked = new Set(relativeLinks('README.md').map((link) => link.file));
    const pages = docPages().filter((page) => page.startsWith('docs/'));
    expect(pages.filter((page) => !linked.has(page))).toEqual([]);
  });

  it('each page of docs/ opens with a paragraph after its title, and its topics are headings', () => {
    const wrong = docPages()
      .filter((page) => page.startsWith('docs/'))
      .flatMap((page) => {
        const lines = readFileSync(join(root, page), 'utf8').split('\n');
        const problems: string[] = [];
        if (!/^# /.test(lines[0] ?? '') || lines[1] !== '' || !/^[A-Za-z`[*]/.test(lines[2] ?? '')) {
          problems.push(`${page}: a title, then a paragraph saying who it is for and what it answers`);
        }
        // A bold run-in at a paragraph's start is a topic GitHub's outline does not show; the
        // runbook's four fixed parts of each alert are not topics of their own.
        lines.forEach((line, i) => {
          if (RUNBOOK_PARTS.test(line)) return;
          if (/^\*\*[^*]+[.:]\*\*/.test(line) && (lines[i - 1] ?? '') === '')
            problems.push(`${page}:${i + 1}: ${line.slice(0, 40)}`);
        });
        return problems;
      });
    expect(wrong).toEqual([]);
  });
});

describe('the README', () => {
  it(`is at most ${README_MAX_LINES} lines`, () => {
    const lines = readFileSync(join(root, 'README.md'), 'utf8').trimEnd().split('\n').length;
    expect(lines).toBeLessThanOrEqual(README_MAX_LINES);
  });
});
