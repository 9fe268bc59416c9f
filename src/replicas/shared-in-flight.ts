// What replicas of one router share so that they route as one: each replica's requests in
// flight per worker, through the Redis they already share for tenants' limits. Each replica
// writes its own counts as an entry of its own that expires (a replica that dies ages out)
// and reads the others' in the same round trip; policies see their own leases plus the sum.
import { hostname } from 'node:os';
import type { Redis } from 'ioredis';
import type { LoadView } from '../routing/routing-policy.js';
import type { Logger } from '../runtime/logger.js';
import { FailureLog } from '../runtime/repeated-log.js';
import { sharedRedis } from './redis-client.js';

// KEYS[1]: the prefix. ARGV: this replica's id, the entries' time to live (ms), then its counts
// as key, count pairs. Replaces this replica's entry, marks it alive (on Redis's clock, so that
// replicas' own clocks do not matter), forgets replicas silent past the time to live, and
// answers the number of replicas alive then every other replica's counts, as pairs.
const SYNC = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, me, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local own = prefix .. ':replica:' .. me
local alive = prefix .. ':replicas'
redis.call('DEL', own)
if #ARGV > 2 then
  redis.call('HSET', own, unpack(ARGV, 3))
  redis.call('PEXPIRE', own, ttl)
end
redis.call('ZADD', alive, now, me)
redis.call('ZREMRANGEBYSCORE', alive, '-inf', now - ttl)
redis.call('PEXPIRE', alive, ttl * 4)
local ids = redis.call('ZRANGE', alive, 0, -1)
local out = {#ids}
for _, id in ipairs(ids) do
  if id ~= me then
    local fields = redis.call('HGETALL', prefix .. ':replica:' .. id)
    for i = 1, #fields do out[#out + 1] = fields[i] end
  end
end
return out
`;

/**
 * How many requests in flight a worker another replica found down counts as here: enough that
 * load-balancing policies pass over it while any other worker is within that many requests,
 * not so many that it is never tried (this replica's own probes decide whether it is in rotation).
 */
export const SUSPECT_LOAD = 64;

/** A worker reported down, as the script stores it beside the counts (a key no worker key starts with). */
const DOWN = '!down ';

/** Options of {@link SharedInFlight}. */
export interface SharedInFlightOptions {
  /** The Redis every replica shares (`redis://host:port/db`). */
  url: string;
  /** This replica's counts now, by worker key (a key every replica gives the same worker). */
  local(): Iterable<readonly [string, number]>;
  /**
   * The workers this replica's health checks took out of rotation now, by the same keys: the
   * other replicas count each as {@link SUSPECT_LOAD} more requests in flight until their own
   * probes say, so that they try it less meanwhile. None by default.
   */
  down?: (() => Iterable<string>) | undefined;
  /** This replica's name in Redis; its host name, process id and a random part by default. */
  replicaId?: string | undefined;
  /** The keys' prefix; `disagg:in-flight` by default (replicas that balance together share it). */
  prefix?: string | undefined;
  /** How often the counts are written and read, in ms; 250 by default. */
  intervalMs?: number | undefined;
  /** How long a replica's counts count without a new write, in ms; 8 intervals by default. */
  ttlMs?: number | undefined;
  /** How long one round trip may take, and a connection, in ms; the interval by default. */
  timeoutMs?: number | undefined;
  logger?: Logger | undefined;
  /** Each round's outcome and the replicas alive then (this one included), for metrics. */
  onSync?: ((outcome: 'synced' | 'failed', replicas: number) => void) | undefined;
}

/**
 * Replicas' requests in flight per worker, shared through Redis: every `intervalMs` this
 * replica writes its counts (`local()`) and reads the others', in one atomic round trip on
 * Redis's clock. {@link viewOf} gives a `WorkerPool` the others' counts (`peerLoad`), so that its
 * policies (least-in-flight, the load scorers, cache-aware's balance) see the whole fleet's
 * load. The workers a replica's health checks took out (`down`) go along: the others count each
 * as {@link SUSPECT_LOAD} more requests until their own probes decide. Staleness: another
 * replica's lease or verdict shows here within two intervals (500 ms by default);
 * a replica that stops (killed, partitioned) ages out within `ttlMs` plus an interval. While
 * Redis cannot be reached, or answers slower than `timeoutMs`, the others' counts are dropped
 * (each replica routes on its own view, as without Redis), logged at most once per 10 s with
 * how many rounds failed and once more when a round succeeds, and `onSync` hears `failed`. Keys are made in the script: one Redis, not a Redis Cluster.
 *
 * @example
 * const workers = [{ url: 'http://decode-0:8200' }, { url: 'http://decode-1:8200' }];
 * const shared = new SharedInFlight({
 *   url: 'redis://redis:6379',
 *   // This replica's own leases, keyed as every replica keys the worker.
 *   local: (): Array<readonly [string, number]> => workers.map((w) => [w.url, decode.inFlight(w)] as const),
 * });
 * const decode: WorkerPool<{ url: string }> = new WorkerPool(workers, {
 *   selection: 'least-in-flight',
 *   peerLoad: shared.viewOf((w: { url: string }) => w.url),
 * });
 * shared.start();
 * // on shutdown
 * await shared.close();
 */
