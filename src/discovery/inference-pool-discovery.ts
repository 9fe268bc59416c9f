import type * as K8s from '@kubernetes/client-node';
import type { Logger } from '../runtime/logger.js';
import { KubernetesDiscovery, type KubernetesDiscoveryOptions, kubernetesClient } from './kubernetes-discovery.js';

/** The Gateway API Inference Extension's group and version of `InferencePool`. */
const GROUP = 'inference.networking.k8s.io';
const VERSION = 'v1';

/** Options of {@link InferencePoolDiscovery}: those of pod discovery, the selector and ports taken from the pool. */
export interface InferencePoolDiscoveryOptions extends Omit<KubernetesDiscoveryOptions, 'selector' | 'port' | 'ports'> {
  /** The InferencePool's name. */
  name: string;
  /** Its namespace (also the pods'). */
  namespace: string;
  logger: Logger;
}

/** What discovery reads of an InferencePool: the pods it selects and their ports. */
export interface InferencePoolTargets {
  readonly selector: string;
  readonly ports: readonly number[];
}

/**
 * The `InferencePool`'s pods and ports as pod discovery takes them: `matchLabels` as an
 * equality selector, `targetPorts` as the worker ports of every pod.
 *
 * @throws {TypeError} for a pool without labels or ports (which the CRD forbids).
 * @example
 * targetsOf({ spec: { selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: 8000 }, { number: 8001 }] } });
 * // { selector: 'app=vllm', ports: [8000, 8001] }
 */
export function targetsOf(pool: unknown): InferencePoolTargets {
  const spec = (pool as { spec?: { selector?: { matchLabels?: unknown }; targetPorts?: unknown } } | undefined)?.spec;
  const labels = Object.entries((spec?.selector?.matchLabels ?? {}) as Record<string, unknown>);
  const ports = (Array.isArray(spec?.targetPorts) ? spec.targetPorts : []).map(
    (port) => (port as { number?: unknown })?.number,
  );
  if (labels.length === 0 || labels.some(([, value]) => typeof value !== 'string')) {
    throw new TypeError('its spec.selector.matchLabels names no labels');
  }
  if (
    ports.length === 0 ||
    ports.some((port) => !Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535)
  ) {
    throw new TypeError('its spec.targetPorts lists no port numbers');
  }
  return { selector: labels.map(([key, value]) => `${key}=${value}`).join(','), ports: ports as number[] };
}

/**
 * The pods of a Gateway API `InferencePool` (`inference.networking.k8s.io/v1`), found as
 * {@link KubernetesDiscovery} finds pods, by the pool's own selector, each a worker per target
 * port. The pool is read when discovery starts; while it cannot be read (not there yet, the API
 * unreachable, no permission) the failure is logged and it is read again, backing off to 30 s.
 * A change of the pool's selector or ports takes a restart.
 *
 * @example
 * const discovery = new InferencePoolDiscovery({ role: 'decode', name: 'vllm-decode', namespace: 'llm', target, logger });
 * await discovery.start();
 */
export class InferencePoolDiscovery {
  readonly #options: InferencePoolDiscoveryOptions;
  #pods: KubernetesDiscovery | undefined;
  #retry: NodeJS.Timeout | undefined;
  #delayMs: number;
  #stopped = false;

  constructor(options: InferencePoolDiscoveryOptions) {
    this.#options = options;
    this.#delayMs = options.retryDelayMs ?? 1000;
  }

  /**
   * Reads the pool, then lists and watches its pods; resolves once the first list is in the
   * pool, or the failure to read it is logged (it is read again).
   *
   * @throws {DiscoveryUnavailableError} without `@kubernetes/client-node`.
   */
  async start(): Promise<void> {
    const { k8s, config } = await kubernetesClient(this.#options.kubeConfig);
    this.#stopped = false;
    await this.#read(k8s, config);
  }

  /** Stops reading the pool and watching its pods; the workers found stay. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retry !== undefined) clearTimeout(this.#retry);
    this.#retry = undefined;
    await this.#pods?.stop();
  }

  async #read(k8s: typeof K8s, config: K8s.KubeConfig): Promise<void> {
    const { name, namespace, logger } = this.#options;
    const where = `InferencePool ${namespace}/${name}`;
    let targets: InferencePoolTargets;
    try {
      const api = config.makeApiClient(k8s.CustomObjectsApi);
      const pool: unknown = await api.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: 'inferencepools',
        name,
      });
      try {
        targets = targetsOf(pool);
      } catch (error) {
        throw new Error(`${where}: ${(error as Error).message}`);
      }
    } catch (error) {
      if (this.#stopped) return;
      logger.error(
        { err: error, inferencePool: `${namespace}/${name}`, retryInMs: this.#delayMs },
        `Cannot read the ${where}; trying again`,
      );
      this.#retry = setTimeout(() => void this.#read(k8s, config), this.#delayMs);
      this.#retry.unref();
      this.#delayMs = Math.min(this.#delayMs * 2, 30_000);
      return;
    }
    if (this.#stopped) return;
    logger.info(
      { inferencePool: `${namespace}/${name}`, selector: targets.selector, ports: targets.ports },
      `Finding the ${where}'s pods`,
    );
    const { name: _name, ...options } = this.#options;
    this.#pods = new KubernetesDiscovery({
      ...options,
      selector: targets.selector,
      port: targets.ports[0] as number,
      ports: targets.ports,
    });
    await this.#pods.start();
  }
}
