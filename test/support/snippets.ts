// Snippets of documentation (the blocks of README.md and docs/, the typings' @example) compiled as a router
// author compiles them: strict, exactOptionalPropertyTypes and noUncheckedIndexedAccess, each a
// module of its own (top-level await, its own imports), against the built package.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** `name` as a regular expression matches it (`generate$`). */
function escaped(name: string): string {
  return name.replace(/[$]/g, '\\$');
}

/**
 * The declarations of `context` that `code` uses without defining: a snippet shows a call, not
 * the program around it. A name used as a property (`x.name`) is not a use; a spread is.
 */
export function contextOf(code: string, context: Record<string, string>): string[] {
  return Object.entries(context)
    .filter(([name]) => new RegExp(`(^|[^\\w$.]|\\.\\.\\.)${escaped(name)}(?![\\w$])`).test(code))
    .filter(
      ([name]) =>
        !new RegExp(`\\b(const|let|var|function)\\s+(\\{[^}]*[{,]\\s*)?${escaped(name)}(?![\\w$])(?!\\s*:)`).test(code),
    )
    .map(([, declaration]) => declaration);
}

/**
 * Writes each module of `modules` (name to source) into `dir` (inside the repository, so that
 * `disagg` resolves to this package's own exports) and type-checks them together: what tsc
 * says, empty when every one compiles.
 */
export function compileModules(dir: string, modules: Record<string, string>, lib: string[] = ['ES2022']): string {
  const at = `${root}${dir}`;
  rmSync(at, { recursive: true, force: true });
  mkdirSync(at, { recursive: true });
  for (const [name, source] of Object.entries(modules)) writeFileSync(`${at}/${name}.ts`, source);
  writeFileSync(
    `${at}/tsconfig.json`,
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib,
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        types: ['node'],
        strict: true,
        exactOptionalPropertyTypes: true,
        noUncheckedIndexedAccess: true,
        noEmit: true,
        skipLibCheck: true,
      },
      include: ['*.ts'],
    }),
  );
  const run = spawnSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, '-p', at], {
    cwd: root,
    encoding: 'utf8',
  });
  return `${run.stdout}${run.stderr}${run.status === 0 ? '' : `(tsc exited ${run.status})`}`;
}
