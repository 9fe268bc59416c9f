// The fleet's pools from the settings: one per `pools` entry (its models, workers, engine and
// policies, the rest the top level's), and the top-level workers as the pool of every other
// model. Apart from the proxy's core so that a pool is built in one place.
import { type EngineName, engineOf } from '../../engines/registry.js';
import type { RoutingInput } from '../../routing/routing-input.js';
import type { LoadView } from '../../routing/routing-policy.js';
import { Scheduler } from '../../routing/scheduler.js';
import type { RoutingServices } from '../../routing/services.js';
import type { SessionBindingStore } from '../../routing/session-bindings.js';
import { type Selection, WorkerPool } from '../../routing/worker-pool.js';
import type { ResolvedPool } from '../settings/pool-entries.js';
import type { ResolvedProxyOptions } from '../settings/types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { ModelPool } from './pool-set.js';
import { poolDecider, poolSelection } from './routing-policies.js';

/**
 * The options of a pool's policies: its own where it names them, the top level's otherwise.
 *
 * @internal
 */
export function policiesOf(options: ResolvedProxyOptions, pool: ResolvedPool): ResolvedProxyOptions {
  return {
    ...options,
    routing: { ...options.routing, ...(pool.routing as Partial<ResolvedProxyOptions['routing']> | undefined) },
    prefillPolicy: pool.prefillPolicy ?? options.prefillPolicy,
    decodePolicy: pool.decodePolicy ?? options.decodePolicy,
    // A pool's policy of its own (a program's) is the top level's only where the pool names none.
    customPolicies: {
      prefill: pool.prefillPolicy === undefined ? options.customPolicies.prefill : undefined,
      decode: pool.decodePolicy === undefined ? options.customPolicies.decode : undefined,
    },
  };
}

/**
 * One pool of the fleet: a `pools` entry (its models, workers, engine and policies, the rest
 * the top level's), or, without one, the top-level workers serving any model. A pool without
 * prefill workers serves every request on decode alone.
 *
 * @internal
 */
export function modelPool(
  options: ResolvedProxyOptions,
  services: RoutingServices<ProxyPrefillWorker | ProxyDecodeWorker>,
  pool?: ResolvedPool,
  peers?: {
    prefill: LoadView<ProxyPrefillWorker>;
    decode: LoadView<ProxyDecodeWorker>;
    bindings?: SessionBindingStore | undefined;
  },
): ModelPool {
  const own = pool === undefined ? options : policiesOf(options, pool);
  const engine = pool?.connector ?? options.connector;
  const prefillWorkers =
    pool === undefined ? options.prefill : withBootstrapPort(pool.prefill, engine, options.bootstrapPort);
  const prefill = new WorkerPool(prefillWorkers, {
    selection: poolSelection<ProxyPrefillWorker>('prefill', own, withBindings('prefill', services, peers?.bindings)),
    peerLoad: peers?.prefill,
    promptTokens: tokensOf,
  });
  const decodeSelection = poolSelection<ProxyDecodeWorker>(
    'decode',
    own,
    withBindings('decode', services, peers?.bindings),
  );
  const decode = new WorkerPool(pool?.decode ?? options.decode, {
    selection: decodeSelection,
    peerLoad: peers?.decode,
    promptTokens: tokensOf,
  });
  // The pool's P/D deciders, of its routing settings, each fed what its plugin declares.
  const decider = poolDecider<ProxyPrefillWorker | ProxyDecodeWorker>(
    own.routing,
    { prefill, decode },
    decodeSelection as Selection<ProxyPrefillWorker | ProxyDecodeWorker>,
    services,
  );
  return {
    model: pool?.model[0],
    ...(pool === undefined ? {} : { models: pool.model }),
    engine,
    connector: engineOf(engine).connector,
    prefill,
    decode,
    scheduler: new Scheduler({
      prefillWorkers: prefill,
      decodeWorkers: decode,
      // Named in a 503's message when none of its workers is in rotation.
      model: pool?.model[0],
      // A pool named for its models may have no prefill worker at all: served on decode alone.
      noPrefillWorker:
        options.requireDisaggregation &&
        (pool === undefined ||
          pool.prefill.length > 0 ||
          pool.prefillDns !== undefined ||
          pool.prefillSelector !== undefined)
          ? 'fail'
          : 'aggregate',
      decider,
    }),
    ...(pool?.deadlines === undefined ? {} : { deadlines: pool.deadlines }),
    ...(pool?.migration === undefined ? {} : { migration: pool.migration }),
  };
}

/**
 * A pool side's routing services: with its role (what the SLO plugins judge a worker of it by)
 * and the replicas' session bindings, where they are shared.
 */
function withBindings<W extends { url: string }>(
  role: 'prefill' | 'decode',
  services: RoutingServices<ProxyPrefillWorker | ProxyDecodeWorker>,
  store: SessionBindingStore | undefined,
): RoutingServices<W> {
  const own = { ...(services as unknown as RoutingServices<W>), role };
  return store === undefined ? own : { ...own, sessionBindings: { role, store, keyOf: (worker: W) => worker.url } };
}

/** SGLang's prefill workers of a pool with the proxy's bootstrap port, unless they name their own. */
function withBootstrapPort(workers: ProxyPrefillWorker[], engine: EngineName, port: number): ProxyPrefillWorker[] {
  if (!engineOf(engine).prefillBootstrap) return workers;
  return workers.map((worker) => ({ ...worker, bootstrapPort: worker.bootstrapPort ?? port }));
}

/** A lease's prompt tokens, for the scaling signal of the backlog (`disagg_inflight_prompt_tokens`). */
const tokensOf = (input: RoutingInput | undefined): number => input?.promptTokens ?? 0;
