import { afterEach, describe, expect, it } from 'vitest';
import { InferencePoolDiscovery, targetsOf } from '../../src/discovery/inference-pool-discovery.js';
import type { DiscoveredWorker, MembershipTarget } from '../../src/discovery/worker-set.js';
import { recordingLogger } from '../support/async.js';
import { eventually } from '../support/http.js';
import { kubeConfigFor, startKubernetesApi } from '../support/kubernetes-api.js';

function standIn() {
  const workers = new Map<string, DiscoveredWorker>();
  const target: MembershipTarget = {
    current: () => [...workers.values()].map(({ url }) => ({ url, draining: false })),
    add: async (_role, worker) => {
      workers.set(worker.url, worker);
    },
    drain: (_role, url) => {
      workers.delete(url);
    },
  };
  return { target, urls: () => [...workers.keys()].sort() };
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function setup() {
  const api = await startKubernetesApi();
  const pool = standIn();
  const logger = recordingLogger();
  const discovery = new InferencePoolDiscovery({
    role: 'decode',
    name: 'vllm-decode',
    namespace: 'llm',
    target: pool.target,
    logger: logger.logger,
    kubeConfig: kubeConfigFor(api.url),
    retryDelayMs: 20,
  });
  cleanups.push(async () => {
    await discovery.stop();
    await api.close();
  });
  return { api, pool, discovery, logs: logger.records };
}

describe('InferencePoolDiscovery', () => {
  it("finds the pool's pods by its selector, one worker per target port (its data-parallel ranks)", async () => {
    const { api, pool, discovery } = await setup();
    api.applyInferencePool({
      name: 'vllm-decode',
      namespace: 'llm',
      matchLabels: { app: 'vllm', role: 'decode' },
      targetPorts: [8000, 8001],
    });
    api.apply({ name: 'd0', namespace: 'llm', labels: { app: 'vllm', role: 'decode' }, ip: '10.1.0.1' });
    api.apply({ name: 'p0', namespace: 'llm', labels: { app: 'vllm', role: 'prefill' }, ip: '10.1.0.2' });
    await discovery.start();
    expect(pool.urls()).toEqual(['http://10.1.0.1:8000', 'http://10.1.0.1:8001']);
    // And it watches them.
    api.apply({ name: 'd1', namespace: 'llm', labels: { app: 'vllm', role: 'decode' }, ip: '10.1.0.3' });
    await eventually(() => pool.urls().length === 4, 'the new pod found');
    expect(api.requests).toContain(
      'GET /apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/vllm-decode',
    );
  });

  it('reads the pool again while it is not there, saying so, and finds its pods once it is', async () => {
    const { api, pool, discovery, logs } = await setup();
    api.apply({ name: 'd0', namespace: 'llm', labels: { app: 'vllm' }, ip: '10.1.0.1' });
    await discovery.start();
    expect(pool.urls()).toEqual([]);
    expect(
      logs.some((record) => String(record.message).startsWith('Cannot read the InferencePool llm/vllm-decode')),
    ).toBe(true);
    api.applyInferencePool({
      name: 'vllm-decode',
      namespace: 'llm',
      matchLabels: { app: 'vllm' },
      targetPorts: [8000],
    });
    await eventually(() => pool.urls().length === 1, 'found once the pool exists');
  });
});

describe('targetsOf', () => {
  it("takes an InferencePool's matchLabels as a selector and its targetPorts as ports", () => {
    expect(
      targetsOf({ spec: { selector: { matchLabels: { app: 'vllm', tier: 'a' } }, targetPorts: [{ number: 8000 }] } }),
    ).toEqual({ selector: 'app=vllm,tier=a', ports: [8000] });
  });

  it('refuses a pool that selects nothing or names no port', () => {
    expect(() => targetsOf({ spec: { selector: { matchLabels: {} }, targetPorts: [{ number: 8000 }] } })).toThrow(
      /matchLabels/,
    );
    expect(() => targetsOf({ spec: { selector: { matchLabels: { app: 'x' } }, targetPorts: [] } })).toThrow(
      /targetPorts/,
    );
    expect(() =>
      targetsOf({ spec: { selector: { matchLabels: { app: 'x' } }, targetPorts: [{ number: 0 }] } }),
    ).toThrow(/targetPorts/);
    expect(() => targetsOf(undefined)).toThrow();
  });
});
