import { existsSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type * as K8s from '@kubernetes/client-node';
import type { Logger } from '../runtime/logger.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { explainUnmatched } from './unmatched-selector.js';
import { type DiscoveredWorker, type DiscoveryRole, type MembershipTarget, reconcile } from './worker-set.js';

/**
 * SGLang's model gateway reads a prefill pod's bootstrap port from this annotation; so do we:
 * one port for every worker of the pod, or a comma-separated list, one per worker port.
 */
export const BOOTSTRAP_PORT_ANNOTATION = 'sglang.ai/bootstrap-port';

/**
 * The annotation with the HTTP ports of a pod that serves several workers (one per
 * data-parallel rank, say), comma-separated, as SGLang's model gateway (smg) reads it
 * (`service_discovery.rs`); without it a pod is one worker on the discovery's port.
 */
export const WORKER_PORTS_ANNOTATION = 'smg.ai/worker-ports';

/**
 * The annotations with the ports where a pod's engine publishes its KV cache events and
 * answers replays (its `--kv-events-config` endpoints), when they are not `--kv-events-port`:
 * one port for every worker of the pod, or one per worker port, as the bootstrap port.
 */
export const KV_EVENTS_PORT_ANNOTATION = 'disagg.ai/kv-events-port';
export const KV_EVENTS_REPLAY_PORT_ANNOTATION = 'disagg.ai/kv-events-replay-port';

/** Options of {@link KubernetesDiscovery}. */
export interface KubernetesDiscoveryOptions {
  role: DiscoveryRole;
  /** A label selector (`app=vllm,role=decode`): the pods that are workers of `role`. */
  selector: string;
  /** The namespace to watch; every namespace when undefined (which needs a ClusterRole). */
  namespace?: string | undefined;
  /** The port of the workers' HTTP server on each pod. */
  port: number;
  /**
   * Every pod's worker ports, one worker each (an InferencePool's target ports: its
   * data-parallel ranks), unless the pod's own annotation lists them; `[port]` by default.
   */
  ports?: readonly number[] | undefined;
  /** `http` (the default) or `https`. */
  scheme?: 'http' | 'https' | undefined;
  /** The annotation with a prefill pod's SGLang bootstrap port; {@link BOOTSTRAP_PORT_ANNOTATION} by default. */
  bootstrapPortAnnotation?: string | undefined;
  /** The annotation with the ports of a pod that serves several workers; {@link WORKER_PORTS_ANNOTATION} by default. */
  workerPortsAnnotation?: string | undefined;
  target: MembershipTarget;
  logger: Logger;
  /**
   * A `KubeConfig` of `@kubernetes/client-node`; by default `loadFromDefault()`: the pod's
   * service account in a cluster, else `KUBECONFIG` or `~/.kube/config`.
   */
  kubeConfig?: unknown | undefined;
  /** The first wait before watching again after the watch failed; doubles up to 30 s. 1,000 ms by default. */
  retryDelayMs?: number | undefined;
}

/** Kubernetes discovery was asked for, but `@kubernetes/client-node` is not installed. */
export class DiscoveryUnavailableError extends DisaggError {
  static override readonly is = branded<DiscoveryUnavailableError>('DiscoveryUnavailableError');
  declare readonly code: 'DISAGG_DISCOVERY_UNAVAILABLE';

  constructor(cause: unknown) {
    super(
      'DISAGG_DISCOVERY_UNAVAILABLE',
      'Kubernetes discovery needs the optional dependency @kubernetes/client-node: npm install @kubernetes/client-node@1',
      { cause },
    );
  }
}

/**
 * Kubernetes discovery was asked for outside a cluster, with no kubeconfig to reach one: the
 * official client would fall back to `http://localhost:8080` and fail on every try with an
 * error that names neither. A setting to change, so `code` is `DISAGG_CONFIG` (the setting is
 * the process's environment); a class of its own for its name in logs.
 */
class KubeconfigMissingError extends DisaggError {
  static override readonly is = branded<KubeconfigMissingError>('KubeconfigMissingError');
  declare readonly code: 'DISAGG_CONFIG';

  constructor() {
    super(
      'DISAGG_CONFIG',
      'Kubernetes discovery (--prefill-selector, --decode-selector, --inference-pool) found neither a cluster nor a kubeconfig: run it in a pod with a ServiceAccount that may list and watch pods, or set KUBECONFIG (or write ~/.kube/config)',
    );
  }
}

/** Where a pod's ServiceAccount token is mounted: the client's sign of running in a cluster. */
const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

type Pod = K8s.V1Pod;

/** What a pool side that discovery leaves empty means for the proxy (see server/readiness.ts). */
const UNMATCHED_MEANS: Readonly<Record<DiscoveryRole, string>> = {
  decode: '/ready stays false until a decode worker is in rotation',
  prefill:
    'requests are served on decode alone (with --require-disaggregation, /ready stays false) until a prefill worker is in rotation',
};

/** Whether a pod takes requests: ready, with an address, not being deleted. */
function isServing(pod: Pod): boolean {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) return false;
  if (pod.status?.podIP === undefined || pod.status.podIP === '') return false;
  return pod.status.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True') === true;
}

