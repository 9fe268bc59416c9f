import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A kubeconfig file's text for a fake API at `url`, for `KUBECONFIG` (the official client, as
 * `disagg serve` discovery uses it, reads it unchanged).
 */
export function fakeKubeconfig(url: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters: [{ name: fake, cluster: { server: "${url}", insecure-skip-tls-verify: true } }]`,
    'users: [{ name: disagg, user: { token: fake-token } }]',
    'contexts: [{ name: fake, context: { cluster: fake, user: disagg } }]',
    'current-context: fake',
    '',
  ].join('\n');
}

/** A pod as the fake API serves it: what discovery reads of one (ready unless `ready: false`). */
export interface FakePod {
  name: string;
  namespace?: string | undefined;
  labels: Record<string, string>;
  annotations?: Record<string, string> | undefined;
  ip?: string | undefined;
  ready?: boolean | undefined;
  terminating?: boolean | undefined;
}

/**
 * A Gateway API Inference Extension `InferencePool` (`inference.networking.k8s.io/v1`) as the
 * fake API serves it: the pods it selects and their ports.
 */
export interface FakeInferencePool {
  name: string;
  namespace?: string | undefined;
  /** `spec.selector.matchLabels`. */
  matchLabels: Record<string, string>;
  /** `spec.targetPorts[].number`: several are one pod's data-parallel ranks. */
  targetPorts: number[];
  /** `spec.endpointPickerRef.name`. */
  endpointPicker?: string | undefined;
}

/** A running fake Kubernetes API: its URL, the pods it serves, and faults to give it. */
export interface FakeKubernetesApi {
  /** Where it listens (plain HTTP). */
  readonly url: string;
  /** Every request it was sent, as `METHOD path?query`. */
  readonly requests: string[];
  /** Adds a pod, or changes one (same namespace and name): a watch sees ADDED or MODIFIED. */
  apply(pod: FakePod): void;
  /** Adds or replaces an InferencePool (`GET /apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools/{name}`). */
  applyInferencePool(pool: FakeInferencePool): void;
  /** Deletes a pod: a watch sees DELETED. */
  remove(name: string, namespace?: string): void;
  /** How many watches are open now. */
  readonly watching: number;
  /** Cuts every open watch as a reset connection would (an API server restart). */
  breakWatches(): void;
  /** Stops listening and cuts every watch. */
  close(): Promise<void>;
}

/**
 * A fake Kubernetes API server for pods: list (`GET /api/v1[/namespaces/{ns}]/pods`, with
 * an equality label selector) and watch (`?watch=true`: one JSON event per line, `ADDED`,
 * `MODIFIED`, `DELETED`, from the given resourceVersion), as the real one speaks them, so
 * that the official client's informer runs against it unchanged. `breakWatches()` cuts every
 * open watch (a connection reset); `requests` records what was asked. Plain HTTP on
 * 127.0.0.1 and a port of its own unless told; no authentication.
 *
 * @example
 * import { writeFileSync } from 'node:fs';
 * const api = await startFakeKubernetesApi();
 * api.apply({ name: 'prefill-0', labels: { app: 'vllm', role: 'prefill' }, ip: '127.0.0.1' });
 * writeFileSync('kubeconfig', fakeKubeconfig(api.url)); // then KUBECONFIG=kubeconfig disagg serve --prefill-selector ...
 */
export async function startFakeKubernetesApi(
  options: { host?: string; port?: number } = {},
): Promise<FakeKubernetesApi> {
  const pods = new Map<string, { pod: FakePod; version: number }>();
  const history: Array<{ version: number; type: string; pod: FakePod }> = [];
  const watches = new Set<{ res: ServerResponse; namespace: string | undefined; selector: Record<string, string> }>();
  const requests: string[] = [];
  const inferencePools = new Map<string, FakeInferencePool>();
  let version = 100;

  const key = (pod: FakePod) => `${pod.namespace ?? 'default'}/${pod.name}`;
  const matches = (pod: FakePod, namespace: string | undefined, selector: Record<string, string>) =>
    (namespace === undefined || (pod.namespace ?? 'default') === namespace) &&
    Object.entries(selector).every(([label, value]) => pod.labels[label] === value);

  function object(pod: FakePod, at: number) {
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: pod.name,
        namespace: pod.namespace ?? 'default',
        uid: `uid-${key(pod)}`,
        resourceVersion: String(at),
        labels: pod.labels,
        annotations: pod.annotations ?? {},
        ...(pod.terminating ? { deletionTimestamp: '2026-12-01T00:00:00Z' } : {}),
      },
      status: {
        phase: 'Running',
        ...(pod.ip === undefined ? {} : { podIP: pod.ip }),
        conditions: [{ type: 'Ready', status: pod.ready === false ? 'False' : 'True' }],
      },
    };
  }

  function emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: FakePod): void {
    version += 1;
    history.push({ version, type, pod });
    for (const watch of watches) {
      if (matches(pod, watch.namespace, watch.selector)) {
        watch.res.write(`${JSON.stringify({ type, object: object(pod, version) })}\n`);
      }
    }
  }

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://api');
    requests.push(`${req.method} ${url.pathname}${url.search}`);
    const poolPath = /^\/apis\/inference\.networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/inferencepools\/([^/]+)$/.exec(
      url.pathname,
    );
    if (req.method === 'GET' && poolPath !== null) {
      const pool = inferencePools.get(`${poolPath[1]}/${poolPath[2]}`);
      res.writeHead(pool === undefined ? 404 : 200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify(
          pool === undefined
            ? { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 }
            : inferencePoolObject(pool),
        ),
      );
      return;
    }
    const path = /^\/api\/v1(?:\/namespaces\/([^/]+))?\/pods$/.exec(url.pathname);
    if (req.method !== 'GET' || path === null) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', status: 'Failure', code: 404 }));
      return;
    }
    const namespace = path[1];
    const selector = Object.fromEntries(
      (url.searchParams.get('labelSelector') ?? '')
        .split(',')
        .filter((term) => term !== '')
        .map((term) => term.split('=') as [string, string]),
    );
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.flushHeaders();
      const from = Number(url.searchParams.get('resourceVersion') ?? '0');
      for (const event of history) {
        if (event.version > from && matches(event.pod, namespace, selector)) {
          res.write(`${JSON.stringify({ type: event.type, object: object(event.pod, event.version) })}\n`);
        }
      }
      const watch = { res, namespace, selector };
      watches.add(watch);
      res.on('close', () => watches.delete(watch));
      return;
    }
    const items = [...pods.values()]
      .filter(({ pod }) => matches(pod, namespace, selector))
      .map(({ pod, version: at }) => object(pod, at));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ apiVersion: 'v1', kind: 'PodList', metadata: { resourceVersion: String(version) }, items }),
    );
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, resolve);
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    requests,
    applyInferencePool(pool: FakeInferencePool): void {
      inferencePools.set(`${pool.namespace ?? 'default'}/${pool.name}`, pool);
    },
    apply(pod: FakePod): void {
      const existed = pods.has(key(pod));
      pods.set(key(pod), { pod, version: version + 1 });
      emit(existed ? 'MODIFIED' : 'ADDED', pod);
    },
    remove(name: string, namespace = 'default'): void {
      const entry = pods.get(`${namespace}/${name}`);
      if (entry === undefined) return;
      pods.delete(`${namespace}/${name}`);
      emit('DELETED', entry.pod);
    },
    get watching(): number {
      return watches.size;
    },
    breakWatches(): void {
      for (const watch of watches) watch.res.socket?.destroy();
    },
    async close(): Promise<void> {
      for (const watch of watches) watch.res.socket?.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** An InferencePool as the API server returns it. */
function inferencePoolObject(pool: FakeInferencePool) {
  return {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name: pool.name, namespace: pool.namespace ?? 'default', resourceVersion: '1' },
    spec: {
      selector: { matchLabels: pool.matchLabels },
      targetPorts: pool.targetPorts.map((number) => ({ number })),
      ...(pool.endpointPicker === undefined
        ? {}
        : { endpointPickerRef: { name: pool.endpointPicker, port: { number: 9002 }, failureMode: 'FailClose' } }),
    },
  };
}
