// The tenants' per-minute limits kept in Redis, so that every replica of the router enforces
// one limit: the same sliding minute of one-second buckets as `rate-window`, checked and
// counted by one script (atomic in Redis, on Redis's own clock, so replicas agree).
import type { Redis, RedisOptions } from 'ioredis';
import type { Logger } from '../runtime/logger.js';
import { FailureLog } from '../runtime/repeated-log.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import type { OverLimit } from './rate-window.js';
import type { Tenant } from './tenants.js';

// KEYS: the requests' and the tokens' bucket prefixes. ARGV: requests allowed (-1: none),
// tokens allowed (-1: none), this request's tokens, 1 to count it (0: a correction of tokens).
// Answers {0} when counted, else {1 or 2 (which limit), used, seconds until it frees up}.
const TAKE = `
local now = tonumber(redis.call('TIME')[1])
local reqAllowed, tokAllowed, tokens, counting = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
if not counting then
  redis.call('INCRBY', KEYS[2] .. now, tokens)
  redis.call('EXPIRE', KEYS[2] .. now, 70)
  return {0}
end
local function window(prefix)
  local buckets, used = {}, 0
  for back = 0, 59 do
    local value = tonumber(redis.call('GET', prefix .. (now - back)) or '0')
    buckets[back + 1] = value
    used = used + value
  end
  return buckets, used
end
local function freesIn(buckets, used, amount, allowed)
  local freed = 0
  for seconds = 1, 60 do
    freed = freed + buckets[61 - seconds]
    if used - freed + amount <= allowed then return seconds end
  end
  return 60
end
if reqAllowed >= 0 then
  local buckets, used = window(KEYS[1])
  if used + 1 > reqAllowed then return {1, used, freesIn(buckets, used, 1, reqAllowed)} end
end
if tokAllowed >= 0 then
  local buckets, used = window(KEYS[2])
  if used + tokens > tokAllowed then return {2, used, freesIn(buckets, used, tokens, tokAllowed)} end
end
redis.call('INCR', KEYS[1] .. now)
redis.call('EXPIRE', KEYS[1] .. now, 70)
redis.call('INCRBY', KEYS[2] .. now, tokens)
redis.call('EXPIRE', KEYS[2] .. now, 70)
return {0}
`;

const LIMITS = [undefined, 'requestsPerMinute', 'tokensPerMinute'] as const;

/** What a shared store does while Redis cannot be reached: let requests in, or refuse them. */
export type RedisFailurePolicy = 'open' | 'closed';

/**
 * Redis could not be asked and `--redis-failure closed`: the request is refused (503), as its
 * tenant's limits could not be checked. `code`: `DISAGG_LIMITS_UNAVAILABLE`.
 */
export class LimitsUnavailableError extends DisaggError {
  static override readonly is = branded<LimitsUnavailableError>('LimitsUnavailableError');
  declare readonly code: 'DISAGG_LIMITS_UNAVAILABLE';

  constructor(message: string, options?: { cause?: unknown }) {
    super('DISAGG_LIMITS_UNAVAILABLE', message, options);
  }
}

/**
 * The tenants' per-minute limits in one Redis that every replica shares. `take` and `correct`
 * are `MinuteWindows`'s, asynchronous. While Redis cannot be reached (each call gives up
 * after `timeoutMs`), `failure: 'open'` lets requests in uncounted and `'closed'` refuses them
 * with a {@link LimitsUnavailableError}; either way it is logged (at most once per 10 s, with
 * how many calls failed, and once more when Redis answers again) and `onFailure` called per
 * request (for a metric). `close()` disconnects.
 *
 * Tolerance: requests are counted exactly (one atomic script per request, on Redis's clock);
 * tokens are an estimate until the answer corrects them, so a tenant may pass its tokens per
 * minute by what its requests under way will have used beyond their estimates. Keys are made
 * in the script: one Redis (or a primary with replicas), not a Redis Cluster.
 */
export class RedisWindows {
  /** The client, once `ioredis` is loaded (it is, only when a Redis is asked for). */
  readonly #redis: Promise<Redis>;
  /** The first connection's outcome: a call made while it is under way waits for it (bounded by its timeout). */
  #firstConnect: Promise<void> | undefined;
  /** The first connection is over (ready or failed): from then on a call never waits for one. */
  #firstSettled = false;
  readonly #prefix: string;
  readonly #failure: RedisFailurePolicy;
  readonly #onFailure: ((error: unknown) => void) | undefined;
  readonly #log: FailureLog;

