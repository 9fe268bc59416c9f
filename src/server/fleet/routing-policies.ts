import { type Decider, decidersConsume, decidersFrom, decidersOf } from '../../routing/decider-plugins.js';
import type { EngineLoadSource, KvIndexSource } from '../../routing/kv-prefix.js';
import { createPolicy, type PolicyName, policyConsumes, type RoutingServices } from '../../routing/registry.js';
import type { RoutingInput } from '../../routing/routing-input.js';
import { type Consumption, mergeConsumption } from '../../routing/services.js';
import { LatencyPredictor } from '../../routing/slo/latency-predictor.js';
import type { Selection, WorkerPool } from '../../routing/worker-pool.js';
import type { ResolvedProxyOptions } from '../settings/types.js';

/**
 * The selection of one pool for `--prefill-policy` or `--decode-policy`: the registry's
 * plugin of that name, made for this pool alone (a cache-aware tree describes one pool's caches).
 */
export function selectionFor<W extends { url: string }>(
  name: PolicyName,
  routing: ResolvedProxyOptions['routing'],
  services: RoutingServices<W> = {},
): Selection<W> {
  return createPolicy<W>(name, routing, services);
}

/**
 * One pool's selection: the policy of your own given for `role`, made with the services, else
 * the registry's plugin of the configured name.
 */
export function poolSelection<W extends { url: string }>(
  role: 'prefill' | 'decode',
  options: Pick<ResolvedProxyOptions, 'prefillPolicy' | 'decodePolicy' | 'customPolicies' | 'routing'>,
  services: RoutingServices<W>,
): Selection<W> {
  const own = options.customPolicies[role] as ((services: RoutingServices<W>) => Selection<W>) | undefined;
  return own?.(services) ?? selectionFor<W>(options[`${role}Policy`], options.routing, services);
}

/** A policy of your own may read anything the proxy has: each kind is fed where configured. */
const ANYTHING: Consumption = { 'kv-index': 'optional', tokens: 'optional', 'engine-load': 'optional' };

/**
 * What one pool's policy reads, as its plugin declares it (a policy of your own: anything).
 *
 * @example
 * consumptionOf('decode', resolved)['engine-load']; // 'required' for scored with kv-usage
 */
export function consumptionOf(
  role: 'prefill' | 'decode',
  options: Pick<ResolvedProxyOptions, 'prefillPolicy' | 'decodePolicy' | 'customPolicies' | 'routing'>,
): Consumption {
  if (options.customPolicies[role] !== undefined) return ANYTHING;
  return policyConsumes(options[`${role}Policy`], options.routing);
}

/**
 * What both pools' policies and the deciders read: the proxy tokenizes prompts, follows KV
 * events into the index and scrapes the engines' load only for a kind listed here.
 *
 * @example
 * consumedBy({ ...resolved, routing: { ...resolved.routing, deciders: [{ name: 'my-load-decider' }] } })['engine-load']; // as it declares
 */
export function consumedBy(
  options: Pick<ResolvedProxyOptions, 'prefillPolicy' | 'decodePolicy' | 'customPolicies' | 'routing'>,
): Consumption {
  return mergeConsumption([
    consumptionOf('prefill', options),
    consumptionOf('decode', options),
    decidersConsume(decidersOf(options.routing)),
  ]);
}

/**
 * The services the policies get: only the kinds they declared (a policy that did not declare
 * the KV index does not get one to read by accident). For `latency`, a new predictor reading the
 * KV index and the engines' load where they are declared too: whoever serves the requests feeds
 * it (`services.latency`), the proxy from each request's events.
 *
 * @example
 * routingServices(consumedBy(options), () => kv.index, (worker) => scraper.loadOf(worker));
 */
export function routingServices<W extends { url: string }>(
  consumed: Consumption,
  kvIndex: KvIndexSource<W>,
  engineLoad: { loadOf: EngineLoadSource<W> } | undefined,
): RoutingServices<W> {
  const services: RoutingServices<W> = {
    ...(consumed['kv-index'] === undefined ? {} : { kvIndex }),
    ...(consumed['engine-load'] === undefined || engineLoad === undefined
      ? {}
      : { engineLoad: (worker: W) => engineLoad.loadOf(worker) }),
  };
  if (consumed.latency === undefined) return services;
  return {
    ...services,
    latency: new LatencyPredictor<W>({ kvIndex: services.kvIndex, engineLoad: services.engineLoad }),
  };
}

/**
 * One pool's P/D decider, of its routing settings' deciders (`decidersOf`), each reading
 * the services its plugin declares, the pool's workers in rotation and what the decode pool's
 * policy knows of the caches; undefined when none is configured.
 */
export function poolDecider<W extends { url: string }>(
  routing: ResolvedProxyOptions['routing'],
  pools: { prefill: WorkerPool<W> | undefined; decode: WorkerPool<W> },
  decodeSelection: Selection<W>,
  services: RoutingServices<W>,
): Decider | undefined {
  const settings = decidersOf(routing);
  if (settings.length === 0) return undefined;
  // Asked through the policy's own interface: whatever it knows the caches by (a tree of what
  // this router sent, the engines' KV events), not its private state.
  const policy = typeof decodeSelection === 'object' ? decodeSelection : undefined;
  const cachedShare = policy?.cachedShare?.bind(policy);
  const { prefill, decode } = pools;
  return decidersFrom<W>(settings, {
    ...services,
    ...(prefill === undefined ? {} : { prefillWorkers: () => prefill.available, prefillLoad: prefill.load }),
    decodeWorkers: () => decode.available,
    decodeLoad: decode.load,
    ...(cachedShare === undefined
      ? {}
      : { decodeCachedShare: (input: RoutingInput) => cachedShare(decode.available, input) }),
  });
}
