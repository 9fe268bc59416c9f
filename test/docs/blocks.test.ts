// Every fenced block of README.md and docs/ is compiled, parsed or run: a block's language says
// which check it gets, and a block without one, or with one this file does not know, fails. A
// block may opt out with `<!-- check: skip (the reason) -->` on the line before its fence; the
// skips are counted and held to a few.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { FakeWorkersUsageError, parseFakeWorkersArgs } from '../../src/cli/fake-workers.js';
import { parseSimulateArgs, SimulateUsageError } from '../../src/cli/simulate-args.js';
import { simulatedSettings } from '../../src/cli/simulate-fleet.js';
import { ConfigError, loadServeConfig } from '../../src/server/config.js';
import { SETTINGS } from '../../src/server/settings/rows.js';
import { DEFAULT_PROFILE } from '../../src/simulation/profiles.js';
import { parseTenants } from '../../src/tenancy/tenants.js';
import {
  type DocBlock,
  docPages,
  fencedBlocks,
  root,
  type ShellCommand,
  shellCommands,
} from '../support/doc-blocks.js';
import { compileModules, contextOf } from '../support/snippets.js';
import { run, tool } from '../support/tools.js';

/** The languages a block may carry, each with what the suite does with it. */
const LANGUAGES = ['ts', 'sh', 'yaml', 'json', 'promql', 'text'] as const;
/** Blocks that opt out of their check, at most: each says why on its directive line. */
const MAX_SKIPS = 3;

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

const all = docPages().flatMap(fencedBlocks);
const checked = all.filter((block) => block.skip === undefined);
const of = (lang: string) => checked.filter((block) => block.lang === lang);
const where = (block: Pick<DocBlock, 'page' | 'line'>) => `${block.page}:${block.line}`;
const kubectl = tool('kubectl', 'kubernetes-client');
const promtool = tool('promtool', 'prometheus');
const scratch = join(root, '.doc-blocks');