  /** Connects (in the background: a Redis down at start is a Redis down, as later) to `url` (`redis://host:port/db`). */
  constructor(url: string, options: RedisWindowsOptions) {
    this.#prefix = options.prefix ?? 'disagg:limits';
    this.#failure = options.failure;
    this.#onFailure = options.onFailure;
    this.#log = new FailureLog(options.logger, {
      failure:
        this.#failure === 'open'
          ? "Redis is unreachable: the tenants' limits are not enforced until it answers again (--redis-failure open)"
          : "Redis is unreachable: limited tenants' requests are refused until it answers again (--redis-failure closed)",
      recovery: "Redis answers again: the tenants' limits are enforced",
    });
    this.#redis = import('ioredis').then(({ Redis: Client }) => {
      const settings: RedisOptions = {
        lazyConnect: true,
        // Fail fast while disconnected rather than queue requests behind a reconnect.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        commandTimeout: options.timeoutMs ?? 250,
        connectTimeout: options.timeoutMs ?? 250,
        retryStrategy: (times) => Math.min(50 * times, 1000),
      };
      const redis = new Client(url, settings);
      // Reported per call (and logged once), not as the client's own unhandled errors.
      redis.on('error', () => {});
      // ioredis's connect() settles when the client is ready (past its TCP connect and ready
      // check) or has failed.
      this.#firstConnect = redis.connect().then(
        () => {
          this.#firstSettled = true;
        },
        () => {
          this.#firstSettled = true;
        },
      );
      redis.defineCommand('disaggTake', { numberOfKeys: 2, lua: TAKE });
      return redis;
    });
  }

  /** See `MinuteWindows.take`: the same answer, from the shared count. */
  async take(tenant: Tenant, tokens: number): Promise<OverLimit | undefined> {
    if (tenant.requestsPerMinute === undefined && tenant.tokensPerMinute === undefined) return undefined;
    let answer: [number, number?, number?];
    try {
      answer = (await this.#call(tenant, tokens, true)) as [number, number?, number?];
    } catch (error) {
      this.#failed(error);
      if (this.#failure === 'closed') {
        throw new LimitsUnavailableError('The rate limits cannot be checked (Redis is unreachable); try again later', {
          cause: error,
        });
      }
      return undefined;
    }
    this.#recovered();
    const [which, used = 0, retryAfterS = 1] = answer;
    const limit = LIMITS[which];
    if (limit === undefined) return undefined;
    return { limit, allowed: tenant[limit] as number, used, retryAfterS };
  }

  /** See `MinuteWindows.correct`; a correction Redis does not take is dropped (and logged). */
  async correct(tenant: Tenant, tokens: number): Promise<void> {
    if (tenant.tokensPerMinute === undefined || tokens === 0) return;
    try {
      await this.#call(tenant, Math.round(tokens), false);
      this.#recovered();
    } catch (error) {
      this.#failed(error);
    }
  }

  /** Disconnects from Redis. */
  async close(): Promise<void> {
    this.#log.flush();
    (await this.#redis).disconnect();
  }

  async #call(tenant: Tenant, tokens: number, counting: boolean): Promise<unknown> {
    const redis = await this.#redis;
    // Right after start the connection is still being made (connecting, connected but not yet
    // ready): a request then is not a Redis down. Only the first connection is waited for.
    if (!this.#firstSettled) await this.#firstConnect;
    // A hash tag of the tenant, so that a tenant's keys would share a slot.
    const base = `${this.#prefix}:{${tenant.name}}`;
    const take = (redis as unknown as { disaggTake: (...args: unknown[]) => Promise<unknown> }).disaggTake;
    return take.call(
      redis,
      `${base}:r:`,
      `${base}:t:`,
      tenant.requestsPerMinute ?? -1,
      tenant.tokensPerMinute ?? -1,
      Math.round(tokens),
      counting ? '1' : '0',
    );
  }

  #failed(error: unknown): void {
    this.#onFailure?.(error);
    this.#log.failed({ err: error, failure: this.#failure });
  }

  #recovered(): void {
    this.#log.recovered();
  }
}

/** Options of {@link RedisWindows}. */
export interface RedisWindowsOptions {
  failure: RedisFailurePolicy;
  /** The keys' prefix; `disagg:limits` by default (replicas that share limits share it). */
  prefix?: string | undefined;
  /** How long one call may take, and a connection, in ms; 250 by default. */
  timeoutMs?: number | undefined;
  logger?: Logger | undefined;
  onFailure?: ((error: unknown) => void) | undefined;
}
