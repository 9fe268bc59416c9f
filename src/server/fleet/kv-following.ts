import { KvBlockIndex } from '../../kv/block-index.js';
import { loadBlockKeys } from '../../kv/block-keys.js';
import { KvSilenceWatch } from '../../kv/kv-silence.js';
import { KvEventSubscriber } from '../../kv/kv-subscriber.js';
import { libraryLogger } from '../../runtime/library-logger.js';
import type { Logger } from '../../runtime/logger.js';
import { WorkerRecords } from './worker-records.js';

/**
 * A worker whose KV cache events can be followed: its `url` (the host of its publisher, when
 * `port` says where on it), or its own endpoints; `dpRank` offsets the ports as vLLM's data
 * parallel ranks do.
 */
export interface KvWorker {
  url: string;
  /** Its own publisher (`tcp://10.0.0.5:5557`), when not at `port` on its host. */
  kvEvents?: string | undefined;
  /** Its own replay endpoint (vLLM's `replay_endpoint`), when not at `replayPort` on its host. */
  kvEventsReplay?: string | undefined;
  dpRank?: number | undefined;
  /** How the logs name it; its URL by default. */
  name?: string | undefined;
}

/** What {@link KvFollower} follows of a pool: its workers, and when they change (a `WorkerPool`). */
export interface FollowedPool<W> {
  readonly workers: readonly W[];
  onChange(listener: () => void): () => void;
}

/** Options of {@link KvFollower}. */
export interface KvFollowerOptions<W> {
  /**
   * The port each worker's engine publishes its events on, on the worker's host (vLLM's
   * `--kv-events-config` `endpoint`, SGLang's `--kv-events-config`), plus its `dpRank`.
   * Without it only workers that name their own `kvEvents` endpoint are followed.
   */
  port?: number | undefined;
  /** The port of the engines' replay socket (vLLM's `replay_endpoint`): missed events are asked for again. */
  replayPort?: number | undefined;
  /** The topic the engines publish under; all topics by default. */
  topic?: string | undefined;
  /**
   * How long a worker may go without a KV event after it was given work (a prompt it
   * computed) before its view is blind: untrusted, warned of once, counted. An idle engine
   * publishes nothing, so only work starts the clock. 0: never blind. Default 30,000 ms.
   */
  silenceMs?: number | undefined;
  /** Where following starts and subscriber trouble is logged; the library's logger by default. */
  logger?: Logger | undefined;
  /** How the logs name a worker; its `name`, else its URL. */
  name?: ((worker: W) => string) | undefined;
  /**
   * Where each worker's subscriber is kept: the proxy's book of workers (one record per
   * worker, shared with membership, health and engine load); a book of its own by default.
   *
   * @internal
   */
  records?: WorkerRecords<W & { url: string }> | undefined;
}

/**
 * What the engines hold, from their own KV cache events (as Dynamo's KV router and llm-d's
 * precise prefix scorer learn it), for routing on it: one {@link KvEventSubscriber} per
 * worker of the pools it follows, feeding one {@link KvBlockIndex} (`index`) that
 * `precisePrefix`, `kvPrefixScorer` and `cachedShare` read.
 *
 * - `start(pools)` loads the block keys and subscribes to every worker (each replays what its
 *   engine buffered, and again after a gap or a restart; the index does not trust a worker's
 *   view while it replays); workers that join a pool later are followed, and those that leave
 *   dropped from the index, as the pools change (`pool.onChange`).
 * - `close()` stops every subscriber and the following of the pools.
 *
 * It needs the optional `zeromq` package, loaded on start. It is off (no index, nothing
 * followed) when neither `port` nor any worker's own `kvEvents` says where to listen.
 *
 * @example
 * const kv = new KvFollower({ port: 5557, replayPort: 5558 });
 * const prefillWorkers = new WorkerPool(workers, { selection: precisePrefix(kv) });
 * await kv.start([prefillWorkers, decodeWorkers]);
 * // ... disaggregate({ ..., prefillWorkers, promptTokenIds: await tokenizer.tokenize(body) })
 * await kv.close();
 */
