// docs/quick-start.md, run as printed, in the page's order, through the built CLI: the fake
// workers, the proxy, each curl (its output held to the `text` block shown after it), the openai
// client's block, then the same with workers found by label. Three things differ from a
// reader's terminal, so that the test can run beside others: `npx disagg` is the built bin
// (`node dist/cli.js`, what npx runs in the checkout), every server listens on a free port
// (`--prefill-port 0 --decode-port 0`, `--port 0`) and the page's ports in later commands are
// replaced by those, and `npm ci` is not run again (the suite runs in an installed checkout).
import { type ChildProcess, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { binUntil } from '../support/bin.js';
import { fencedBlocks, root, type ShellCommand, shellCommands } from '../support/doc-blocks.js';
import { eventually } from '../support/http.js';

const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** Starts a long-running command of the page; resolves with its stdout once `ready` matches it. */
async function start(
  argv: string[],
  env: Record<string, string>,
  ready: RegExp,
): Promise<{ child: ChildProcess; out: string }> {
  const { child, found } = await binUntil(argv, (out) => (ready.test(out) ? out : undefined), {
    children,
    env,
    timeoutMs: 20_000,
  });
  return { child, out: found };
}

/** Stops the processes the page started so far (the page's "stop the first fake workers first"). */
async function stopAll(): Promise<void> {
  await Promise.all(
    children.splice(0).map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null) return resolve();
          child.removeAllListeners('exit');
          child.on('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    ),
  );
}

/** A pipeline (`curl ... | grep ...`) as one command: its first command, the whole text. */
function pipelines(commands: ShellCommand[]): ShellCommand[] {
  const joined: ShellCommand[] = [];
  let piped: ShellCommand | undefined;
  for (const command of commands) {
    const whole =
      piped === undefined ? command : { ...piped, text: `${piped.text} | ${command.text}`, operator: command.operator };
    piped = command.operator === '|' ? whole : undefined;
    if (piped === undefined) joined.push(whole);
  }
  return joined;
}

/** Every `"key":value` and every whole line of a `text` block but those with `...`: in `output`. */
function expectShown(output: string, shown: string): void {
  for (const pair of shown.matchAll(/"\w+":(true|false|\d+|"[^"]*")/g)) expect(output).toContain(pair[0]);
  for (const line of shown.split('\n')) {
    if (line !== '' && !line.includes('...') && !line.startsWith('{')) expect(output).toContain(line);
  }
}

describe('docs/quick-start.md, run as printed', () => {
  it('fake workers, the proxy, curl, the openai client, the metrics, then workers found by label', async () => {
    const blocks = fencedBlocks('docs/quick-start.md');
    /** What the page's addresses stand for now: `127.0.0.1:8100` and the like, to the real ones. */
    const ports = new Map<string, string>();
    const replace = (text: string) => [...ports].reduce((at, [printed, real]) => at.replaceAll(printed, real), text);
    let kubeconfig = '';
    let last = '';
    let ran = 0;
    for (const block of blocks) {
      if (block.lang === 'text') {
        expectShown(last, block.code);
        continue;
      }
      if (block.lang === 'ts') {
        const dir = join(root, '.quick-start-run');
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, 'client.ts'), replace(block.code));
        const run = spawnSync(process.execPath, ['--import', 'tsx', join(dir, 'client.ts')], {
          cwd: root,
          encoding: 'utf8',
        });
        expect(run.stderr).toBe('');
        expect(run.stdout).toMatch(/^(tok\d+ )+\n$/);
        ran++;
        continue;
      }
      if (block.lang !== 'sh') continue;
      for (const command of pipelines(shellCommands(block.code))) {
        const [npx, disagg, sub, ...args] = command.argv;
        if (command.argv.join(' ') === 'npm ci') continue;
        ran++;
        if (npx === 'npx' && disagg === 'disagg' && sub === 'fake-workers') {
          await stopAll();
          ports.clear();
          const { out } = await start(
            [sub, ...args, '--prefill-port', '0', '--decode-port', '0'],
            command.env,
            /Ctrl-C stops/,
          );
          const urls = [...out.matchAll(/worker at http:\/\/127\.0\.0\.1:(\d+)/g)].map((m) => m[1] as string);
          const decodes = [...out.matchAll(/decode worker at http:\/\/127\.0\.0\.1:(\d+)/g)].map((m) => m[1]);
          expect(urls.length).toBeGreaterThanOrEqual(2);
          ports.set('127.0.0.1:8100', `127.0.0.1:${urls[0]}`);
          ports.set('127.0.0.1:8200', `127.0.0.1:${decodes[0]}`);
          kubeconfig = /KUBECONFIG=(\S+)/.exec(out)?.[1] ?? '';
        } else if (npx === 'npx' && disagg === 'disagg' && sub === 'serve') {
          const env = Object.fromEntries(
            Object.entries(command.env).map(([name, value]) => [
              name,
              name === 'KUBECONFIG' ? value.replace(/\/tmp\/disagg-fake-kubeconfig-<pid>/, kubeconfig) : value,
            ]),
          );
          if ('KUBECONFIG' in env) expect(env.KUBECONFIG).toBe(kubeconfig);
          const { out } = await start(
            [sub, ...args.map(replace), '--port', '0', '--host', '127.0.0.1'],
            env,
            /disagg serve listening/,
          );
          const url = JSON.parse(out.split('\n').find((line) => line.includes('disagg serve listening')) ?? '{}').url;
          ports.set('localhost:8000', new URL(url).host);
          ports.set('http://localhost:8000', url);
        } else if (npx === 'curl') {
          // Workers found by label join the pools within a watch's first answer: /ready is asked again.
          const attempt = () => spawnSync('sh', ['-c', replace(command.text)], { encoding: 'utf8' });
          let result = attempt();
          if (command.text.includes('/ready')) {
            await eventually(() => {
              result = attempt();
              return !/"ready":false|"prefill_workers":0/.test(result.stdout);
            }, `${command.text}: the workers found`);
          }
          expect(result.status, `${command.text}\n${result.stderr}`).toBe(0);
          expect(result.stdout.length).toBeGreaterThan(0);
          if (command.text.includes('/v1/completions')) {
            expect(JSON.parse(result.stdout).choices[0].text).toMatch(/tok0/);
          }
          last = result.stdout;
        } else {
          throw new Error(`docs/quick-start.md runs a command this test does not: ${command.text}`);
        }
      }
    }
    expect(ran).toBeGreaterThanOrEqual(8);
    await stopAll();
  }, 90_000);
});
