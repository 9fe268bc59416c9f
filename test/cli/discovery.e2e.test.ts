// Kubernetes discovery as it ships: the built bin (dist/cli.js, the image's entry point), its
// optional @kubernetes/client-node loaded from node_modules, against a stand-in API server
// that lists and watches pods as the real one does.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { eventuallyAsync, expectServedCompletion, fakeWorkers } from '../support/http.js';
import { type StandInPod, startKubernetesApi } from '../support/kubernetes-api.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const fakes = fakeWorkers();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A port free on 127.0.0.2, to give every pod the same worker port (as a Deployment's pods have). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.2', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function kubeconfig(url: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'disagg-kube-'));
  const path = join(dir, 'config');
  writeFileSync(
    path,
    [
      'apiVersion: v1',
      'kind: Config',
      `clusters: [{ name: stand-in, cluster: { server: "${url}", insecure-skip-tls-verify: true } }]`,
      'users: [{ name: disagg, user: { token: stand-in-token } }]',
      'contexts: [{ name: stand-in, context: { cluster: stand-in, user: disagg } }]',
      'current-context: stand-in',
    ].join('\n'),
  );
  return path;
}

const pod = (name: string, role: 'prefill' | 'decode', ip: string, extra: Partial<StandInPod> = {}): StandInPod => ({
  name,
  namespace: 'llm',
  labels: { app: 'vllm', role },
  ip,
  ...extra,
});

/** The built bin serving with discovery against `api`: its URL once it listens, and its output so far. */
async function serve(api: { url: string }, args: string[]) {
  const child = spawn(
    process.execPath,
    [
      `${root}/dist/cli.js`,
      'serve',
      '--connector',
      'vllm',
      '--prefill-selector',
      'app=vllm,role=prefill',
      '--decode-selector',
      'app=vllm,role=decode',
      '--k8s-namespace',
      'llm',
      ...args,
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--drain-delay-ms',
      '0',
    ],
    { env: { ...process.env, KUBECONFIG: kubeconfig(api.url) }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output = { out: '', err: '' };
  child.stdout.on('data', (chunk: Buffer) => {
    output.out += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    output.err += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  cleanups.push(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  let url = '';
  await eventuallyAsync(async () => {
    const line = output.out.split('\n').find((entry) => entry.includes('disagg serve listening'));
    if (line !== undefined) url = JSON.parse(line).url;
    return line !== undefined || output.out.includes('"level":50');
  }, `the proxy listens: ${output.out}${output.err}`);
  expect(output.out).not.toContain('DiscoveryUnavailableError');
  const ready = async () => (await fetch(`${url}/ready`)).json() as Promise<Record<string, unknown>>;
  return { url, output, ready };
}

describe('Kubernetes discovery from the built bin', () => {
  it('finds pods by label as they become Ready, drops one deleted, and carries on after a broken watch', async () => {
    const api = await startKubernetesApi();
    cleanups.push(() => api.close());
    const port = await freePort();
    // Two pods, two addresses, one port: prefill at 127.0.0.2, decode at 127.0.0.3.
    await fakes.start({ role: 'prefill', protocol: 'vllm', host: '127.0.0.2', port });
    await fakes.start({ role: 'decode', protocol: 'vllm', host: '127.0.0.3', port, tokens: 2 });
    const { url, output, ready } = await serve(api, ['--k8s-port', String(port)]);
    // Not ready yet: a pod that is not Ready is no worker.
    api.apply(pod('decode-a', 'decode', '127.0.0.3', { ready: false }));
    api.apply(pod('prefill-a', 'prefill', '127.0.0.2'));
    await eventuallyAsync(
      async () => (await ready()).prefill_workers === 1,
      `the prefill pod found: ${output.out}${output.err}`,
    );
    expect(await ready()).toMatchObject({ ready: false, decode_workers: 0 });
    api.apply(pod('decode-a', 'decode', '127.0.0.3'));
    await eventuallyAsync(async () => (await ready()).ready === true, 'the decode pod became Ready');
    await expectServedCompletion(url);
    // A broken watch (an API server restart): the pool stays; a change after it still arrives.
    api.breakWatches();
    api.remove('decode-a', 'llm');
    await eventuallyAsync(async () => (await ready()).decode_workers === 0, 'the deleted pod drained');
    api.apply(pod('decode-b', 'decode', '127.0.0.3'));
    await eventuallyAsync(async () => (await ready()).ready === true, 'a new decode pod found after the break');
    expect(output.out).toContain('Kubernetes watch failed');
  }, 60_000);

  it("prefill and decode pods on ports of their own (as SGLang's guide runs them: 30000 and 30001) are each found on theirs", async () => {
    const api = await startKubernetesApi();
    cleanups.push(() => api.close());
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', host: '127.0.0.2' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', host: '127.0.0.3', tokens: 2 });
    const portOf = (worker: { url: string }) => new URL(worker.url).port;
    const { url, ready } = await serve(api, [
      '--k8s-prefill-port',
      portOf(prefill),
      '--k8s-decode-port',
      portOf(decode),
    ]);
    api.apply(pod('prefill-a', 'prefill', '127.0.0.2'));
    api.apply(pod('decode-a', 'decode', '127.0.0.3'));
    await eventuallyAsync(async () => (await ready()).ready === true, 'both pods found on their ports');
    await expectServedCompletion(url);
    expect([prefill.requests.length, decode.requests.length]).toEqual([1, 1]);
  }, 60_000);
});
