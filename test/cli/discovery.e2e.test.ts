import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeKubeconfig } from '../../src/testing/fake-kubernetes-api.js';
import { serveBin } from '../support/bin.js';
import { eventuallyAsync, expectServedCompletion, fakeWorkers } from '../support/http.js';
import { type StandInPod, startKubernetesApi } from '../support/kubernetes-api.js';

const _root = fileURLToPath(new URL('../..', import.meta.url));
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
  writeFileSync(path, fakeKubeconfig(url));
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
  const served = await serveBin(
    [
      '--connector',
      'vllm',
      '--prefill-selector',
      'app=vllm,role=prefill',
      '--decode-selector',
      'app=vllm,role=decode',
      '--k8s-namespace',
      'llm',
      ...args,
    ],
    { env: { KUBECONFIG: kubeconfig(api.url) }, cleanups },
  );
  expect(served.output.out).not.toContain('DiscoveryUnavailableError');
  const ready = async () => (await fetch(`${served.url}/ready`)).json() as Promise<Record<string, unknown>>;
  return { url: served.url, output: served.output, ready };
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

  it("a pool's own selector finds its model's pods, beside the main pods, each model served by its own", async () => {
    const api = await startKubernetesApi();
    cleanups.push(() => api.close());
    const port = await freePort();
    await fakes.start({ role: 'prefill', protocol: 'vllm', host: '127.0.0.2', port });
    const main = await fakes.start({ role: 'decode', protocol: 'vllm', host: '127.0.0.3', port, tokens: 2 });
    const small = await fakes.start({ role: 'decode', protocol: 'vllm', host: '127.0.0.4', port, model: 'small' });
    const pools = JSON.stringify([{ model: 'small', decodeSelector: 'app=vllm,role=decode-small' }]);
    const { url, output, ready } = await serve(api, ['--k8s-port', String(port), '--pools', pools]);
    api.apply(pod('prefill-a', 'prefill', '127.0.0.2'));
    api.apply(pod('decode-a', 'decode', '127.0.0.3'));
    api.apply({ ...pod('small-a', 'decode', '127.0.0.4'), labels: { app: 'vllm', role: 'decode-small' } });
    await eventuallyAsync(
      async () => (await ready()).decode_workers === 2,
      `both decode pods found: ${output.out}${output.err}`,
    );
    await expectServedCompletion(url);
    const answer = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'small', prompt: 'x', max_tokens: 1 }),
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    expect(small.requests.map((record) => record.body.model)).toEqual(['small']);
    expect(main.requests.every((record) => record.body.model === 'm')).toBe(true);
  });
});
