import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';
import { eventually, expectServedCompletion, fakeWorkers } from '../support/http.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = `${root}/dist/cli.js`;
const fakes = fakeWorkers();
const cleanups: Array<() => Promise<unknown> | unknown> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('the disagg command (built)', () => {
  it('prints its usage and version; a bad setting exits 2 saying what was expected', () => {
    expect(spawnSync(process.execPath, [bin, '--help'], { encoding: 'utf8' }).stdout).toContain('disagg serve');
    expect(spawnSync(process.execPath, [bin, '--version'], { encoding: 'utf8' }).stdout.trim()).toMatch(
      /^\d+\.\d+\.\d+/,
    );
    const bad = spawnSync(process.execPath, [bin, 'serve', '--connector', 'trt'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--connector must be one of 'vllm', 'sglang', 'trtllm'");
    // What `kubectl logs` shows of a crash loop: the problems, one line each, then where to read
    // more, not the whole help.
    const typos = spawnSync(
      process.execPath,
      [bin, 'serve', '--connector', 'vllm', '--prefil', 'http://p', '--decode', 'http://d', '--prot', '1'],
      { encoding: 'utf8' },
    );
    expect(typos.status).toBe(2);
    expect(typos.stderr).toBe(
      [
        'disagg serve: Unknown flag --prefil; did you mean --prefill?',
        'disagg serve: Unknown flag --prot; did you mean --port?',
        "See 'disagg serve --help' for every setting.",
        '',
      ].join('\n'),
    );
    // A combination only the proxy's own checks see (a policy and the data it reads): the same.
    const unfed = spawnSync(
      process.execPath,
      [
        bin,
        'serve',
        '--connector',
        'vllm',
        '--prefill',
        'http://p',
        '--decode',
        'http://d',
        '--decode-policy',
        'precise-prefix',
      ],
      { encoding: 'utf8' },
    );
    expect(unfed.status).toBe(2);
    expect(unfed.stderr).toBe(
      [
        "disagg serve: decodePolicy 'precise-prefix' routes on the engines' KV cache events: set kvEvents.port (--kv-events-port, the port of the workers' --kv-events-config endpoint) or give the workers kvEvents endpoints",
        "See 'disagg serve --help' for every setting.",
        '',
      ].join('\n'),
    );
    const unknown = spawnSync(process.execPath, [bin, 'foo'], { encoding: 'utf8' });
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/^disagg: unknown command "foo"\n/);
  });

  it.each([
    [
      '@kubernetes/client-node',
      ['--prefill-selector', 'app=p', '--decode-selector', 'app=d'],
      'Kubernetes discovery needs the optional dependency @kubernetes/client-node',
    ],
    [
      'zeromq',
      ['--prefill-policy', 'precise-prefix', '--kv-events-port', '5557'],
      'KV cache events need the optional dependency zeromq',
    ],
    ['pino-pretty', ['--log-format', 'pretty'], '--log-format pretty needs pino-pretty'],
    [
      '@opentelemetry/api',
      ['--otlp-endpoint', 'http://127.0.0.1:4318'],
      '--otlp-endpoint needs the optional dependencies',
    ],
  ])(
    'serve without %s (an install with --omit=optional): one line saying what to install, exit 1, no stack',
    (name, flags, said) => {
      const run = spawnSync(
        process.execPath,
        [
          '--import',
          `${root}/test/support/without-packages.mjs`,
          bin,
          'serve',
          '--connector',
          'vllm',
          '--prefill',
          'http://127.0.0.1:1',
          '--decode',
          'http://127.0.0.1:2',
          '--port',
          '0',
          ...flags,
        ],
        { encoding: 'utf8', env: { ...process.env, HIDE_PACKAGES: name }, timeout: 20_000 },
      );
      expect(run.status).toBe(1);
      const lines = run.stderr.split('\n').filter((line) => line !== '');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`disagg serve: ${said}`);
    },
  );

  it('serve: a port in use or a host that does not resolve is one clear line and exit 1, no stack trace', async () => {
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const { port } = busy.address() as AddressInfo;
    const workers = ['--connector', 'vllm', '--prefill', 'http://127.0.0.1:1', '--decode', 'http://127.0.0.1:2'];
    const inUse = spawnSync(
      process.execPath,
      [bin, 'serve', ...workers, '--host', '127.0.0.1', '--port', String(port)],
      {
        encoding: 'utf8',
      },
    );
    // With KV event subscribers open when the listen fails: they end with the start, and the
    // process exits rather than hanging on their sockets (bounded, so a hang fails here).
    const following = spawnSync(
      process.execPath,
      [
        bin,
        'serve',
        ...workers,
        ...['--prefill-policy', 'precise-prefix', '--kv-events-port', '1'],
        ...['--host', '127.0.0.1', '--port', String(port)],
      ],
      { encoding: 'utf8', timeout: 20_000 },
    );
    busy.close();
    expect(inUse.status).toBe(1);
    expect(inUse.stderr.trim()).toBe(
      `disagg serve: cannot listen on 127.0.0.1:${port}: the port is in use (another disagg serve?)`,
    );
    expect(following.status).toBe(1);
    expect(following.stderr.trim()).toBe(inUse.stderr.trim());
    const noHost = spawnSync(process.execPath, [bin, 'serve', ...workers, '--host', 'nohost.invalid', '--port', '0'], {
      encoding: 'utf8',
    });
    expect(noHost.status).toBe(1);
    expect(noHost.stderr.trim()).toBe(
      'disagg serve: cannot listen on nohost.invalid:0: the host name does not resolve',
    );
  });

  it('serve: answers a completion through fake workers; on SIGTERM /ready fails first while requests are still served, then it stops cleanly', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const child = spawn(
      process.execPath,
      [
        bin,
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
        '--drain-delay-ms',
        '1500',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line in: ${out}`)), 10_000);
      child.stdout.on('data', () => {
        const line = out.split('\n').find((entry) => entry.includes('disagg serve listening'));
        if (line !== undefined) {
          clearTimeout(timer);
          resolve(JSON.parse(line).url);
        }
      });
    });
    await expectServedCompletion(url);
    expect((await fetch(`${url}/ready`)).status).toBe(200);
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    await eventually(() => out.includes('"msg":"Shutting down"'), 'SIGTERM was taken');
    const ready = await fetch(`${url}/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ ready: false, reason: 'shutting down' });
    // Draining: a load balancer that has not seen /ready fail yet is still served.
    const during = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
    });
    expect(during.status).toBe(200);
    await during.text();
    expect(await exited).toBe(0);
    expect(out).toContain('"msg":"request finished"');
    expect(out).toContain('"msg":"Stopped"');
  }, 20_000);

  // undici's HTTP parser is WebAssembly; the optimizing tier's compile of it alone peaks at 25
  // to 40 MB outside the heap (Node 20 and 24), the baseline compiler's at about 4 MB for the
  // whole run. The image passes the flag to node; the command sets it itself, which takes
  // effect where V8 reads it after start (Node 20; from Node 24 on, only the command line does).
  async function compilerMemoryServing(nodeArgs: string[]): Promise<number> {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const served = await serveBin(['--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url], {
      env: { NODE_OPTIONS: `--import ${root}/test/support/compiler-memory.mjs` },
      nodeArgs,
      cleanups,
    });
    for (let round = 0; round < 20; round += 1) await expectServedCompletion(served.url);
    expect(await served.stop()).toBe(0);
    const peak = Number(/peak_malloced_memory=(\d+)/.exec(served.output.err)?.[1]);
    expect(peak).toBeGreaterThan(0);
    return peak;
  }

  it("started as the image starts it, serve leaves WebAssembly to V8's baseline compiler: parsing answers costs no optimizing compile of undici's parser", async () => {
    const dockerfile = readFileSync(`${root}/deploy/Dockerfile`, 'utf8');
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1] ?? '[]') as string[];
    expect(entrypoint.at(-1)).toBe('dist/cli.js');
    expect(await compilerMemoryServing(entrypoint.slice(1, -1))).toBeLessThan(15e6);
  }, 20_000);

  it.runIf(Number(process.versions.node.split('.')[0]) < 24)(
    'started as plain node dist/cli.js on Node 20, serve sets the baseline compiler itself',
    async () => {
      expect(await compilerMemoryServing([])).toBeLessThan(15e6);
    },
    20_000,
  );

  it('serve --log-format pretty writes pino-pretty lines instead of JSON', async () => {
    const child = spawn(
      process.execPath,
      [bin, 'serve', '--connector', 'vllm', '--prefill', 'http://127.0.0.1:1', '--decode', 'http://127.0.0.1:2'].concat(
        ['--host', '127.0.0.1', '--port', '0', '--log-format', 'pretty', '--drain-delay-ms', '0'],
      ),
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    await eventually(() => out.includes('disagg serve listening'), 'the listening line', 2000);
    const exited = new Promise((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    await exited;
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN \(\d+\): Worker failed its health check/m);
    expect(out).not.toMatch(/^\{"level"/m);
  });
});
