import { afterEach, describe, expect, it } from 'vitest';
import { KubernetesDiscovery } from '../../src/discovery/kubernetes-discovery.js';
import type { DiscoveredWorker, MembershipTarget } from '../../src/discovery/worker-set.js';
import { recordingLogger } from '../support/async.js';
import { eventually } from '../support/http.js';
import { kubeConfigFor, type StandInPod, startKubernetesApi } from '../support/kubernetes-api.js';

/** A pool as discovery changes it. */
function standIn() {
  const workers = new Map<string, DiscoveredWorker & { draining: boolean }>();
  const target: MembershipTarget = {
    current: () => [...workers.values()].map(({ url, draining }) => ({ url, draining })),
    add: async (_role, worker) => {
      workers.set(worker.url, { ...worker, draining: false });
    },
    drain: (_role, url) => {
      workers.delete(url); // a drained worker with nothing in flight leaves at once
    },
  };
  return { target, workers, urls: () => [...workers.keys()].sort() };
}

const pod = (name: string, ip: string, extra: Partial<StandInPod> = {}): StandInPod => ({
  name,
  namespace: 'llm',
  labels: { app: 'vllm', role: 'decode' },
  ip,
  ...extra,
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function setup(options: { namespace?: string; role?: 'prefill' | 'decode' } = {}) {
  const api = await startKubernetesApi();
  const pool = standIn();
  const logger = recordingLogger();
  const discovery = new KubernetesDiscovery({
    role: options.role ?? 'decode',
    selector: 'app=vllm,role=decode',
    ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
    port: 8000,
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

describe('KubernetesDiscovery', () => {
  it('the first list puts the serving pods of the selector in the pool before start() resolves', async () => {
    const { api, pool, discovery } = await setup({ namespace: 'llm' });
    api.apply(pod('d0', '10.1.0.1'));
    api.apply(pod('d1', '10.1.0.2'));
    api.apply(pod('not-ready', '10.1.0.3', { ready: false }));
    api.apply(pod('no-ip', '', {}));
    api.apply(pod('other-role', '10.1.0.4', { labels: { app: 'vllm', role: 'prefill' } }));
    api.apply(pod('other-namespace', '10.1.0.5', { namespace: 'elsewhere' }));
    await discovery.start();
    expect(pool.urls()).toEqual(['http://10.1.0.1:8000', 'http://10.1.0.2:8000']);
    // Named after their pods: what kubectl shows is what metrics and the admin API say.
    expect([...pool.workers.values()].map((worker) => worker.name)).toEqual(['d0', 'd1']);
    expect(api.requests[0]).toBe('GET /api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm%2Crole%3Ddecode');
  });

  it("a pod's labels are each of its workers' labels (one per worker port)", async () => {
    const { api, pool, discovery } = await setup({ namespace: 'llm' });
    const labels = { app: 'vllm', role: 'decode', 'disagg.ai/revision': 'v2' };
    api.apply(pod('d0', '10.1.0.1', { labels, annotations: { 'smg.ai/worker-ports': '8000,8001' } }));
    await discovery.start();
    expect([...pool.workers.values()].map((worker) => [worker.url, worker.labels])).toEqual([
      ['http://10.1.0.1:8000', labels],
      ['http://10.1.0.1:8001', labels],
    ]);
  });

  it('pods that appear, become ready, stop being ready, terminate or go change the pool as they happen', async () => {
    const { api, pool, discovery } = await setup({ namespace: 'llm' });
    await discovery.start();
    expect(pool.urls()).toEqual([]);
    await eventually(() => api.watching === 1, 'the watch is open');
    api.apply(pod('d0', '10.1.0.1', { ready: false }));
    api.apply(pod('d1', '10.1.0.2'));
    await eventually(() => pool.urls().length === 1, 'a ready pod joins');
    expect(pool.urls()).toEqual(['http://10.1.0.2:8000']);
    api.apply(pod('d0', '10.1.0.1'));
    await eventually(() => pool.urls().length === 2, 'a pod that becomes ready joins');
    api.apply(pod('d1', '10.1.0.2', { terminating: true }));
    await eventually(() => pool.urls().length === 1, 'a terminating pod leaves');
    api.remove('d1', 'llm');
    api.apply(pod('d0', '10.1.0.1', { ready: false }));
    await eventually(() => pool.urls().length === 0, 'a pod no longer ready leaves');
  });

  it('a watch that breaks resumes: changes made meanwhile arrive, and the pool keeps its workers', async () => {
    const { api, pool, discovery } = await setup({ namespace: 'llm' });
    api.apply(pod('d0', '10.1.0.1'));
    await discovery.start();
    await eventually(() => api.watching === 1, 'the watch is open');
    const watchesBefore = api.requests.filter((request) => request.includes('watch=true')).length;
    api.breakWatches();
    api.apply(pod('d1', '10.1.0.2')); // while nobody watches
    expect(pool.urls()).toEqual(['http://10.1.0.1:8000']);
    await eventually(() => pool.urls().length === 2, 'the change made during the break arrives');
    expect(api.requests.filter((request) => request.includes('watch=true')).length).toBeGreaterThan(watchesBefore);
    // It resumed from where it was: the last watch asks from a resourceVersion.
    expect(api.requests.filter((request) => request.includes('watch=true')).at(-1)).toMatch(/resourceVersion=1\d\d/);
  });

  it('every namespace when none is given; a prefill pod brings its bootstrap port from the annotation', async () => {
    const { api, pool, discovery } = await setup({ role: 'prefill' });
    api.apply(pod('p0', '10.1.0.1', { annotations: { 'sglang.ai/bootstrap-port': '8998' } }));
    api.apply(pod('p1', 'fd00::1', { namespace: 'other' }));
    await discovery.start();
    expect([...pool.workers.values()].map(({ url, bootstrapPort }) => ({ url, bootstrapPort }))).toEqual([
      { url: 'http://10.1.0.1:8000', bootstrapPort: 8998 },
      { url: 'http://[fd00::1]:8000', bootstrapPort: undefined },
    ]);
    expect(api.requests[0]).toMatch(/^GET \/api\/v1\/pods\?/);
  });

  it("a pod's KV event ports from its annotations: one for the pod, or one per worker port", async () => {
    const { api, pool, discovery } = await setup({ role: 'prefill' });
    api.apply(
      pod('p0', '10.1.0.1', {
        annotations: { 'disagg.ai/kv-events-port': '5557', 'disagg.ai/kv-events-replay-port': '5558' },
      }),
    );
    api.apply(
      pod('p1', '10.1.0.2', {
        annotations: { 'smg.ai/worker-ports': '9000,9001', 'disagg.ai/kv-events-port': '6000,6001' },
      }),
    );
    await discovery.start();
    expect(
      [...pool.workers.values()].map(({ url, kvEvents, kvEventsReplay }) => [url, kvEvents, kvEventsReplay]),
    ).toEqual([
      ['http://10.1.0.1:8000', 'tcp://10.1.0.1:5557', 'tcp://10.1.0.1:5558'],
      ['http://10.1.0.2:9000', 'tcp://10.1.0.2:6000', undefined],
      ['http://10.1.0.2:9001', 'tcp://10.1.0.2:6001', undefined],
    ]);
  });

  it('a pod serving several workers lists their ports (smg.ai/worker-ports); its bootstrap ports pair with them, or one serves all', async () => {
    const { api, pool, discovery } = await setup({ role: 'prefill' });
    api.apply(
      pod('p0', '10.1.0.1', {
        annotations: { 'smg.ai/worker-ports': '8000, 8001,8000', 'sglang.ai/bootstrap-port': '8998,8999' },
      }),
    );
    api.apply(
      pod('p1', '10.1.0.2', {
        annotations: { 'smg.ai/worker-ports': '9000,9001', 'sglang.ai/bootstrap-port': '7000' },
      }),
    );
    await discovery.start();
    expect([...pool.workers.values()].map(({ url, bootstrapPort }) => [url, bootstrapPort])).toEqual([
      ['http://10.1.0.1:8000', 8998],
      ['http://10.1.0.1:8001', 8999],
      ['http://10.1.0.2:9000', 7000],
      ['http://10.1.0.2:9001', 7000],
    ]);
    expect([...pool.workers.values()].map((worker) => worker.name)).toEqual([
      'p0:8000',
      'p0:8001',
      'p1:9000',
      'p1:9001',
    ]);
  });

  it('an annotation that does not parse, or bootstrap ports that do not pair with the workers, is said once and ignored', async () => {
    const { api, pool, discovery, logs } = await setup({ role: 'prefill' });
    api.apply(pod('p0', '10.1.0.1', { annotations: { 'smg.ai/worker-ports': '8000,http' } }));
    api.apply(
      pod('p1', '10.1.0.2', {
        annotations: { 'smg.ai/worker-ports': '9000,9001', 'sglang.ai/bootstrap-port': '1,2,3' },
      }),
    );
    api.apply(pod('p2', '10.1.0.3', { annotations: { 'sglang.ai/bootstrap-port': '70000' } }));
    await discovery.start();
    expect([...pool.workers.values()].map(({ url, bootstrapPort }) => [url, bootstrapPort])).toEqual([
      ['http://10.1.0.1:8000', undefined],
      ['http://10.1.0.2:9000', undefined],
      ['http://10.1.0.2:9001', undefined],
      ['http://10.1.0.3:8000', undefined],
    ]);
    const warnings = () => logs.filter((record) => String(record.message).startsWith("The pod's annotation"));
    expect(warnings().map((record) => [(record.fields as { pod?: string }).pod, record.message])).toEqual([
      [
        'llm/p0',
        "The pod's annotation smg.ai/worker-ports is not a comma-separated list of ports; the pod is one worker on the discovery port (--k8s-port)",
      ],
      [
        'llm/p1',
        "The pod's annotation sglang.ai/bootstrap-port lists 3 ports for 2 worker ports; ignored (--bootstrap-port applies)",
      ],
      [
        'llm/p2',
        "The pod's annotation sglang.ai/bootstrap-port is not a port or a comma-separated list of ports; ignored (--bootstrap-port applies)",
      ],
    ]);
    // Another change of the pool reads the pods again: nothing new to say.
    api.apply(pod('p3', '10.1.0.4'));
    await eventually(() => pool.workers.size === 5, 'the new pod joined');
    expect(warnings()).toHaveLength(3);
  });

  it('an API server that cannot be reached: start() resolves, the failure is logged and tried again with a growing wait', async () => {
    const api = await startKubernetesApi();
    const url = api.url;
    await api.close();
    const pool = standIn();
    const logger = recordingLogger();
    const discovery = new KubernetesDiscovery({
      role: 'decode',
      selector: 'app=vllm,role=decode',
      namespace: 'llm',
      port: 8000,
      target: pool.target,
      logger: logger.logger,
      kubeConfig: kubeConfigFor(url),
      retryDelayMs: 20,
    });
    cleanups.push(() => discovery.stop());
    await discovery.start();
    expect(pool.urls()).toEqual([]);
    const failures = () => logger.records.filter((record) => record.message?.includes('Kubernetes watch failed'));
    await eventually(() => failures().length >= 3, 'tried again');
    const delays = failures().map((record) => (record.fields as { delayMs: number }).delayMs);
    expect(delays.slice(0, 3)).toEqual([20, 40, 80]);
  });
  it('a selector that matches no pod is said once, until it matches again, with the labels the namespace carries', async () => {
    const { api, pool, discovery, logs } = await setup({ namespace: 'llm' });
    api.apply(pod('p0', '10.1.0.1', { labels: { app: 'vllm', role: 'prefill' } }));
    api.apply(pod('p1', '10.1.0.2', { labels: { app: 'vllm', role: 'prefill' } }));
    api.apply(pod('r0', '10.1.0.3', { labels: { app: 'redis' } }));
    api.apply(pod('elsewhere', '10.1.0.4', { namespace: 'other' }));
    const unmatched = () => logs.filter((record) => record.message?.includes('selector matches no pod'));
    await discovery.start();
    await eventually(() => unmatched().length === 1, 'the empty selector is said');
    expect(unmatched()[0]).toMatchObject({
      level: 'warn',
      message:
        'Kubernetes discovery: the decode selector matches no pod; /ready stays false until a decode worker is in rotation',
      fields: {
        role: 'decode',
        namespace: 'llm',
        selector: 'app=vllm,role=decode',
        podsInNamespace: 3,
        labelsCarried: ['app=vllm,role=prefill (2)', 'app=redis (1)'],
        hint: "no pod has role=decode (role is 'prefill' on them); pods in the namespace llm carry app=vllm,role=prefill (2), app=redis (1)",
      },
    });
    // It matches: what was found is said by name; then it matches none again, and says so again.
    await eventually(() => api.watching === 1, 'the watch is open');
    api.apply(pod('d0', '10.1.0.5'));
    await eventually(() => pool.urls().length === 1, 'the decode pod joins');
    const changed = logs.filter((record) => record.message === 'Kubernetes discovery changed the pool');
    expect(changed.at(-1)?.fields).toMatchObject({ role: 'decode', pods: 1, added: 1, workers: ['d0'] });
    expect(unmatched()).toHaveLength(1);
    api.remove('d0', 'llm');
    await eventually(() => unmatched().length === 2, 'said again once it matches none again');
  });

  it('a prefill selector that matches no pod in an empty namespace: served on decode alone, the namespace has none', async () => {
    const { discovery, logs } = await setup({ namespace: 'lm', role: 'prefill' });
    await discovery.start();
    await eventually(
      () =>
        logs.some((record) =>
          (record.fields as { hint?: string }).hint?.includes('the namespace lm has no pod at all'),
        ),
      'the empty namespace is said',
    );
    expect(logs.find((record) => record.level === 'warn')?.message).toBe(
      'Kubernetes discovery: the prefill selector matches no pod; requests are served on decode alone (with --require-disaggregation, /ready stays false) until a prefill worker is in rotation',
    );
  });
});
