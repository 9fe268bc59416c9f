import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';

// Every problem a start can meet for a setting as given goes the flag errors' way through the
// built bin (what the image runs): one line each, then where to read more, exit 2, no stack
// trace (what `kubectl logs` shows of a crash loop).
const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = `${root}/dist/cli.js`;
const scratch = mkdtempSync(join(tmpdir(), 'disagg-startup-'));
const file = (name: string, text: string) => {
  const path = join(scratch, name);
  writeFileSync(path, text);
  return path;
};
// Workers nobody listens at: the start probes them once and goes on without them.
const WORKERS = ['--connector', 'vllm', '--prefill', 'http://127.0.0.1:1', '--decode', 'http://127.0.0.1:2'];

/** Runs the bin; bounded, so that a start that hangs after its error fails the test instead. */
function run(args: string[], env: Record<string, string | undefined> = {}) {
  return spawnSync(process.execPath, [bin, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 20_000,
  });
}

/** The one-line report: the line, then the pointer to --help, exit 2. */
function expectOneLine(result: ReturnType<typeof run>, line: string | RegExp, command = 'serve') {
  const lines = result.stderr.split('\n');
  expect(result.stderr).not.toMatch(/\n\s+at /);
  expect(lines).toHaveLength(3);
  if (typeof line === 'string') expect(lines[0]).toBe(`disagg ${command}: ${line}`);
  else expect(lines[0]).toMatch(line);
  expect(lines[1]).toBe(`See 'disagg ${command} --help' for every setting.`);
  expect(result.status).toBe(2);
}

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('startup errors (built bin)', () => {
  it("a policy without the data it reads: the proxy's own check, one line", () => {
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--prefill-policy', 'precise-prefix']),
      /^disagg serve: prefillPolicy 'precise-prefix' routes on the engines' KV cache events: set kvEvents\.port/,
    );
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--aggregate-cached-ratio', '0.5']),
      /^disagg serve: routing\.aggregateCachedRatio \(--aggregate-cached-ratio\) needs decodePolicy 'cache-aware'/,
    );
  });

  it('a tenants file that is missing, not YAML, has an unknown key or a key twice: one line naming the tenant', () => {
    const missing = join(scratch, 'missing.yaml');
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--tenants-file', missing]),
      `Cannot read the tenants file ${missing}: ENOENT: no such file or directory, open '${missing}'`,
    );
    const notYaml = file('not-yaml.yaml', 'tenants: [\n');
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--tenants-file', notYaml]),
      /^disagg serve: \S+not-yaml\.yaml is neither YAML nor JSON: .* at line 2, column 1$/,
    );
    const unknownKey = file(
      'unknown-key.yaml',
      'tenants:\n  - name: chat\n  - name: batch\n    keys: [sk-batch-0001]\n    requestPerMinute: 60\n',
    );
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--tenants-file', unknownKey]),
      `${unknownKey}: tenant "batch": Unrecognized key: "requestPerMinute"; did you mean "requestsPerMinute"?`,
    );
    const twice = file(
      'twice.yaml',
      'tenants:\n  - { name: a, keys: [sk-shared-0001] }\n  - { name: b, keys: [sk-shared-0001] }\n',
    );
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--tenants-file', twice]),
      `${twice}: a key of b is also a's`,
    );
  });

  it('a --tokenizer directory without tokenizer.json: one line, and the process exits', () => {
    const empty = join(scratch, 'no-tokenizer');
    mkdirSync(empty, { recursive: true });
    expectOneLine(
      run(['serve', ...WORKERS, '--port', '0', '--tokenizer', empty]),
      `--tokenizer ${empty} has no tokenizer.json: give the directory of a Hugging Face model (tokenizer.json and tokenizer_config.json), or its model id (org/name)`,
    );
  });

  it("a config file that is not YAML: one line, without the parser's excerpt", () => {
    const config = file('config.yaml', 'connector: [\n');
    expectOneLine(
      run(['serve', '--config', config]),
      /^disagg serve: The config file \S+ is not valid YAML: .*column 1$/,
    );
  });

  it('Kubernetes discovery outside a cluster and without a kubeconfig: one line saying what to set', () => {
    const home = join(scratch, 'home');
    mkdirSync(home, { recursive: true });
    const selectors = ['--connector', 'vllm', '--prefill-selector', 'app=p', '--decode-selector', 'app=d'];
    const env = { KUBECONFIG: '', HOME: home, KUBERNETES_SERVICE_HOST: undefined };
    const line =
      'Kubernetes discovery (--prefill-selector, --decode-selector, --inference-pool) found neither a cluster nor a kubeconfig: run it in a pod with a ServiceAccount that may list and watch pods, or set KUBECONFIG (or write ~/.kube/config)';
    expectOneLine(run(['serve', ...selectors, '--port', '0'], env), line);
    expectOneLine(
      run(['epp', ...selectors, '--port', '0', '--health-port', '0', '--metrics-port', '0'], env),
      line,
      'epp',
    );
  });

  it('disagg sidecar and disagg epp report a bad tenants file the same way', () => {
    const unknownKey = file('sidecar-tenants.yaml', 'tenants:\n  - { name: chat, maxConcurent: 2 }\n');
    const line = `${unknownKey}: tenant "chat": Unrecognized key: "maxConcurent"; did you mean "maxConcurrent"?`;
    expectOneLine(run(['sidecar', ...WORKERS, '--port', '0', '--tenants-file', unknownKey]), line, 'sidecar');
    expectOneLine(
      run([
        'epp',
        ...WORKERS,
        '--port',
        '0',
        '--health-port',
        '0',
        '--metrics-port',
        '0',
        '--tenants-file',
        unknownKey,
      ]),
      line,
      'epp',
    );
  });

  it('the listening line says what the proxy runs with; --kv-events-port that no policy reads is one warning', async () => {
    const tenants = file('two-tenants.yaml', 'tenants:\n  - { name: chat }\n  - { name: batch }\n');
    // Least in flight: the default scored policy's slo-headroom reads the KV events where given.
    const served = await serveBin(
      [...WORKERS, '--selection', 'least-in-flight', '--tenants-file', tenants, '--kv-events-port', '5557'],
      { cleanups },
    );
    expect(served.listening).toMatchObject({
      policies: { prefill: 'least-in-flight', decode: 'least-in-flight' },
      migrationLimit: expect.any(Number),
      tenants: 2,
      redis: false,
      tokenizer: null,
      kvEventsPort: 5557,
    });
    const warnings = served.output.out
      .split('\n')
      .filter((line) => line.includes('--kv-events-port'))
      .map((line) => JSON.parse(line) as { level: number; msg: string });
    expect(warnings).toEqual([
      expect.objectContaining({
        level: 40,
        msg: "--kv-events-port 5557 is set but no policy routes on KV events (prefill 'least-in-flight', decode 'least-in-flight'): the events are followed for nothing; set --prefill-policy or --decode-policy precise-prefix, or drop --kv-events-port",
      }),
    ]);
  });
});