export class KvFollower<W extends KvWorker = KvWorker> {
  readonly #options: KvFollowerOptions<W>;
  readonly #logger: Logger;
  /** Its part of each followed worker's record (`kv`: the subscriber, its silence watch, whether it replays). */
  readonly #records: WorkerRecords<W & { url: string }>;
  #pools: ReadonlyArray<FollowedPool<W>> = [];
  #unfollow: Array<() => void> = [];
  #index: KvBlockIndex<W> | undefined;
  #closed = false;

  constructor(options: KvFollowerOptions<W> = {}) {
    this.#options = options;
    this.#logger = libraryLogger(options.logger);
    this.#records = options.records ?? new WorkerRecords();
  }

  /** The index, once started (undefined before, and when off): what policies read. */
  get index(): KvBlockIndex<W> | undefined {
    return this.#index;
  }

  /** Each followed worker's subscriber (its state and counts, for metrics). */
  get subscribers(): ReadonlyMap<W, KvEventSubscriber> {
    const followed = new Map<W, KvEventSubscriber>();
    for (const { worker, kv } of this.#records.values()) if (kv !== undefined) followed.set(worker, kv.subscriber);
    return followed;
  }

  /** How many times `worker`'s view went blind (no event within the silence limit after work); undefined when not followed. */
  blindCount(worker: W): number | undefined {
    return this.#records.get(worker)?.kv?.watch.blindCount;
  }

  /**
   * `worker` did work sent to it at `at` (ms since the epoch): its engine computed a prompt,
   * so it stored blocks and published them. Starts the silence clock, unless an event came
   * since `at`. Nothing for a worker not followed.
   */
  sent(worker: W, at: number = Date.now()): void {
    this.#records.get(worker)?.kv?.watch.sent(at);
  }

  /** Whether any worker of `pools` is to be followed. */
  enabled(pools: ReadonlyArray<FollowedPool<W>>): boolean {
    return this.#options.port !== undefined || pools.some((pool) => pool.workers.some((w) => w.kvEvents !== undefined));
  }

  /**
   * Loads the block keys and follows every worker of `pools`, then each worker that joins
   * them; resolves once each subscriber has replayed what its engine buffered.
   *
   * @throws {KvEventsUnavailableError} without the optional `zeromq` package.
   */
  async start(pools: ReadonlyArray<FollowedPool<W>>): Promise<void> {
    this.#pools = pools;
    if (!this.enabled(pools) || this.#closed) return;
    this.#index = new KvBlockIndex<W>(await loadBlockKeys());
    this.#unfollow = pools.map((pool) =>
      pool.onChange(() => {
        this.reconcile().catch((error: unknown) =>
          this.#logger.warn({ err: error }, 'Could not follow the KV events of a worker'),
        );
      }),
    );
    await this.reconcile();
  }

  /** Follows workers that joined the pools, drops those that left (done on every change of a pool). */
  async reconcile(): Promise<void> {
    if (this.#index === undefined || this.#closed) return;
    const current = new Set(this.#pools.flatMap((pool) => pool.workers));
    for (const record of [...this.#records.values()]) {
      const following = record.kv;
      if (following === undefined || current.has(record.worker)) continue;
      record.kv = undefined;
      this.#records.release(record.worker);
      this.#index.forget(record.worker);
      following.watch.close();
      void following.subscriber.close();
    }
    const starting: Array<Promise<void>> = [];
    for (const worker of current) {
      if (this.#records.get(worker)?.kv !== undefined) continue;
      const endpoints = this.#endpoints(worker);
      if (endpoints === undefined) continue;
      starting.push(this.#follow(worker, endpoints));
    }
    await Promise.all(starting);
  }

  /** Stops every subscriber and the following of the pools. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const unfollow of this.#unfollow.splice(0)) unfollow();
    const all: KvEventSubscriber[] = [];
    for (const record of [...this.#records.values()]) {
      if (record.kv === undefined) continue;
      all.push(record.kv.subscriber);
      record.kv.watch.close();
      record.kv = undefined;
      this.#records.release(record.worker);
    }
    await Promise.all(all.map((subscriber) => subscriber.close()));
  }

  async #follow(worker: W, endpoints: { endpoint: string; replayEndpoint?: string }): Promise<void> {
    const index = this.#index as KvBlockIndex<W>;
    const name = this.#options.name?.(worker) ?? worker.name ?? worker.url;
    const { topic } = this.#options;
    const silenceMs = this.#options.silenceMs ?? 30_000;
    // Trusted only when neither a replay is under way nor the events went silent after work.
    const trust = () => index.setTrusted(worker, !view.replaying && !view.watch.blind);
    const view = {
      replaying: false,
      watch: new KvSilenceWatch({
        silenceMs,
        onBlind: (since) => {
          trust();
          this.#logger.warn(
            {
              worker: name,
              url: worker.url,
              ...endpoints,
              silenceMs,
              sentAgoMs: Date.now() - since,
              hint: this.#blindHint(endpoints.endpoint),
            },
            'No KV cache events from a worker since it was given work: its view is untrusted, and precise-prefix routes it by load alone until an event arrives',
          );
        },
        onRecovered: (since) => {
          trust();
          this.#logger.info(
            { worker: name, url: worker.url, endpoint: endpoints.endpoint, blindForMs: Date.now() - since },
            'KV cache events from a worker again: its view is trusted',
          );
        },
      }),
    };
    const subscriber = new KvEventSubscriber({
      ...endpoints,
      ...(topic === undefined ? {} : { topic }),
      name,
      ...(endpoints.replayEndpoint === undefined ? {} : { replayHint: this.#replayHint(endpoints.replayEndpoint) }),
      logger: this.#logger,
      onBatch: (batch) => {
        for (const event of batch.events) index.apply(worker, event);
        view.watch.event();
      },
      onReset: () => index.clear(worker),
      onTrust: (trusted) => {
        view.replaying = !trusted;
        trust();
      },
    });
    this.#records.of(worker).kv = Object.assign(view, { subscriber });
    await subscriber.start();
    this.#logger.info({ worker: name, url: worker.url, ...endpoints }, 'Following the KV cache events of a worker');
  }

  /** What to check when a worker's events never come: the engine's publisher, the network, the port. */
  #blindHint(endpoint: string): string {
    const port = portOf(endpoint);
    const { topic } = this.#options;
    return questions([
      `is the engine started with --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:${port}"${topic === undefined ? '' : `, "topic": "${topic}"`}}'`,
      `is port ${port} open from the router to the worker`,
      this.#options.port === undefined
        ? "is the worker's kvEvents endpoint its publisher's"
        : `does --kv-events-port ${this.#options.port} match the port of that endpoint`,
      ...(topic === undefined ? [] : [`does --kv-events-topic ${topic} match the engine's topic`]),
    ]);
  }

  /** What to check when a worker's replays fail: the engine's replay socket and the port. */
  #replayHint(replayEndpoint: string): string {
    const port = portOf(replayEndpoint);
    return questions([
      `is the engine's --kv-events-config given a "replay_endpoint": "tcp://*:${port}"`,
      `is port ${port} open from the router to the worker`,
      this.#options.replayPort === undefined
        ? "is the worker's kvEventsReplay endpoint its replay socket's"
        : `does --kv-events-replay-port ${this.#options.replayPort} match it (without a replay socket, leave --kv-events-replay-port out)`,
    ]);
  }

  /** Where `worker` publishes: its own endpoints, else the port on its host (+ its DP rank). */
  #endpoints(worker: W): { endpoint: string; replayEndpoint?: string } | undefined {
    const { port, replayPort } = this.#options;
    const rank = worker.dpRank ?? 0;
    const host = hostOf(worker.url);
    const endpoint = worker.kvEvents ?? (port === undefined ? undefined : `tcp://${host}:${port + rank}`);
    if (endpoint === undefined) return undefined;
    const replay =
      worker.kvEventsReplay ?? (replayPort === undefined ? undefined : `tcp://${host}:${replayPort + rank}`);
    return { endpoint, ...(replay === undefined ? {} : { replayEndpoint: replay }) };
  }
}

/** Questions, one after another. */
function questions(list: readonly string[]): string {
  return list.map((question) => `${question}?`).join(' ');
}

/** The port of a ZMQ endpoint (`tcp://10.0.0.5:5557`), or `?`. */
function portOf(endpoint: string): string {
  return /:(\d+)$/.exec(endpoint)?.[1] ?? '?';
}

/** The host of a worker URL as a ZMQ endpoint names it (an IPv6 address in brackets). */
function hostOf(url: string): string {
  return new URL(url).hostname;
}