/**
 * Workers from Kubernetes, as SGLang's model gateway and vllm-project/router find them: the
 * pods matching a label selector (in one namespace or all), listed then watched with the
 * official client's informer; a pod is a worker while it is Ready, has an IP and is not being
 * deleted (`http://<pod IP>:<port>`, or one worker per port of its `smg.ai/worker-ports`
 * annotation), with the pod's labels (which become its workers' attributes); for SGLang prefill, its bootstrap port from the `sglang.ai/bootstrap-port`
 * annotation: one for all of its workers, or one per worker port, as smg pairs them). An
 * annotation that does not parse, or a list of bootstrap ports that does not match the worker
 * ports, is logged once and ignored, as smg does. A pod that stops being one drains. When the watch
 * fails (the API server restarts, a connection breaks) the workers stay as they are; it
 * watches again after a backoff, from where it was (a full list when the server says the
 * version is too old).
 *
 * @example
 * const discovery = new KubernetesDiscovery({ role: 'decode', selector: 'app=vllm,role=decode', namespace: 'llm', port: 8000, target, logger });
 * await discovery.start(); // the first list is in the pool
 * // ... discovery.stop() at shutdown
 */
export class KubernetesDiscovery {
  readonly #options: KubernetesDiscoveryOptions;
  #informer: (K8s.Informer<Pod> & K8s.ObjectCache<Pod>) | undefined;
  #retry: NodeJS.Timeout | undefined;
  #delayMs: number;
  #stopped = false;
  /** One reconciliation at a time; a change meanwhile asks for one more after it. */
  #round: Promise<void> | undefined;
  #again = false;
  /** Failures so far: a restart that added none has succeeded, and the backoff starts over. */
  #failures = 0;
  /** The annotation values already warned about (pod, key, value): each is said once. */
  readonly #warned = new Set<string>();
  /** Whether a list has succeeded: before it, an empty list says nothing about the selector. */
  #listed = false;
  /** Whether the selector matching no pod was said; said again only after it matched one. */
  #unmatchedSaid = false;
  /** The pods of the namespace whatever their labels: read when the selector matches none. */
  #listAll: (() => Promise<K8s.V1PodList>) | undefined;

  constructor(options: KubernetesDiscoveryOptions) {
    this.#options = options;
    this.#delayMs = options.retryDelayMs ?? 1000;
  }