export class SharedInFlight {
  readonly #options: SharedInFlightOptions;
  readonly #id: string;
  readonly #prefix: string;
  readonly #intervalMs: number;
  readonly #ttlMs: number;
  readonly #redis: Promise<Redis>;
  #others = new Map<string, number>();
  #replicas = 1;
  #syncedAt: number | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  readonly #log: FailureLog;
  #closed = false;
  /** The first connection's outcome: the first round waits for it (bounded by its timeout), not a Redis down. */
  #firstConnect: Promise<void> | undefined;

  /** Connects in the background (a Redis down at start is a Redis down, as later); {@link start} begins the rounds. */
  constructor(options: SharedInFlightOptions) {
    this.#options = options;
    this.#id = options.replicaId ?? `${hostname()}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
    this.#prefix = options.prefix ?? 'disagg:in-flight';
    this.#intervalMs = options.intervalMs ?? 250;
    this.#ttlMs = options.ttlMs ?? this.#intervalMs * 8;
    this.#log = new FailureLog(options.logger, {
      failure:
        'Cannot share requests in flight with the other replicas (Redis is unreachable): each balances on its own until Redis answers',
      recovery: 'Sharing requests in flight with the other replicas again: Redis answers',
    });
    const timeoutMs = options.timeoutMs ?? this.#intervalMs;
    const client = sharedRedis(options.url, timeoutMs, { disaggSyncInFlight: { keys: 1, lua: SYNC } });
    this.#redis = client.redis;
    this.#firstConnect = client.connected;
  }

  /** This replica's name in Redis. */
  get replicaId(): string {
    return this.#id;
  }

  /** The replicas alive at the last round that reached Redis, this one included (1 before any, or while Redis is down). */
  get replicas(): number {
    return this.#replicas;
  }

  /** How long ago the others' counts were read, in ms; undefined before the first round that reached Redis. */
  get lagMs(): number | undefined {
    return this.#syncedAt === undefined ? undefined : Date.now() - this.#syncedAt;
  }

  /** The other replicas' counts on each worker, by `keyOf` (what `local()` keys it by). */
  viewOf<W>(keyOf: (worker: W) => string): LoadView<W> {
    return { inFlight: (worker) => this.#others.get(keyOf(worker)) ?? 0 };
  }

  /** Starts the rounds: one now, then one every interval (a round still under way is not overlapped). */
  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => {
      this.#running ??= this.sync().finally(() => {
        this.#running = undefined;
      });
    }, this.#intervalMs);
    this.#timer.unref();
    this.#running ??= this.sync().finally(() => {
      this.#running = undefined;
    });
  }

  /** One round: this replica's counts written, the others' read. Never throws (a failure is logged and counted). */
  async sync(): Promise<void> {
    const pairs: string[] = [];
    for (const [key, count] of this.#options.local()) if (count > 0) pairs.push(key, String(count));
    for (const key of this.#options.down?.() ?? []) pairs.push(`${DOWN}${key}`, '1');
    let answer: Array<string | number>;
    try {
      const redis = await this.#redis;
      await this.#firstConnect;
      const sync = (redis as unknown as { disaggSyncInFlight: (...args: unknown[]) => Promise<Array<string | number>> })
        .disaggSyncInFlight;
      answer = await sync.call(redis, this.#prefix, this.#id, this.#ttlMs, ...pairs);
    } catch (error) {
      this.#failed(error);
      return;
    }
    const others = new Map<string, number>();
    for (let i = 1; i + 1 < answer.length; i += 2) {
      const field = String(answer[i]);
      // A worker some other replica found down counts as busy here, once however many said so.
      const [key, count] = field.startsWith(DOWN)
        ? [field.slice(DOWN.length), SUSPECT_LOAD]
        : [field, Number(answer[i + 1])];
      if (field.startsWith(DOWN) && this.#suspect(others, key)) continue;
      others.set(key, (others.get(key) ?? 0) + count);
    }
    this.#others = others;
    this.#replicas = Math.max(1, Number(answer[0]));
    this.#syncedAt = Date.now();
    this.#options.onSync?.('synced', this.#replicas);
    this.#log.recovered({ replicas: this.#replicas });
  }

  /** Stops the rounds, takes this replica's counts out of Redis (best effort) and disconnects. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
    this.#log.flush();
    const redis = await this.#redis;
    await Promise.resolve(
      redis.multi().del(`${this.#prefix}:replica:${this.#id}`).zrem(`${this.#prefix}:replicas`, this.#id).exec(),
    ).catch(() => {});
    redis.disconnect();
  }

  /** Whether `key` was already counted as down in this round's `others` (marked by a sentinel entry). */
  #suspect(others: Map<string, number>, key: string): boolean {
    const mark = `${DOWN}${key}`;
    if (others.has(mark)) return true;
    others.set(mark, 0);
    return false;
  }

  #failed(error: unknown): void {
    // The others' counts go stale at once: each replica routes on its own view meanwhile.
    this.#others = new Map();
    this.#replicas = 1;
    this.#options.onSync?.('failed', 1);
    this.#log.failed({ err: error });
  }
}
