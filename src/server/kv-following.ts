import type { WorkerPool } from '../flow/worker-pool.js';
import { KvBlockIndex } from '../kv/block-index.js';
import { loadBlockKeys } from '../kv/block-keys.js';
import { KvEventSubscriber } from '../kv/kv-subscriber.js';
import type { Logger } from '../runtime/logger.js';
import type { KvEventEndpoints, ResolvedProxyOptions } from './options.js';

type Worker = { url: string; name?: string; dpRank?: number } & KvEventEndpoints;

/**
 * The proxy's view of what the engines hold: one {@link KvEventSubscriber} per worker of
 * both pools (at `--kv-events-port` on the worker's host, or the worker's own `kvEvents`
 * endpoint) feeding one {@link KvBlockIndex}, which `precise-prefix` reads. Workers that join
 * or leave at run time are followed or dropped at the next {@link reconcile} (membership calls
 * it on every change). Off when no endpoint is configured.
 *
 * @internal
 */
export class KvFollowing {
  readonly #config: ResolvedProxyOptions['kvEvents'];
  readonly #logger: Logger;
  readonly #name: (worker: Worker) => string;
  readonly #subscribers = new Map<Worker, KvEventSubscriber>();
  #pools: ReadonlyArray<WorkerPool<Worker>> = [];
  #index: KvBlockIndex<Worker> | undefined;
  #closed = false;

  constructor(config: ResolvedProxyOptions['kvEvents'], logger: Logger, name: (worker: Worker) => string) {
    this.#config = config;
    this.#logger = logger;
    this.#name = name;
  }

  /** The index, once started (undefined before, and when off): what policies read. */
  get index(): KvBlockIndex<Worker> | undefined {
    return this.#index;
  }

  /** Each followed worker's subscriber, for metrics. */
  get subscribers(): ReadonlyMap<Worker, KvEventSubscriber> {
    return this.#subscribers;
  }

  /** Whether any worker of `pools` is to be followed. */
  enabled(pools: ReadonlyArray<WorkerPool<Worker>>): boolean {
    return this.#config.port !== undefined || pools.some((pool) => pool.workers.some((w) => w.kvEvents !== undefined));
  }

  /**
   * Loads the block keys and follows every worker of `pools`; resolves once each subscriber
   * has replayed what its engine buffered.
   *
   * @throws {KvEventsUnavailableError} without the optional `zeromq` package.
   */
  async start(pools: ReadonlyArray<WorkerPool<Worker>>): Promise<void> {
    this.#pools = pools;
    if (!this.enabled(pools)) return;
    this.#index = new KvBlockIndex<Worker>(await loadBlockKeys());
    await this.reconcile();
  }

  /** Follows workers that joined, drops those that left. */
  async reconcile(): Promise<void> {
    if (this.#index === undefined || this.#closed) return;
    const current = new Set(this.#pools.flatMap((pool) => pool.workers));
    for (const [worker, subscriber] of this.#subscribers) {
      if (current.has(worker)) continue;
      this.#subscribers.delete(worker);
      this.#index.forget(worker);
      void subscriber.close();
    }
    const starting: Array<Promise<void>> = [];
    for (const worker of current) {
      if (this.#subscribers.has(worker)) continue;
      const endpoints = this.#endpoints(worker);
      if (endpoints === undefined) continue;
      starting.push(this.#follow(worker, endpoints));
    }
    await Promise.all(starting);
  }

  /** Stops every subscriber. */
  async close(): Promise<void> {
    this.#closed = true;
    const all = [...this.#subscribers.values()];
    this.#subscribers.clear();
    await Promise.all(all.map((subscriber) => subscriber.close()));
  }

  async #follow(worker: Worker, endpoints: { endpoint: string; replayEndpoint?: string }): Promise<void> {
    const index = this.#index as KvBlockIndex<Worker>;
    const name = this.#name(worker);
    const subscriber = new KvEventSubscriber({
      ...endpoints,
      ...(this.#config.topic === undefined ? {} : { topic: this.#config.topic }),
      logger: this.#logger,
      onBatch: (batch) => {
        for (const event of batch.events) index.apply(worker, event);
      },
      onReset: () => index.clear(worker),
      onTrust: (trusted) => index.setTrusted(worker, trusted),
    });
    this.#subscribers.set(worker, subscriber);
    await subscriber.start();
    this.#logger.info({ worker: name, ...endpoints }, 'Following the KV cache events of a worker');
  }

  /** Where `worker` publishes: its own endpoints, else the port on its host (+ its DP rank). */
  #endpoints(worker: Worker): { endpoint: string; replayEndpoint?: string } | undefined {
    const { port, replayPort } = this.#config;
    const rank = worker.dpRank ?? 0;
    const host = hostOf(worker.url);
    const endpoint = worker.kvEvents ?? (port === undefined ? undefined : `tcp://${host}:${port + rank}`);
    if (endpoint === undefined) return undefined;
    const replay =
      worker.kvEventsReplay ?? (replayPort === undefined ? undefined : `tcp://${host}:${replayPort + rank}`);
    return { endpoint, ...(replay === undefined ? {} : { replayEndpoint: replay }) };
  }
}

/** The host of a worker URL as a ZMQ endpoint names it (an IPv6 address in brackets). */
function hostOf(url: string): string {
  return new URL(url).hostname;
}
