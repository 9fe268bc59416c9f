import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { startFakeWorker } from '../src/testing/index.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const read = (path: string) => readFileSync(`${root}/${path}`, 'utf8');

describe('the README stays true', () => {
  it("the README's API example is examples/quick-start.ts, word for word", () => {
    const readme = read('README.md');
    const block = /## API\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
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

  it("the README's flow example is examples/flow.ts, word for word, and it runs", () => {
    const block = /### The flow: `disaggregate`\n\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(read('README.md'))?.[1];
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

describe('examples/router.ts: a router of your own on the library', () => {
  /** The example in a process of its own, on a free port, in front of the given workers. */
  async function router(env: Record<string, string>) {
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/router.ts'], {
      cwd: root,
      env: { ...process.env, PORT: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        const found = /listening on (\S+)/.exec(String(chunk));
        if (found?.[1] !== undefined) resolve(found[1]);
      });
      child.once('exit', (code) => reject(new Error(`the router exited (${code}): ${stderr}`)));
    });
    return { url, child, stderr: () => stderr };
  }

  it.each(['vllm', 'sglang'] as const)(
    '%s: streamed chat and a whole completion through the official client; a bad request is a 400 before any worker; failures name no address',
    async (protocol) => {
      const prefill = await startFakeWorker({ role: 'prefill', protocol });
      const decode = await startFakeWorker({ role: 'decode', protocol, tokens: 3 });
      const running = await router({
        CONNECTOR: protocol,
        PREFILL: prefill.url,
        DECODE: decode.url,
        BOOTSTRAP_PORT: String(prefill.bootstrapPort),
      });
      try {
        const client = new OpenAI({ baseURL: `${running.url}/v1`, apiKey: 'unused', maxRetries: 0 });
        const stream = await client.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: 'Say hi' }],
          stream: true,
        });
        let content = '';
        let finish: string | null | undefined;
        for await (const chunk of stream) {
          content += chunk.choices[0]?.delta?.content ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        expect({ content, finish }).toEqual({ content: 'tok0 tok1 tok2 ', finish: 'stop' });
        const completion = await client.completions.create({ model: 'm', prompt: 'Say', max_tokens: 2 });
        expect(completion.choices[0]?.text).toBe('tok0 tok1 ');
        const before = [prefill.requests.length, decode.requests.length];
        const bad = await client.completions
          .create({ model: 'm', prompt: 'Say', max_tokens: 'ten' as never })
          .catch((error: unknown) => error);
        expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
        expect(bad).toMatchObject({ param: 'max_tokens' });
        expect([prefill.requests.length, decode.requests.length]).toEqual(before);
        prefill.setFault({ type: 'status', status: 500, message: `broken at ${prefill.url}` });
        const failed = await client.completions
          .create({ model: 'm', prompt: 'Say', max_tokens: 2 })
          .catch((error: unknown) => error);
        expect(failed).toMatchObject({ status: 502 });
        expect(String((failed as Error).message)).not.toContain('127.0.0.1');
        expect(String((failed as Error).message)).toContain('worker-0');
        expect(((failed as InstanceType<typeof OpenAI.APIError>).error as { leg?: string }).leg).toBe('prefill');
        expect(prefill.ledger.outstanding()).toEqual([]);
        expect(running.stderr()).toBe('');
      } finally {
        running.child.kill('SIGTERM');
        await Promise.all([prefill.close(), decode.close()]);
      }
    },
    30_000,
  );
});
