// docs/library.md's worked examples of plugins of your own, run as printed: each `ts` block
// under its heading is a program (it registers its plugin, starts fake workers, sends requests
// through the proxy), run by Node against the built package as a reader's copy would be, and
// what it prints is held to the `text` block after it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fencedBlocks, root } from '../support/doc-blocks.js';

const PAGE = 'docs/library.md';
const scratch = join(root, '.library-examples-run');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The first `ts` block under `heading` on the page, and the first `text` block after it. */
function example(heading: string): { code: string; shown: string } {
  const at = readFileSync(join(root, PAGE), 'utf8').split('\n').indexOf(heading) + 1;
  expect(at, `${PAGE} has no heading ${heading}`).toBeGreaterThan(0);
  const blocks = fencedBlocks(PAGE);
  const code = blocks.find((block) => block.line > at && block.lang === 'ts');
  const shown = blocks.find((block) => code !== undefined && block.line > code.line && block.lang === 'text');
  if (code === undefined || shown === undefined) throw new Error(`${PAGE}: ${heading} lacks its ts and text blocks`);
  return { code: code.code, shown: shown.code };
}

/** Runs `code` as a module of its own in the checkout (so `disagg` is this package's build); its stdout. */
function run(name: string, code: string): string {
  mkdirSync(scratch, { recursive: true });
  const file = join(scratch, `${name}.ts`);
  writeFileSync(file, code);
  const ran = spawnSync(process.execPath, ['--import', 'tsx', file], { cwd: root, encoding: 'utf8', timeout: 60_000 });
  expect(ran.stderr, `${name}: stderr`).toBe('');
  expect(ran.status, `${name}: exit status`).toBe(0);
  return ran.stdout;
}

describe(`${PAGE}'s plugins of your own, run as printed`, () => {
  it.each([
    ['### A decider of your own', 'decider'],
    ['### A scorer of your own', 'scorer'],
  ])(
    '%s: registered, named by the settings, and a request routed through it prints what the page shows',
    (heading, name) => {
      const { code, shown } = example(heading);
      expect(run(name, code).trimEnd().split('\n')).toEqual(shown.trimEnd().split('\n'));
    },
    90_000,
  );
});
