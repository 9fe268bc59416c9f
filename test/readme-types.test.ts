// The README's TypeScript, compiled as a router author compiles it: strict, with
// exactOptionalPropertyTypes, against the built package (its own exports and declarations,
// not src/), with @types/node 20.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
// Inside the repository, so that `disagg` resolves to this package's own exports (dist/).
const dir = `${root}.readme-types`;

/** What a snippet uses from around it, declared for the blocks that use it without defining it. */
const CONTEXT: Record<string, string> = {
  body: 'declare const body: Record<string, unknown>;',
  requestId: 'declare const requestId: string;',
  checkApiKey: "declare const checkApiKey: import('fastify').onRequestHookHandler;",
  disagg: "declare const disagg: import('disagg/server').DisaggHandler;",
  // The Express router's block: what the Hono router's above made.
  flow: "declare const flow: Omit<import('disagg').DisaggregateOptions<{ url: string; bootstrapPort: number }, { url: string }>, 'request' | 'context'>;",
  redact: 'declare const redact: (text: string) => string;',
  health: "declare const health: import('disagg/server').WorkerHealth<{ url: string }, { url: string }>;",
};

function blocks(): string[] {
  const readme = readFileSync(`${root}README.md`, 'utf8');
  return [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1] as string);
}

describe("the README's TypeScript", () => {
  it('every block compiles strictly (exactOptionalPropertyTypes too) against the built package', () => {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const found = blocks();
    expect(found.length).toBeGreaterThanOrEqual(6);
    found.forEach((code, i) => {
      const uses = Object.entries(CONTEXT)
        .filter(([name]) => new RegExp(`\\b${name}\\b`).test(code))
        .filter(([name]) => !new RegExp(`\\b(const|let|var|function)\\s+${name}\\b`).test(code))
        .map(([, declaration]) => declaration);
      // Each block a module of its own (top-level await, its own imports).
      writeFileSync(`${dir}/block-${i}.ts`, `${uses.join('\n')}\n${code}\nexport {};\n`);
    });
    writeFileSync(
      `${dir}/tsconfig.json`,
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2022'],
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
    const run = spawnSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, '-p', dir], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(run.stdout + run.stderr).toBe('');
    expect(run.status).toBe(0);
  }, 60_000);
});
