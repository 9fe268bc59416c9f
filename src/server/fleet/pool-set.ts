import type { EngineName } from '../../engines/registry.js';
import type { Connector } from '../../flow/connectors.js';
import type { Scheduler } from '../../routing/scheduler.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';

/** A pool of the proxy's fleet: the prefill or the decode side of a model's pool. */
export type Role = 'prefill' | 'decode';

/** A worker of either side. */
export type AnyWorker = ProxyPrefillWorker | ProxyDecodeWorker;

/**
 * The two sides of one pool: all that the fleet's bookkeeping (membership, health, metrics, KV
 * following, engine load) reads of it. A {@link ModelPool} is one; so is a plain
 * `{ prefill, decode }`, which is how a unit test or a router's own code hands over one pool.
 */
export interface PoolPair {
  readonly prefill: WorkerPool<ProxyPrefillWorker>;
  readonly decode: WorkerPool<ProxyDecodeWorker>;
}

/**
 * One pool of the fleet as the request path uses it: the model it serves, the engine its
 * workers run (and so its connector: two pools may run different engines), its two sides, the
 * scheduler that picks their workers for each attempt and its conditional disaggregation.
 *
 * @example
 * const pool: ModelPool = {
 *   model: undefined, // any model: today's single pool
 *   engine: 'vllm',
 *   connector: vllmNixl,
 *   prefill,
 *   decode,
 *   scheduler: new Scheduler({ prefillWorkers: prefill, decodeWorkers: decode }), // its deciders too
 * };
 */
export interface ModelPool extends PoolPair {
  /** The model (the body's `model`) this pool serves; undefined: any model no other pool names. */
  readonly model: string | undefined;
  /** Every model name this pool serves, when more than `model` (its aliases, an embedding model beside a chat model). */
  readonly models?: readonly string[] | undefined;
  /** The engine its workers run (`--connector`). */
  readonly engine: EngineName;
  /** How a request crosses from this pool's prefill to its decode workers. */
  readonly connector: Connector;
  /** Which of this pool's workers serve an attempt, and how (the P/D decision). */
  readonly scheduler: Scheduler<ProxyPrefillWorker, ProxyDecodeWorker>;
  /** This pool's own deadlines, over the top level's (a `pools` entry's `deadlines`). */
  readonly deadlines?: Readonly<Record<string, number>> | undefined;
  /** This pool's own migration settings, over the top level's. */
  readonly migration?: Readonly<Record<string, unknown>> | undefined;
}

/**
 * The fleet as data: its pools keyed by the model each serves. The proxy builds one pool per
 * `pools` entry (named for its models) and, when top-level workers are given, one that serves
 * any other model (`model: undefined`; the only pool of a proxy without `pools`). `poolFor`
 * answers the pool named for a request's model, else that one. Who iterates the fleet
 * (membership, health, metrics, KV following, engine load, `/ready`) iterates {@link all} or
 * {@link sides}, never a pool by name.
 *
 * @example
 * const pools = new PoolSet([{ model: undefined, engine: 'vllm', connector, prefill, decode, scheduler }]);
 * pools.poolFor('llama-3-8b'); // the pool that serves any model: no other names it
 * pools.workers('decode'); // every decode worker of every pool
 */
export class PoolSet {
  readonly #pools: readonly ModelPool[];
  readonly #byModel = new Map<string, ModelPool>();
  /** The pool of `model: undefined`, which answers a model no other pool names. */
  readonly #fallback: ModelPool | undefined;

  /** @throws {TypeError} for two pools of one model, or two that serve any model. */
  constructor(pools: readonly ModelPool[]) {
    let fallback: ModelPool | undefined;
    for (const pool of pools) {
      if (pool.model === undefined) {
        if (fallback !== undefined) throw new TypeError('Two pools serve any model: at most one may leave model out');
        fallback = pool;
      } else {
        for (const model of pool.models ?? [pool.model]) {
          if (this.#byModel.has(model)) throw new TypeError(`Two pools serve the model ${JSON.stringify(model)}`);
          this.#byModel.set(model, pool);
        }
      }
    }
    this.#pools = Object.freeze([...pools]);
    this.#fallback = fallback;
  }

  /**
   * The pool that serves `model` (a request body's `model`, whatever its type): the pool named
   * for it, else the one that serves any model; undefined when none does (a 404 for the client,
   * possible only once every pool names its model).
   */
  poolFor(model: unknown): ModelPool | undefined {
    return (typeof model === 'string' ? this.#byModel.get(model) : undefined) ?? this.#fallback;
  }

  /** The models pools are named for, in the order they were given (a pool that serves any model names none). */
  named(): string[] {
    return [...this.#byModel.keys()];
  }

  /** Whether some pool serves a model no other pool names. */
  get servesAny(): boolean {
    return this.#fallback !== undefined;
  }

  /** The pool named for `model`, if one is (never the pool that serves any model). */
  namedFor(model: unknown): ModelPool | undefined {
    return typeof model === 'string' ? this.#byModel.get(model) : undefined;
  }

  /** Every pool, in the order they were given. */
  all(): readonly ModelPool[] {
    return this.#pools;
  }

  /** Every pool's side of `role`, as `{ role, pool }` (what health probes and the gauges walk). */
  sides(): Array<{ role: Role; pool: WorkerPool<AnyWorker> }> {
    return this.#pools.flatMap((pool) => [
      { role: 'prefill' as const, pool: pool.prefill as WorkerPool<AnyWorker> },
      { role: 'decode' as const, pool: pool.decode as WorkerPool<AnyWorker> },
    ]);
  }

  /** Every pool's side of both roles, as a list of worker pools (what KV following and engine load start over). */
  workerPools(): Array<WorkerPool<AnyWorker>> {
    return this.sides().map(({ pool }) => pool);
  }

  /** Every worker of `role` in every pool, draining and down ones included. */
  workers(role: 'prefill'): ProxyPrefillWorker[];
  workers(role: 'decode'): ProxyDecodeWorker[];
  workers(role: Role): AnyWorker[];
  workers(role: Role): AnyWorker[] {
    return this.#pools.flatMap((pool) => pool[role].workers);
  }

  /** Every worker of `role` in rotation, in every pool. */
  available(role: Role): AnyWorker[] {
    return this.#pools.flatMap((pool) => pool[role].available);
  }

  /** The pool and side `worker` is in, if any. */
  poolOf(worker: AnyWorker): { pool: ModelPool; role: Role } | undefined {
    for (const pool of this.#pools) {
      if (pool.prefill.has(worker as ProxyPrefillWorker)) return { pool, role: 'prefill' };
      if (pool.decode.has(worker as ProxyDecodeWorker)) return { pool, role: 'decode' };
    }
    return undefined;
  }
}

/** The fleet as a consumer takes it: the set, or one pool's two sides (a unit test's, a router's own). */
export type Fleet = PoolSet | PoolPair;

/** The pools of `fleet`, as their two sides each. */
export function pairsOf(fleet: Fleet): readonly PoolPair[] {
  return fleet instanceof PoolSet ? fleet.all() : [fleet];
}