describe('the fenced blocks of README.md and docs/', () => {
  it('each says its language, one the suite checks', () => {
    const wrong = all
      .filter((block) => !(LANGUAGES as readonly string[]).includes(block.lang))
      .map((block) => `${where(block)}: \`\`\`${block.lang} (say one of ${LANGUAGES.join(', ')})`);
    expect(wrong).toEqual([]);
    expect(all.length).toBeGreaterThan(40);
  });

  it(`skip only with a reason, and at most ${MAX_SKIPS} of them`, () => {
    expect(all.filter((block) => block.badDirective !== undefined).map(where)).toEqual([]);
    expect(all.filter((block) => block.skip !== undefined).length).toBeLessThanOrEqual(MAX_SKIPS);
  });

  it('ts: every block compiles strictly (exactOptionalPropertyTypes too) against the built package', () => {
    const blocks = of('ts');
    expect(blocks.length).toBeGreaterThanOrEqual(10);
    const modules = Object.fromEntries(
      blocks.map((block, i) => [
        `block-${i}`,
        `// ${where(block)}\n${contextOf(block.code, CONTEXT).join('\n')}\n${block.code}\nexport {};\n`,
      ]),
    );
    expect(compileModules('.doc-blocks-ts', modules)).toBe('');
  }, 90_000);

  it('json: every block parses', () => {
    const wrong = of('json').flatMap((block) => {
      try {
        JSON.parse(block.code);
        return [];
      } catch (error) {
        return [`${where(block)}: ${(error as Error).message}`];
      }
    });
    expect(wrong).toEqual([]);
  });

  it('yaml: every block parses; a disagg config loads, a tenants file checks, a Kubernetes object has apiVersion and kind', () => {
    const wrong = of('yaml').flatMap((block) => yamlProblems(block).map((problem) => `${where(block)}: ${problem}`));
    expect(wrong).toEqual([]);
  });

  it.skipIf(promtool.skip)(`promql: every block is a valid expression (promtool check rules; ${promtool.why})`, () => {
    const blocks = of('promql');
    if (blocks.length === 0) return;
    mkdirSync(scratch, { recursive: true });
    const rules = {
      groups: [
        {
          name: 'docs',
          rules: blocks.map((block, i) => ({
            record: `docs:block_${i}`,
            expr: block.code.replace(/^\s*#.*$/gm, '').trim(),
          })),
        },
      ],
    };
    const file = join(scratch, 'promql-rules.json');
    writeFileSync(file, JSON.stringify(rules));
    expect(() => run('promtool', ['check', 'rules', file])).not.toThrow();
  });

  it('sh: every command is of a known kind and correct for it', () => {
    const wrong = of('sh').flatMap((block) =>
      commandsOf(block).flatMap((command) =>
        shellProblems(command, madeBy()).map((problem) => `${where(block)}: ${command.text}\n  ${problem}`),
      ),
    );
    expect(wrong).toEqual([]);
  });

  it('sh: a file a block writes (cat > f.yaml <<EOF) is checked as that kind of file', () => {
    const written = of('sh').flatMap((block) =>
      commandsOf(block)
        .filter((command) => command.heredoc !== undefined && /\.ya?ml$/.test(command.argv.at(-1) ?? ''))
        .map((command) => ({ ...block, code: command.heredoc as string })),
    );
    expect(written.length).toBeGreaterThan(0);
    expect(written.flatMap((block) => yamlProblems(block).map((problem) => `${where(block)}: ${problem}`))).toEqual([]);
  });

  it.skipIf(kubectl.skip)(`sh: kubectl apply -k and kubectl kustomize render (${kubectl.why})`, () => {
    const dirs = of('sh')
      .flatMap(commandsOf)
      .filter(({ argv }) => argv[0] === 'kubectl')
      .filter(({ argv }) => !argv.some((word) => madeBy().has(word)))
      .flatMap(({ argv }) => {
        const at = argv.indexOf('-k');
        if (argv[1] === 'apply' && at > 0) return [argv[at + 1] as string];
        return argv[1] === 'kustomize' ? [argv[2] as string] : [];
      });
    for (const dir of new Set(dirs)) {
      expect(() => run('kubectl', ['kustomize', join(root, dir)]), dir).not.toThrow();
    }
  });

  it.skipIf(!existsSync(join(root, 'docs/compatibility.md')))(
    'sh: every flag an engine command sets is one docs/compatibility.md lists',
    () => {
      const listed = readFileSync(join(root, 'docs/compatibility.md'), 'utf8');
      const missing = of('sh')
        .flatMap((block) => commandsOf(block).map((command) => ({ block, command })))
        .filter(({ command }) => engineOf(command.argv) !== undefined)
        .flatMap(({ block, command }) =>
          command.argv
            .filter((word) => word.startsWith('--'))
            .map((word) => word.split('=')[0] as string)
            .filter((flag) => !new RegExp(`(^|[\\s\`(])${flag}(?![\\w-])`, 'm').test(listed))
            .map((flag) => `${where(block)}: ${flag}`),
        );
      expect(missing).toEqual([]);
    },
  );
});

function commandsOf(block: DocBlock): ShellCommand[] {
  return shellCommands(block.code);
}

/** The top-level keys of a disagg settings file. */
const SETTING_KEYS = new Set(SETTINGS.map((setting) => setting.key.split('.')[0] as string));
const WORKER_KEYS = ['decode', 'decodeDns', 'decodeSelector', 'pools', 'inferencePool'];

function yamlProblems(block: DocBlock): string[] {
  const documents = parseAllDocuments(block.code);
  const problems: string[] = [];
  for (const document of Array.isArray(documents) ? documents : [documents]) {
    if (document.errors.length > 0) return document.errors.map((error) => error.message);
    const value = document.toJSON() as unknown;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) continue;
    const keys = Object.keys(value);
    if (keys.includes('apiVersion') || keys.includes('kind')) {
      const object = value as { apiVersion?: unknown; kind?: unknown };
      if (typeof object.apiVersion !== 'string' || typeof object.kind !== 'string') {
        problems.push('a Kubernetes object needs both apiVersion and kind');
      }
    } else if (keys.includes('tenants')) {
      try {
        parseTenants(block.code, 'tenants.yaml');
      } catch (error) {
        problems.push((error as Error).message);
      }
    } else if (keys.some((key) => SETTING_KEYS.has(key))) {
      problems.push(...configProblems(block, keys));
    }
  }
  return problems;
}

/** A settings file as `disagg serve --config` loads it (a decode worker given where it names none). */
function configProblems(block: DocBlock, keys: string[]): string[] {
  mkdirSync(scratch, { recursive: true });
  const file = join(scratch, `${block.page.replace(/\W/g, '-')}-${block.line}.yaml`);
  writeFileSync(file, block.code);
  const workers = keys.some((key) => WORKER_KEYS.includes(key)) ? [] : ['--decode', 'http://127.0.0.1:9'];
  try {
    loadServeConfig(['--config', file, ...workers], {});
    return [];
  } catch (error) {
    if (error instanceof ConfigError) return [...error.problems];
    throw error;
  } finally {
    rmSync(file, { force: true });
  }
}