  /**
   * Lists the pods, puts the serving ones in the pool, then watches. Resolves when the first
   * list is in the pool (or, when it fails, once the failure is logged: it tries again).
   *
   * @throws {DiscoveryUnavailableError} without `@kubernetes/client-node`.
   * @throws a `DisaggError` with code `DISAGG_CONFIG` when no kubeConfig is given and there is
   *   neither a kubeconfig (`KUBECONFIG`, `~/.kube/config`) nor a pod's ServiceAccount.
   */
  async start(): Promise<void> {
    const { k8s, config } = await kubernetesClient(this.#options.kubeConfig);
    const { namespace, selector } = this.#options;
    const api = config.makeApiClient(k8s.CoreV1Api);
    const path = namespace === undefined ? '/api/v1/pods' : `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`;
    const list = () =>
      namespace === undefined
        ? api.listPodForAllNamespaces({ labelSelector: selector })
        : api.listNamespacedPod({ namespace, labelSelector: selector });
    this.#listAll = () =>
      namespace === undefined
        ? api.listPodForAllNamespaces({ limit: 500 })
        : api.listNamespacedPod({ namespace, limit: 500 });
    const informer = k8s.makeInformer<Pod>(config, path, list, selector);
    this.#informer = informer;
    const changed = () => this.#changed();
    informer.on('add', changed);
    informer.on('update', changed);
    informer.on('delete', changed);
    informer.on('error', (error: unknown) => this.#failed(error));
    this.#stopped = false;
    try {
      await informer.start();
      this.#listed = true;
    } catch (error) {
      this.#failed(error);
    }
    await this.#changed();
  }

  /** Stops watching; the workers found stay in the pool. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retry !== undefined) clearTimeout(this.#retry);
    this.#retry = undefined;
    // Stopping aborts the watch's request; nothing there is worth failing a shutdown for.
    await this.#informer?.stop().catch(() => undefined);
  }

  /** The workers the pods make now. */
  #found(): DiscoveredWorker[] {
    const { port, role } = this.#options;
    const scheme = this.#options.scheme ?? 'http';
    const bootstrapKey = this.#options.bootstrapPortAnnotation ?? BOOTSTRAP_PORT_ANNOTATION;
    const portsKey = this.#options.workerPortsAnnotation ?? WORKER_PORTS_ANNOTATION;
    const workers = new Map<string, DiscoveredWorker>();
    for (const pod of this.#informer?.list() ?? []) {
      if (!isServing(pod)) continue;
      const ip = pod.status?.podIP as string;
      const annotations = pod.metadata?.annotations ?? {};
      const ports = this.#workerPorts(pod, annotations[portsKey], portsKey) ?? this.#options.ports ?? [port];
      const bootstraps =
        role === 'prefill' ? this.#portsPerWorker(pod, annotations[bootstrapKey], bootstrapKey, ports.length) : [];
      const kvPorts = this.#portsPerWorker(
        pod,
        annotations[KV_EVENTS_PORT_ANNOTATION],
        KV_EVENTS_PORT_ANNOTATION,
        ports.length,
        '--kv-events-port',
      );
      const replayPorts = this.#portsPerWorker(
        pod,
        annotations[KV_EVENTS_REPLAY_PORT_ANNOTATION],
        KV_EVENTS_REPLAY_PORT_ANNOTATION,
        ports.length,
        '--kv-events-replay-port',
      );
      const host = isIPv6(ip) ? `[${ip}]` : ip;
      const podName = pod.metadata?.name;
      // Its labels are its workers' (a revision, a zone), for routing to pair them by.
      const labels = pod.metadata?.labels ?? {};
      for (const [i, workerPort] of ports.entries()) {
        const url = `${scheme}://${host}:${workerPort}`;
        const bootstrapPort = bootstraps[i];
        const kvPort = kvPorts[i];
        const replayPort = replayPorts[i];
        const name = podName === undefined ? undefined : ports.length === 1 ? podName : `${podName}:${workerPort}`;
        workers.set(url, {
          url,
          ...(name === undefined ? {} : { name }),
          ...(bootstrapPort === undefined ? {} : { bootstrapPort }),
          ...(kvPort === undefined ? {} : { kvEvents: `tcp://${host}:${kvPort}` }),
          ...(replayPort === undefined ? {} : { kvEventsReplay: `tcp://${host}:${replayPort}` }),
          ...(Object.keys(labels).length === 0 ? {} : { labels }),
        });
      }
    }
    return [...workers.values()];
  }

  /** A pod's worker ports from its annotation (order kept, repeats dropped); undefined without one or for one that does not parse. */
  #workerPorts(pod: Pod, raw: string | undefined, key: string): number[] | undefined {
    if (raw === undefined) return undefined;
    const ports = portList(raw);
    if (ports === undefined) {
      this.#warnOnce(
        pod,
        key,
        raw,
        `is not a comma-separated list of ports; the pod is one worker on the discovery port (--k8s-port)`,
      );
      return undefined;
    }
    return [...new Set(ports)];
  }

  /**
   * A port per worker port from an annotation (a prefill pod's bootstrap port, a pod's KV event
   * ports): one for all, or one each; none for anything else, and `fallback` applies.
   */
  #portsPerWorker(
    pod: Pod,
    raw: string | undefined,
    key: string,
    workers: number,
    fallback = '--bootstrap-port',
  ): Array<number | undefined> {
    if (raw === undefined) return [];
    const ports = portList(raw);
    if (ports !== undefined && ports.length === 1) return Array.from({ length: workers }, () => ports[0]);
    if (ports !== undefined && ports.length === workers) return ports;
    this.#warnOnce(
      pod,
      key,
      raw,
      ports === undefined
        ? `is not a port or a comma-separated list of ports; ignored (${fallback} applies)`
        : `lists ${ports.length} ports for ${workers} worker ports; ignored (${fallback} applies)`,
    );
    return [];
  }

  #warnOnce(pod: Pod, key: string, value: string, problem: string): void {
    const name = `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
    const seen = `${name}\u0000${key}\u0000${value}`;
    if (this.#warned.has(seen)) return;
    this.#warned.add(seen);
    this.#options.logger.warn(
      { pod: name, annotation: key, value, role: this.#options.role },
      `The pod's annotation ${key} ${problem}`,
    );
  }

  #changed(): Promise<void> {
    if (this.#round !== undefined) {
      this.#again = true;
      return this.#round;
    }
    this.#round = (async () => {
      do {
        this.#again = false;
        if (this.#stopped) return;
        const { role, selector, target, logger } = this.#options;
        const found = this.#found();
        const { added, drained } = await reconcile(target, role, found, logger);
        if (added > 0 || drained > 0) {
          // What it found, by name: what `kubectl get pods` shows, to compare at a glance.
          const workers = found.map((worker) => worker.name ?? worker.url);
          logger.info(
            { role, selector, pods: found.length, added, drained, workers },
            'Kubernetes discovery changed the pool',
          );
        }
        this.#sayIfUnmatched();
      } while (this.#again);
    })().finally(() => {
      this.#round = undefined;
    });
    return this.#round;
  }

  /**
   * Once the selector matches no pod (until it matches one again): a warning with the pods the
   * namespace has and the labels they carry, the commonest mistake being a label.
   */
  #sayIfUnmatched(): void {
    if (!this.#listed) return;
    if ((this.#informer?.list().length ?? 0) > 0) {
      this.#unmatchedSaid = false;
      return;
    }
    if (this.#unmatchedSaid) return;
    this.#unmatchedSaid = true;
    const { role, selector, namespace, logger } = this.#options;
    const say = (explained: object) =>
      logger.warn(
        { role, namespace: namespace ?? '(all)', selector, ...explained },
        `Kubernetes discovery: the ${role} selector matches no pod; ${UNMATCHED_MEANS[role]}`,
      );
    // A list of its own (the informer's holds only the selector's pods), once per time it is said.
    (this.#listAll?.() ?? Promise.reject(new Error('not started'))).then(
      (all) =>
        say(
          explainUnmatched(
            selector,
            all.items.map((pod) => pod.metadata?.labels ?? {}),
            namespace,
          ),
        ),
      () => say({}),
    );
  }

  #failed(error: unknown): void {
    this.#failures += 1;
    if (this.#stopped || this.#retry !== undefined) return;
    const delayMs = this.#delayMs;
    this.#delayMs = Math.min(this.#delayMs * 2, 30_000);
    const { role, selector, logger } = this.#options;
    logger.warn(
      { err: error, role, selector, delayMs },
      'Kubernetes watch failed; the pool stays as it is until it resumes',
    );
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      if (this.#stopped) return;
      const failures = this.#failures;
      this.#informer?.start().then(
        () => {
          this.#listed = true;
          if (this.#failures === failures) this.#delayMs = this.#options.retryDelayMs ?? 1000;
          return this.#changed();
        },
        (failure: unknown) => this.#failed(failure),
      );
    }, delayMs);
    this.#retry.unref();
  }
}

