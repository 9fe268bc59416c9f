// The package as an operator installs it: packed, installed into an empty project, its bin run
// with npx. (Before publication this is how it is installed: `npm pack`, or a git URL, which
// builds it through `prepare`.)
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventuallyAsync, expectServedCompletion, fakeWorkers } from './support/http.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const fakes = fakeWorkers();
let project = '';

beforeAll(() => {
  project = mkdtempSync(join(tmpdir(), 'disagg-tarball-'));
  // dist/ is built by `npm test` before the suite; packing without scripts packs that build.
  const pack = spawnSync('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', project], {
    cwd: root,
    encoding: 'utf8',
  });
  expect(pack.status, pack.stderr).toBe(0);
  const tarball = pack.stdout.trim().split('\n').at(-1) as string;
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'operator', private: true, type: 'module' }));
  const install = spawnSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', `./${tarball}`], {
    cwd: project,
    encoding: 'utf8',
  });
  expect(install.status, install.stderr).toBe(0);
}, 120_000);

afterAll(() => {
  spawnSync('rm', ['-rf', project]);
});

describe('the packed tarball in an empty project', () => {
  it('its dist/ holds the library, not its optional dependencies (loaded from node_modules when asked)', () => {
    const dist = join(project, 'node_modules', 'disagg', 'dist');
    const files = readdirSync(dist).filter((file) => /\.(c?js)$/.test(file));
    const total = files.reduce((sum, file) => sum + statSync(join(dist, file)).size, 0);
    // The library's own code (3.2 MB across the ESM and CommonJS builds and the CLI, with the
    // agents' stores), not the Kubernetes client (48 MB), pg nor anything else optional: 4 MiB
    // leaves room to grow and still fails at the first optional package bundled.
    expect(total).toBeLessThan(4 * 1024 * 1024);
    for (const file of files) expect(readFileSync(join(dist, file), 'utf8'), file).not.toContain('pg-protocol');
    for (const file of files) expect(readFileSync(join(dist, file), 'utf8'), file).not.toContain('class KubeConfig');
    // The optional dependency came with the install, for discovery by label.
    const resolved = spawnSync(
      process.execPath,
      ['-e', "import('@kubernetes/client-node').then(() => console.log('ok'))"],
      {
        cwd: project,
        encoding: 'utf8',
      },
    );
    expect(resolved.stdout.trim()).toBe('ok');
  });

  it('npx disagg serve answers a request through fake workers', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const child = spawn(
      'npx',
      [
        'disagg',
        'serve',
        '--connector',
        'vllm',
        '--prefill',
        prefill.url,
        '--decode',
        decode.url,
        '--port',
        '0',
        '--host',
        '127.0.0.1',
      ],
      { cwd: project, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    try {
      let url = '';
      await eventuallyAsync(async () => {
        const line = out.split('\n').find((entry) => entry.includes('disagg serve listening'));
        if (line !== undefined) url = JSON.parse(line).url;
        return line !== undefined;
      }, 'the proxy listens');
      await expectServedCompletion(url);
    } finally {
      // npx runs the bin in a child of its own: end the whole group.
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGTERM');
    }
  }, 60_000);

  it("the package's Hono router, run as a router author runs it (Hono imported first), answers the openai client through fake workers", async () => {
    // The host's own packages, at the versions this repository tests with.
    const versions = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies as Record<
      string,
      string
    >;
    const add = spawnSync(
      'npm',
      [
        'install',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        ...['hono', '@hono/node-server', 'tsx'].map((name) => `${name}@${versions[name]}`),
      ],
      { cwd: project, encoding: 'utf8' },
    );
    expect(add.status, add.stderr).toBe(0);
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang' });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const child = spawn(process.execPath, ['--import', 'tsx', 'node_modules/disagg/examples/router-hono.ts'], {
      cwd: project,
      env: {
        ...process.env,
        PORT: '0',
        CONNECTOR: 'sglang',
        PREFILL: prefill.url,
        DECODE: decode.url,
        BOOTSTRAP_PORT: String(prefill.bootstrapPort),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    try {
      let url = '';
      await eventuallyAsync(async () => {
        url = /listening on (\S+)/.exec(out)?.[1] ?? '';
        return url !== '';
      }, 'the router listens');
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const whole = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
      expect(whole.choices[0]?.text).toBe('tok0 tok1 ');
      let text = '';
      const stream = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      });
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      expect(text).toBe('tok0 tok1 ');
      expect(prefill.ledger.outstanding()).toEqual([]);
    } finally {
      child.kill('SIGTERM');
    }
  }, 120_000);
});
