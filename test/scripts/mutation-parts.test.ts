// scripts/mutation-parts.mjs: the parts `npm run mutation` measures, worked out from src/'s tree.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a script of the repository's, plain JavaScript without types.
import { FOLDERS, foldersOf, groupProblems, partsOf } from '../../scripts/mutation-parts.mjs';
import { SETS } from '../../vitest.mutation.config.js';

interface Part {
  name: string | undefined;
  files: string[];
  tests: string | string[];
}
type Folders = Record<
  string,
  {
    target?: number;
    tests: string | string[];
    groups?: Record<string, { files: string[]; tests?: string | string[] }>;
    inside?: Record<string, { tests: string | string[] }>;
  }
>;

const root = fileURLToPath(new URL('../../', import.meta.url));
const src = `${root}src`;

/** The TypeScript files under src/<folder>, as paths from the repository's root. */
function sourcesOf(base: string, folder: string): string[] {
  return readdirSync(`${base}/${folder}`, { recursive: true })
    .map((file) => `src/${folder}/${String(file).replaceAll('\\', '/')}`)
    .filter((file) => file.endsWith('.ts'))
    .sort();
}

/** Whether a test glob of a part (`test/server/settings/**\/*.test.ts`, or one file) matches a file. */
function matchesATest(glob: string): boolean {
  const pattern = new RegExp(
    `^${glob
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replaceAll('**/', '\u0000')
      .replaceAll('*', '[^/]*')
      .replaceAll('\u0000', '(?:.*/)?')}$`,
  );
  return readdirSync(`${root}test`, { recursive: true }).some((file) =>
    pattern.test(`test/${String(file).replaceAll('\\', '/')}`),
  );
}

describe('the parts npm run mutation measures', () => {
  const folders = FOLDERS as Folders;

  it('every file directly inside a folder measured in groups is named by exactly one group, and every name is a file there', () => {
    expect(groupProblems(src)).toEqual([]);
  });

  it('every folder of src/ can be run, and its parts mutate each of its files exactly once', () => {
    const names = foldersOf(src) as string[];
    expect(names).toEqual(expect.arrayContaining(Object.keys(folders)));
    for (const folder of names) {
      const files = (partsOf(src, folder) as Part[]).flatMap((part) => part.files).sort();
      expect(files, folder).toEqual(sourcesOf(src, folder));
    }
  });

  it("every part's tests are a set of vitest.mutation.config.ts or files that are there", () => {
    for (const folder of foldersOf(src) as string[]) {
      for (const part of partsOf(src, folder) as Part[]) {
        const at = `${folder}:${part.name ?? ''}`;
        if (typeof part.tests === 'string') expect(Object.keys(SETS), at).toContain(part.tests);
        else for (const glob of part.tests) expect(matchesATest(glob), `${at} ${glob}`).toBe(true);
      }
    }
  });

  describe('on a tree of its own', () => {
    let tree: string | undefined;
    afterEach(() => {
      if (tree !== undefined) rmSync(tree, { recursive: true, force: true });
    });
    /** A src/ of `files` (paths under it), empty modules. */
    function srcOf(files: string[]): string {
      tree = mkdtempSync(join(tmpdir(), 'mutation-parts-'));
      for (const file of files) {
        mkdirSync(join(tree, file, '..'), { recursive: true });
        writeFileSync(join(tree, file), 'export {};\n');
      }
      return tree;
    }
    const grouped: Folders = {
      server: {
        target: 85,
        tests: 'server',
        inside: { settings: { tests: ['test/server/options.test.ts'] } },
        groups: { app: { files: ['proxy.ts', 'routes.ts'] }, health: { files: ['health.ts', 'routes.ts'] } },
      },
    };

    it('a file no group names is measured in a part of its own and named as a problem, as is a name of no file and a file in two groups', () => {
      const dir = srcOf(['server/proxy.ts', 'server/routes.ts', 'server/new-module.ts', 'server/settings/rows.ts']);
      expect(groupProblems(dir, grouped)).toEqual([
        'src/server/new-module.ts: in no group of scripts/mutation-parts.mjs',
        'src/server/routes.ts: in 2 groups (app, health)',
        'src/server/health.ts: named by health, but not there',
      ]);
      expect(partsOf(dir, 'server', grouped)).toEqual([
        { name: 'app', files: ['src/server/proxy.ts', 'src/server/routes.ts'], tests: 'server' },
        { name: 'others', files: ['src/server/new-module.ts'], tests: 'server' },
        { name: 'settings', files: ['src/server/settings/rows.ts'], tests: ['test/server/options.test.ts'] },
      ]);
    });

    it('a folder inside a grouped one is a part of its own with its files at any depth, and another folder is measured whole', () => {
      const dir = srcOf([
        'server/proxy.ts',
        'server/routes.ts',
        'server/health.ts',
        'server/hosts/http-host.ts',
        'server/hosts/ext-proc/picker.ts',
        'pipeline/stages.ts',
        'pipeline/decide/decider.ts',
      ]);
      expect(groupProblems(dir, grouped)).toEqual([
        'src/server/routes.ts: in 2 groups (app, health)',
        'src/server/settings/: has tests named in inside, but is not there',
      ]);
      expect((partsOf(dir, 'server', grouped) as Part[]).map((part) => [part.name, part.files])).toEqual([
        ['app', ['src/server/proxy.ts', 'src/server/routes.ts']],
        ['health', ['src/server/health.ts']],
        ['hosts', ['src/server/hosts/ext-proc/picker.ts', 'src/server/hosts/http-host.ts']],
      ]);
      expect(partsOf(dir, 'pipeline', grouped)).toEqual([
        {
          name: undefined,
          files: ['src/pipeline/decide/decider.ts', 'src/pipeline/stages.ts'],
          tests: ['test/pipeline/**/*.test.ts'],
        },
      ]);
    });

    it('a folder with a target that is not there is named', () => {
      const dir = srcOf(['server/proxy.ts']);
      expect(groupProblems(dir, { ...grouped, handoff: { target: 95, tests: 'core' } })).toContain(
        'src/handoff/: has a target in scripts/mutation-parts.mjs, but is not there',
      );
    });
  });
});