/** Tools a block may run without a check of their own (their repository paths are still checked). */
const PLAIN = new Set([
  'grep',
  'head',
  'tail',
  'jq',
  'echo',
  'export',
  'cd',
  'cat',
  'sleep',
  'kill',
  'wait',
  'tee',
  'mkdir',
]);
/** Words that name a file or folder of this repository, which must exist. */
const REPO_PATH = /^(\.\/)?(deploy|docs|examples|scripts|bench|src|test|proto)\/|^disagg\.example\.yaml$/;

/**
 * The folders the pages' own commands make (`mkdir -p my-fleet` in docs/kubernetes.md): a
 * reader's overlay, not the repository's, which docs/tokenizer.md patches too.
 * test/deploy/kubernetes-doc.test.ts runs those blocks and renders what they make.
 */
function madeBy(): Set<string> {
  return new Set(
    of('sh')
      .flatMap(commandsOf)
      .filter(({ argv }) => argv[0] === 'mkdir')
      .flatMap(({ argv }) => argv.slice(1).filter((word) => !word.startsWith('-'))),
  );
}

function shellProblems(command: ShellCommand, made: Set<string>): string[] {
  const argv = command.argv[0] === 'npx' && command.argv[1] === 'disagg' ? command.argv.slice(1) : command.argv;
  const missing = argv
    .flatMap((word) => [word, ...word.split(/[=:]/).slice(1)])
    .filter((word) => REPO_PATH.test(word) && !existsSync(join(root, word.replace(/\/\*$/, ''))))
    .map((word) => `${word} does not exist in the repository`);
  if (argv[0] === 'kubectl' && argv.some((word) => made.has(word))) return missing;
  return [...missing, ...kindProblems(argv)];
}

function kindProblems(argv: string[]): string[] {
  const [name = '', ...rest] = argv;
  if (name === 'disagg') return disaggProblems(rest);
  if (name === 'curl') return curlProblems(rest);
  if (name === 'npm') return npmProblems(rest);
  if (name === 'npx')
    return rest[0] === 'vitest' || rest[0] === 'tsc' ? [] : [`npx ${rest[0]}: not a kind the suite checks`];
  if (name === 'kubectl') return kubectlProblems(rest);
  if (name === 'docker') return rest[0] === 'build' || rest[0] === 'run' ? [] : [`docker ${rest[0]}: not checked`];
  // Loading a locally built image into a test cluster: the image's name is all there is to get wrong.
  if (name === 'kind') return rest[0] === 'load' && rest[1] === 'docker-image' ? [] : [`kind ${rest[0]}: not checked`];
  if (name === 'minikube') return rest[0] === 'image' && rest[1] === 'load' ? [] : [`minikube ${rest[0]}: not checked`];
  if (engineOf(argv) !== undefined) return engineProblems(argv);
  if (PLAIN.has(name)) return [];
  return [`${name}: not a command the suite knows how to check (test/docs/blocks.test.ts)`];
}

/** The words of a `disagg` command, read by the same parsers the CLI uses. */
function disaggProblems([command, ...args]: string[]): string[] {
  try {
    if (command === '--help' || command === '--version' || args.includes('--help')) return [];
    if (command === 'fake-workers') parseFakeWorkersArgs(args);
    else if (command === 'serve') loadServeConfig(args, {});
    else if (command === 'sidecar') loadServeConfig(['--prefill-from', 'header', ...args], {});
    else if (command === 'epp') loadServeConfig(withoutHealthPort(args), {});
    else if (command === 'simulate' || command === 'plan') return simulateProblems(command, args);
    else if (command === 'tokenizer')
      return args[0] === 'fetch' && args.length === 2 ? [] : ['disagg tokenizer fetch <id|DIR>'];
    else return [`disagg ${command}: no such command`];
    return [];
  } catch (error) {
    if (error instanceof ConfigError) return [...error.problems];
    if (error instanceof FakeWorkersUsageError) return [error.message];
    throw error;
  }
}

