import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

/** A KubeConfig of the official client pointing at a stand-in API server. */
export function kubeConfigFor(url: string): KubeConfig {
  const config = new KubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'stand-in', server: url, skipTLSVerify: true }],
    users: [{ name: 'disagg', token: 'stand-in-token' }],
    contexts: [{ name: 'stand-in', cluster: 'stand-in', user: 'disagg' }],
    currentContext: 'stand-in',
  });
  return config;
}

/** A pod as the stand-in serves it: what discovery reads of one. */
export interface StandInPod {
  name: string;
  namespace?: string;
  labels: Record<string, string>;
  annotations?: Record<string, string>;
  ip?: string;
  ready?: boolean;
  terminating?: boolean;
}

/**
 * A stand-in Kubernetes API server for pods: list (`GET /api/v1[/namespaces/{ns}]/pods`, with
 * an equality label selector) and watch (`?watch=true`: one JSON event per line, `ADDED`,
 * `MODIFIED`, `DELETED`, from the given resourceVersion), as the real one speaks them, so
 * that the official client's informer runs against it unchanged. `breakWatches()` cuts every
 * open watch (a connection reset); `requests` records what was asked.
 */
export async function startKubernetesApi() {
  const pods = new Map<string, { pod: StandInPod; version: number }>();
  const history: Array<{ version: number; type: string; pod: StandInPod }> = [];
  const watches = new Set<{ res: ServerResponse; namespace: string | undefined; selector: Record<string, string> }>();
  const requests: string[] = [];
  let version = 100;

  const key = (pod: StandInPod) => `${pod.namespace ?? 'default'}/${pod.name}`;
  const matches = (pod: StandInPod, namespace: string | undefined, selector: Record<string, string>) =>
    (namespace === undefined || (pod.namespace ?? 'default') === namespace) &&
    Object.entries(selector).every(([label, value]) => pod.labels[label] === value);

  function object(pod: StandInPod, at: number) {
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

  function emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: StandInPod): void {
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
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    /** Adds a pod, or changes one (same namespace and name). */
    apply(pod: StandInPod): void {
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
    /** How many watches are open now. */
    get watching(): number {
      return watches.size;
    },
    /** Cuts every open watch as a reset connection would. */
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
