import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const read = (path: string) => readFileSync(`${root}/${path}`, 'utf8');

describe('the library guide and the README stay true', () => {
  it("the library guide's first example is examples/quick-start.ts, word for word", () => {
    const guide = read('docs/library.md');
    const block = /## The handoff in one example\n\n```ts\n([\s\S]*?)```/.exec(guide)?.[1];
    expect(block).toBe(read('examples/quick-start.ts'));
  });

  it('the quick-start example runs against the built package and prints what it says', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'examples/quick-start.ts'], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('Hello\n world\nlength\n');
  });

  it("the library guide's flow example is examples/flow.ts, word for word, and it runs", () => {
    const block = /## The flow: `disaggregate`\n\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(read('docs/library.md'))?.[1];
    expect(block).toBe(read('examples/flow.ts'));
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'examples/flow.ts'], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe(
      [
        'prefill on http://prefill-0:8100: max_tokens 1',
        'decode on http://decode-0:8200: max_tokens 16, KV from {"remote_engine_id":"e1","remote_block_ids":[1,2]}',
        'Hello',
        '!',
        'outcome: success',
        '',
      ].join('\n'),
    );
  });

  it("the library guide's router is examples/router-hono.ts, word for word, and its Express router the end of examples/router-express.ts", () => {
    const section = /## Build your own router\n([\s\S]*?)\n## /.exec(read('docs/library.md'))?.[1] ?? '';
    const [hono, express] = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1] as string);
    expect(hono).toBe(read('examples/router-hono.ts'));
    const expressFile = read('examples/router-express.ts');
    const body = (express ?? '').slice((express ?? '').indexOf('const app = express();'));
    expect(body.length).toBeGreaterThan(200);
    expect(expressFile.endsWith(body)).toBe(true);
  });

  it('the README quick start is the two commands', () => {
    const readme = read('README.md');
    expect(readme).toContain('npm ci && npm run demo');
    expect(readme).toContain('npm ci && npm test');
    const scripts = JSON.parse(read('package.json')).scripts;
    expect(scripts.demo).toBeDefined();
    expect(scripts.test).toContain('test:unit');
  });
});

describe('npm run demo', () => {
  it('runs fake workers and the proxy: tokens through the openai client, the timeline, then a clean SSE error', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'examples/demo.ts'], { cwd: root, encoding: 'utf8' });
    expect(run.status).toBe(0);
    expect(run.stderr).toBe('');
    const [first, second] = run.stdout.split(/\n(?=\d\. )/).slice(1);
    expect(first).toContain('served as: disaggregated-concurrent');
    expect(first).toContain('client <- "tok0 "');
    expect(first).toContain('client <- finish_reason: stop');
    const timeline = (first ?? '').split('\n');
    const at = (name: string) => timeline.findIndex((line) => line.trim().endsWith(name) || line.includes(`${name} (`));
    expect(at('firstToken')).toBeGreaterThan(-1);
    expect(at('firstToken')).toBeLessThan(at('prefillCompleted')); // tokens flowed while prefill ran
    expect(at('terminalReleased')).toBeGreaterThan(at('prefillCompleted')); // the last chunk waited
    expect(first).toContain('finished: success');
    expect(first).toContain('1 claimed, 0 left behind');
    expect(second).toContain('client <- SSE error (OpenAI.APIError, leg: prefill)');
    expect(second).toContain('KV transfer aborted (NIXL timeout)');
    // The demo paces its tokens as a GPU would (about 4 s of them): a bound, not a timing.
  }, 30_000);
});

describe('npm run demo:handoff', () => {
  it('shows tokens before prefill ends, the held terminal, and a late failure replacing success', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'examples/handoff-demo.ts'], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(run.status).toBe(0);
    expect(run.stderr).toBe('');
    const [first, second, third] = run.stdout.split(/\n(?=\d\. )/).slice(1);
    // Scenario 1: a token reaches the client before prefill succeeds; the terminal after it.
    const lines = (first ?? '').split('\n');
    const firstToken = lines.findIndex((line) => line.includes('client   <- token'));
    const prefillDone = lines.findIndex((line) => line.includes('prefill  succeeded'));
    const finish = lines.findIndex((line) => line.includes('<- finish_reason: length'));
    expect(firstToken).toBeGreaterThan(-1);
    expect(firstToken).toBeLessThan(prefillDone);
    expect(prefillDone).toBeLessThan(finish);
    expect(second).toContain('<- error: Prefill execution failed: KV transfer timed out (NIXL)');
    expect(second).not.toContain('<- finish_reason');
    expect(third).toContain('request context stopped: yes');
  });
});
