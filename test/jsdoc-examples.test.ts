// Every @example of the package's typings (what an editor shows a router author), compiled as
// the author compiles it: strict, with exactOptionalPropertyTypes, against the built package,
// each example a module of its own that sees every export of the package's entry points and
// the names of its surroundings below.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { compileModules, contextOf } from './support/snippets.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const ENTRIES = {
  index: 'disagg',
  server: 'disagg/server',
  testing: 'disagg/testing',
  rxjs: 'disagg/rxjs',
  fastify: 'disagg/fastify',
} as const;

/**
 * What the examples take from around them: an example shows the call, not the router it sits
 * in. Declared for an example that uses the name without defining it.
 */
const CONTEXT: Record<string, string> = {
  options: "declare const options: Omit<DisaggregateOptions<{ url: string }, { url: string }>, 'onEvent'>;",
  request: 'declare const request: { request: Record<string, unknown>; context: Controller };',
  flow: "declare const flow: Omit<DisaggregateOptions<{ url: string }, { url: string }>, 'request' | 'context'>;",
  body: 'declare const body: Record<string, unknown>;',
  res: "declare const res: import('node:http').ServerResponse;",
  req: "declare const req: import('node:http').IncomingMessage;",
  error: 'declare const error: unknown;',
  requestId: 'declare const requestId: string;',
  tokenIds: 'declare const tokenIds: number[];',
  ids: 'declare const ids: number[];',
  workers: 'declare const workers: Array<{ url: string }>;',
  worker: 'declare const worker: { url: string };',
  prefillWorkers: 'declare const prefillWorkers: WorkerPool<{ url: string; bootstrapPort?: number }>;',
  decodeWorkers: 'declare const decodeWorkers: WorkerPool<{ url: string }>;',
  pool: 'declare const pool: WorkerPool<{ url: string }>;',
  index: 'declare const index: KvBlockIndex<{ url: string }>;',
  tokenizer: 'declare const tokenizer: TokenizerPool;',
  logger: 'declare const logger: Logger;',
  target: 'declare const target: MembershipTarget;',
  context: 'declare const context: Controller;',
  stream: 'declare const stream: ResponseStream<EngineItem>;',
  send: 'declare function send(item: EngineItem): void;',
  meter: 'declare function meter(usage: CompletionUsage | undefined): void;',
  metrics: 'declare const metrics: { outcome(outcome: string): void; stuckDecode: { inc(): void } };',
  app: "declare const app: import('hono').Hono;",
  expressApp: "declare const expressApp: import('express').Express;",
  follower: 'declare const follower: KvFollower;',
  giveUpStreamOn: 'declare function giveUpStreamOn(worker: { url: string }): void;',
  loads: 'declare const loads: Map<unknown, EngineLoad>;',
  task: 'declare const task: PrefillTask;',
  retryLater: 'declare function retryLater(cause: unknown): void;',
  reply: 'declare function reply(status: number, body: string | undefined): void;',
  checkApiKey: "declare const checkApiKey: import('fastify').onRequestHookHandler;",
  frames: 'declare const frames: Uint8Array[];',
  runPrefill: 'declare function runPrefill(): Promise<void>;',
  client: 'declare const client: RequestBody;',
  prefillAnswer: 'declare const prefillAnswer: { kv_transfer_params: unknown };',
  url: 'declare const url: string;',
  tokens: 'declare function tokens(): AsyncIterable<EngineItem>;',
  write: 'declare function write(text: string | null | undefined): void;',
  generate$: "declare function generate$(body: Record<string, unknown>): import('rxjs').Observable<EngineItem>;",
  expect: "declare const expect: typeof import('vitest').expect;",
  prefill: 'declare const prefill: FakeWorker;',
  prefillEngine: 'declare const prefillEngine: Engine<{ url: string }>;',
  decodeEngine: 'declare const decodeEngine: Engine<{ url: string }>;',
  call: 'declare const call: Engine<{ url: string }>;',
  profile: 'declare const profile: EngineProfile;',
  clock: 'declare const clock: VirtualClock;',
  text: 'declare const text: string;',
  predictor: 'declare const predictor: LatencyPredictor<{ url: string }>;',
  input: 'declare const input: RoutingInput;',
  next: 'declare const next: RoutingInput;',
};

/** Every export name of each entry point, from the `export { ... }` lists of its typings. */
function exportsOf(entry: string): string[] {
  const typings = readFileSync(`${root}dist/${entry}.d.ts`, 'utf8');
  const lists = [...typings.matchAll(/^export \{([^}]*)\}/gm)].map((match) => match[1] as string);
  return lists
    .join(',')
    .split(',')
    .map((name) => name.trim().replace(/^type /, ''))
    .map((name) => (name.includes(' as ') ? (name.split(' as ')[1] as string) : name))
    .filter((name) => name !== '');
}

/** The @example blocks of the typings, each once. */
function examples(): Array<{ from: string; code: string }> {
  const found = new Map<string, string>();
  for (const file of readdirSync(`${root}dist`).filter((name) => name.endsWith('.d.ts'))) {
    const typings = readFileSync(`${root}dist/${file}`, 'utf8');
    for (const comment of typings.matchAll(/\/\*\*([\s\S]*?)\*\//g)) {
      const lines = (comment[1] as string).split('\n').map((line) => line.replace(/^\s*\* ?/, ''));
      lines.forEach((line, i) => {
        const head = /^@example\b ?(.*)$/.exec(line);
        if (head === null) return;
        const body = head[1]?.trim() ? [head[1] as string] : [];
        for (let j = i + 1; j < lines.length && !/^@\w/.test(lines[j] as string); j++) body.push(lines[j] as string);
        const code = body.join('\n').trim();
        if (!found.has(code)) found.set(code, file);
      });
    }
  }
  return [...found].map(([code, from]) => ({ code, from }));
}

describe('the JSDoc examples of the typings', () => {
  it('every one compiles strictly, exactOptionalPropertyTypes too, against the built package', () => {
    const imported = new Set<string>();
    const preamble = Object.entries(ENTRIES).map(([entry, specifier]) => {
      const names = exportsOf(entry).filter((name) => !imported.has(name));
      for (const name of names) imported.add(name);
      return { specifier, names };
    });
    const found = examples();
    expect(found.length).toBeGreaterThanOrEqual(60);
    const modules = Object.fromEntries(
      found.map(({ code, from }, i) => {
        // What the example imports itself is not imported again.
        const own = new Set(
          [...code.matchAll(/^import (?:\w+|\{([^}]*)\}) from/gm)].flatMap((m) =>
            (m[1] ?? '').split(',').map((name) => name.trim()),
          ),
        );
        const imports = preamble.map(
          ({ specifier, names }) =>
            `import { ${names.filter((name) => !own.has(name)).join(', ')} } from '${specifier}';`,
        );
        const source = [`// from dist/${from}`, ...imports, ...contextOf(code, CONTEXT), code, 'export {};', ''];
        return [`example-${i}`, source.join('\n')];
      }),
    );
    expect(compileModules('.jsdoc-examples', modules, ['ES2022', 'DOM'])).toBe('');
  }, 120_000);
});
