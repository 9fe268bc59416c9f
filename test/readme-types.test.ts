// The TypeScript of README.md and docs/, compiled as a router author compiles it: strict, with
// exactOptionalPropertyTypes, against the built package (its own exports and declarations,
// not src/), with @types/node 20.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { compileModules, contextOf } from './support/snippets.js';

const root = fileURLToPath(new URL('..', import.meta.url));

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
  const pages = [
    'README.md',
    ...readdirSync(`${root}docs`)
      .filter((name) => name.endsWith('.md'))
      .map((name) => `docs/${name}`),
  ];
  return pages.flatMap((page) =>
    [...readFileSync(`${root}${page}`, 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1] as string),
  );
}

describe("the README's TypeScript", () => {
  it('every block compiles strictly (exactOptionalPropertyTypes too) against the built package', () => {
    const found = blocks();
    expect(found.length).toBeGreaterThanOrEqual(6);
    const modules = Object.fromEntries(
      found.map((code, i) => [`block-${i}`, `${contextOf(code, CONTEXT).join('\n')}\n${code}\nexport {};\n`]),
    );
    expect(compileModules('.readme-types', modules)).toBe('');
  }, 60_000);
});
