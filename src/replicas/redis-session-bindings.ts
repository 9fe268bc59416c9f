// Session bindings in the Redis the replicas share: a session's worker per pool side, the first
// binding winning, refreshed on use, replaced only when it names a worker that left.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { BindingRole, SessionBinding, SessionBindingStore } from '../routing/session-bindings.js';
import type { Logger } from '../runtime/logger.js';
import { FailureLog } from '../runtime/repeated-log.js';
import { sharedRedis } from './redis-client.js';

// KEYS[1]: the binding. ARGV: the worker chosen, the worker it may replace ('' for none), the
// time to live (ms). Binds when unbound, or when still bound to the worker it replaces;
// otherwise keeps (and refreshes) what is there. Answers the binding now.
const BIND = `
local current = redis.call('GET', KEYS[1])
if current == false or (ARGV[2] ~= '' and current == ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return ARGV[1]
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return current
`;

/** How long an unused session keeps its binding: half an hour, refreshed by each of its requests. */
export const SESSION_BINDING_TTL_MS = 30 * 60 * 1000;

/** The longest session key kept as it is in a binding's key; a longer one is kept as its digest. */
const MAX_PLAIN_SESSION_KEY = 128;

/**
 * A session key as a binding's key holds it: itself when short and plain (readable with
 * `redis-cli`), else its SHA-256 in hex. A client chooses the key (a header of up to 16 KB),
 * and each binding lives half an hour in the Redis every replica shares; a brace would also
 * move the key's hash tag.
 *
 * @example storedSessionKey('conv-42'); // 'conv-42'
 */
export function storedSessionKey(sessionKey: string): string {
  if (sessionKey.length <= MAX_PLAIN_SESSION_KEY && !/[{}]/.test(sessionKey)) return sessionKey;
  return `sha256-${createHash('sha256').update(sessionKey).digest('hex')}`;
}

/** Options of {@link RedisSessionBindings}. */
export interface RedisSessionBindingsOptions {
  url: string;
  /** The keys' prefix; `disagg:sessions` by default. */
  prefix?: string | undefined;
  /** How long an unused binding lasts; {@link SESSION_BINDING_TTL_MS} by default. */
  ttlMs?: number | undefined;
  /** How long a lookup may take before the request is routed without it, in ms; 100 by default. */
  timeoutMs?: number | undefined;
  logger?: Logger | undefined;
  /** A lookup or bind that did not reach Redis (for a metric). */
  onFailure?: (() => void) | undefined;
}

/**
 * {@link SessionBindingStore} in one Redis: a session bound to a worker per side (`GETEX` with
 * its time to live refreshed on each lookup; `SET` only when unbound, or still bound to a
 * worker that left, in one script). A lookup that fails or takes past `timeoutMs` answers no
 * binding (the request is routed by hashing, as every replica would), logged at most once per
 * 10 s with how many failed, and once more when Redis answers again.
 *
 * @example
 * const store = new RedisSessionBindings({ url: 'redis://redis:6379' });
 * const pool = new WorkerPool(workers, { selection: sessionAffinity({ bindings: { role: 'prefill', store, keyOf: (w: { url: string }) => w.url } }) });
 */
export class RedisSessionBindings implements SessionBindingStore {
  readonly #options: RedisSessionBindingsOptions;
  readonly #prefix: string;
  readonly #ttlMs: number;
  readonly #redis: Promise<Redis>;
  #firstConnect: Promise<void> | undefined;
  readonly #log: FailureLog;

  constructor(options: RedisSessionBindingsOptions) {
    this.#options = options;
    this.#prefix = options.prefix ?? 'disagg:sessions';
    this.#ttlMs = options.ttlMs ?? SESSION_BINDING_TTL_MS;
    this.#log = new FailureLog(options.logger, {
      failure:
        'Cannot read or write session bindings (Redis is unreachable): sessions go by hashing until Redis answers',
      recovery: 'Session bindings are shared again: Redis answers',
    });
    const timeoutMs = options.timeoutMs ?? 100;
    const client = sharedRedis(options.url, timeoutMs, { disaggBindSession: { keys: 1, lua: BIND } });
    this.#redis = client.redis;
    this.#firstConnect = client.connected;
  }

  async lookup(sessionKey: string): Promise<SessionBinding> {
    try {
      const redis = await this.#redis;
      await this.#firstConnect;
      const keys = (['prefill', 'decode'] as const).map((role) => this.#key(sessionKey, role));
      const answers = await redis.pipeline(keys.map((key) => ['getex', key, 'PX', String(this.#ttlMs)])).exec();
      const binding: SessionBinding = {};
      (['prefill', 'decode'] as const).forEach((role, i) => {
        const [error, value] = answers?.[i] ?? [new Error('no answer'), undefined];
        if (error !== null) throw error;
        if (typeof value === 'string') binding[role] = value;
      });
      this.#recovered();
      return binding;
    } catch (error) {
      this.#failed(error);
      return {};
    }
  }

  bind(sessionKey: string, role: BindingRole, worker: string, replacing: string | undefined): void {
    void (async () => {
      try {
        const redis = await this.#redis;
        await this.#firstConnect;
        const bind = (redis as unknown as { disaggBindSession: (...args: unknown[]) => Promise<unknown> })
          .disaggBindSession;
        await bind.call(redis, this.#key(sessionKey, role), worker, replacing ?? '', this.#ttlMs);
        this.#recovered();
      } catch (error) {
        this.#failed(error);
      }
    })();
  }

  /** Disconnects. */
  async close(): Promise<void> {
    this.#log.flush();
    (await this.#redis).disconnect();
  }

  // A hash tag of the session, so that its two sides would share a slot.
  #key(sessionKey: string, role: BindingRole): string {
    return `${this.#prefix}:{${storedSessionKey(sessionKey)}}:${role}`;
  }

  #failed(error: unknown): void {
    this.#options.onFailure?.();
    this.#log.failed({ err: error });
  }

  #recovered(): void {
    this.#log.recovered();
  }
}