/** A `disagg simulate` or `disagg plan` command: its own flags, then the serve settings it routes with. */
function simulateProblems(command: string, args: string[]): string[] {
  // `--attainment` is plan's own.
  const own =
    command === 'plan' ? args.filter((word, i) => word !== '--attainment' && args[i - 1] !== '--attainment') : args;
  try {
    const asked = parseSimulateArgs(own, { profile: DEFAULT_PROFILE });
    if (asked === 'help' || asked === 'list-profiles') return [];
    if (command === 'plan' && asked.gpus === undefined) return ['disagg plan needs --gpus N'];
    simulatedSettings({ prefill: asked.prefill, decode: asked.decode }, 'vllm', asked.serveArgs, (words) =>
      loadServeConfig(words, {}),
    );
    return [];
  } catch (error) {
    if (error instanceof SimulateUsageError) return [error.message];
    if (error instanceof ConfigError) return [...error.problems];
    throw error;
  }
}

/** `disagg epp`'s own flag, which `disagg serve` does not have. */
function withoutHealthPort(args: string[]): string[] {
  return args.filter((word, i) => !word.startsWith('--health-port') && args[i - 1] !== '--health-port');
}

/** The routes `disagg serve` answers (the proxy's, the pass-through APIs', the admin API's). */
const ROUTES =
  /^\/(v1\/(completions|chat\/completions|responses(\/[^/]+(\/cancel)?)?|messages(\/count_tokens)?|embeddings|rerank|score|classify|models(\/[^/]+)?)|v2\/rerank|rerank|classify|pooling|generate|tokenize|detokenize|health|ready|metrics|admin\/(tenants|workers(\/[^/]+(\/(drain|undrain))?)?))$/;
const CURL_VALUES = new Set(['-H', '--header', '-d', '--data', '--data-binary', '-X', '--request', '-o', '-w', '-m']);

function curlProblems(args: string[]): string[] {
  const problems: string[] = [];
  const urls: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const word = args[i] as string;
    if (CURL_VALUES.has(word)) {
      const value = args[++i] ?? '';
      if ((word === '-d' || word.startsWith('--data')) && !value.startsWith('@')) {
        try {
          JSON.parse(value);
        } catch (error) {
          problems.push(`the body is not JSON: ${(error as Error).message}`);
        }
      }
    } else if (!word.startsWith('-')) urls.push(word);
  }
  if (urls.length !== 1) return [...problems, `curl names ${urls.length} URLs`];
  const url = new URL(/^https?:/.test(urls[0] as string) ? (urls[0] as string) : `http://${urls[0]}`);
  if (!ROUTES.test(url.pathname)) problems.push(`${url.pathname} is no route of disagg serve`);
  return problems;
}

function npmProblems([command, ...args]: string[]): string[] {
  const scripts = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts as Record<string, string>;
  if (command === 'run')
    return args[0] !== undefined && args[0] in scripts ? [] : [`npm run ${args[0]}: no such script`];
  if (command === 'test' || command === 'start') return command in scripts ? [] : [`npm ${command}: no such script`];
  return ['ci', 'install', 'pack', 'exec'].includes(command ?? '') ? [] : [`npm ${command}: not checked`];
}

function kubectlProblems(args: string[]): string[] {
  const problems: string[] = [];
  args.forEach((word, i) => {
    const path = args[i + 1];
    if ((word === '-k' || word === '-f') && path !== undefined && !/^https?:/.test(path) && path !== '-') {
      if (!existsSync(join(root, path))) problems.push(`${path} does not exist in the repository`);
    }
  });
  if (args[0] === 'kustomize' && !existsSync(join(root, args[1] ?? ''))) problems.push(`${args[1]} does not exist`);
  return problems;
}

/** The engine a command starts: vLLM's `vllm serve`, SGLang's `python -m sglang.launch_server`. */
function engineOf(argv: string[]): 'vllm' | 'sglang' | undefined {
  if (argv[0] === 'vllm' && argv[1] === 'serve') return 'vllm';
  if (/^python3?$/.test(argv[0] ?? '') && argv[1] === '-m' && argv[2] === 'sglang.launch_server') return 'sglang';
  return undefined;
}

/** The JSON the engines parse from their flags, parsed here as they would. */
const JSON_FLAGS = ['--kv-transfer-config', '--kv-events-config'];

function engineProblems(argv: string[]): string[] {
  const problems: string[] = [];
  argv.forEach((word, i) => {
    const [flag = '', inline] = word.split(/=(.*)/s);
    if (!JSON_FLAGS.includes(flag)) return;
    const value = inline ?? argv[i + 1] ?? '';
    try {
      const parsed = JSON.parse(value) as unknown;
      if (typeof parsed !== 'object' || parsed === null) problems.push(`${flag} is not a JSON object`);
    } catch (error) {
      problems.push(`${flag} is not JSON: ${(error as Error).message}`);
    }
  });
  return problems;
}
