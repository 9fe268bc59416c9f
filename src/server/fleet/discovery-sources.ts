// Where the pools find their workers at run time: DNS names, Kubernetes label selectors and a
// Gateway API InferencePool, the top level's and each pool's. Built with the proxy, started by
// its `start()`, stopped as its drain begins.
import { DnsDiscovery } from '../../discovery/dns-discovery.js';
import { InferencePoolDiscovery } from '../../discovery/inference-pool-discovery.js';
import { KubernetesDiscovery } from '../../discovery/kubernetes-discovery.js';
import type { DiscoveredWorker } from '../../discovery/worker-set.js';
import type { Logger } from '../../runtime/logger.js';
import type { ResolvedProxyOptions } from '../settings/types.js';
import { checkWorker } from '../settings/workers.js';
import type { Membership } from './membership.js';
import type { ModelPool, PoolSet } from './pool-set.js';

/** One source of workers. */
export type DiscoverySource = DnsDiscovery | KubernetesDiscovery | InferencePoolDiscovery;

/**
 * The discovery sources `options` ask for: the top level's (DNS, selectors, an InferencePool
 * for its decode pods) and each named pool's (DNS, selectors), each feeding its pool through
 * `membership` (a worker found is checked as a listed one is).
 *
 * @internal
 */
export function discoverySources(
  options: ResolvedProxyOptions,
  membership: Membership,
  pools: PoolSet,
  logger: Logger,
): DiscoverySource[] {
  const { discovery } = options;
  const sources = sourcesOf(options, membership, undefined, discovery, logger);
  if (discovery.inferencePool !== undefined) {
    sources.push(
      new InferencePoolDiscovery({
        role: 'decode',
        name: discovery.inferencePool,
        namespace: discovery.namespace ?? 'default',
        bootstrapPortAnnotation: discovery.bootstrapPortAnnotation,
        workerPortsAnnotation: discovery.workerPortsAnnotation,
        target: membership.targetFor('kubernetes', checkFound(options), undefined),
        logger,
        ...(options.kubeConfig === undefined ? {} : { kubeConfig: options.kubeConfig }),
      }),
    );
  }
  for (const pool of options.pools) {
    const into = pools.namedFor(pool.model[0]);
    sources.push(
      ...sourcesOf(
        options,
        membership,
        into,
        {
          prefillDns: pool.prefillDns,
          decodeDns: pool.decodeDns,
          prefillSelector: pool.prefillSelector,
          decodeSelector: pool.decodeSelector,
        },
        logger,
      ),
    );
  }
  return sources;
}

/** A found worker checked as a listed one is (its URL, or its fields when it has more). */
function checkFound(options: ResolvedProxyOptions) {
  return (role: 'prefill' | 'decode', worker: DiscoveredWorker) =>
    checkWorker(
      role,
      worker.bootstrapPort === undefined && worker.name === undefined && worker.labels === undefined
        ? worker.url
        : worker,
      options,
    );
}

/** The DNS and Kubernetes sources of one pool (`into`; the top level's when undefined). */
function sourcesOf(
  options: ResolvedProxyOptions,
  membership: Membership,
  into: ModelPool | undefined,
  given: Pick<ResolvedProxyOptions['discovery'], 'prefillDns' | 'decodeDns' | 'prefillSelector' | 'decodeSelector'>,
  logger: Logger,
): DiscoverySource[] {
  const { discovery } = options;
  const check = checkFound(options);
  const dnsTarget = membership.targetFor('dns', check, into);
  const kubernetesTarget = membership.targetFor('kubernetes', check, into);
  const sources: DiscoverySource[] = [];
  for (const role of ['prefill', 'decode'] as const) {
    const url = given[`${role}Dns`];
    if (url !== undefined) {
      const lookup = options.dnsLookup;
      sources.push(
        new DnsDiscovery({
          role,
          url,
          intervalMs: discovery.dnsIntervalMs,
          target: dnsTarget,
          logger,
          ...(lookup === undefined ? {} : { lookup }),
        }),
      );
    }
    const selector = given[`${role}Selector`];
    if (selector !== undefined) {
      sources.push(
        new KubernetesDiscovery({
          role,
          selector,
          ...(discovery.namespace === undefined ? {} : { namespace: discovery.namespace }),
          port: discovery[`${role}Port`] ?? discovery.port,
          bootstrapPortAnnotation: discovery.bootstrapPortAnnotation,
          workerPortsAnnotation: discovery.workerPortsAnnotation,
          target: kubernetesTarget,
          logger,
          ...(options.kubeConfig === undefined ? {} : { kubeConfig: options.kubeConfig }),
        }),
      );
    }
  }
  return sources;
}