/** Ports from `8000` or `8000, 8001`: each an integer from 1 to 65535; undefined if any is not. */
function portList(raw: string): number[] | undefined {
  const ports = raw.split(',').map((part) => part.trim());
  if (ports.some((part) => !/^\d{1,5}$/.test(part))) return undefined;
  const numbers = ports.map(Number);
  return numbers.every((port) => port >= 1 && port <= 65_535) ? numbers : undefined;
}

/**
 * `@kubernetes/client-node`, loaded on first use, and the `KubeConfig` to use: the one given,
 * else the pod's service account in a cluster, `KUBECONFIG` or `~/.kube/config`.
 *
 * @throws {DiscoveryUnavailableError} without the package.
 * @throws a `DisaggError` with code `DISAGG_CONFIG`, with none given, outside a cluster and without a kubeconfig.
 * @internal
 */
export async function kubernetesClient(given: unknown): Promise<{ k8s: typeof K8s; config: K8s.KubeConfig }> {
  let k8s: typeof K8s;
  try {
    k8s = await import('@kubernetes/client-node');
  } catch (error) {
    throw new DiscoveryUnavailableError(error);
  }
  let config = given as K8s.KubeConfig | undefined;
  if (config === undefined) {
    // The client's own order (KUBECONFIG, ~/.kube/config, the pod's ServiceAccount), checked
    // first: with none of them it would aim at http://localhost:8080 and fail on every try.
    const kubeconfig = process.env.KUBECONFIG ?? '';
    const home = process.env.HOME ?? homedir();
    if (
      kubeconfig === '' &&
      !existsSync(join(home, '.kube', 'config')) &&
      !existsSync(SERVICE_ACCOUNT_TOKEN) &&
      process.platform !== 'win32'
    ) {
      throw new KubeconfigMissingError();
    }
    config = new k8s.KubeConfig();
    config.loadFromDefault();
  }
  return { k8s, config };
}
