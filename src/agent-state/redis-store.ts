// Responses and Conversations in the Redis the router's replicas share: any replica answers a
// `previous_response_id` another stored, every write is one Lua script (the owner's quota
// checked and the write made together), and Redis frees what has expired by itself.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { sharedRedis } from '../replicas/redis-client.js';
import type { Logger } from '../runtime/logger.js';
import { FailureLog } from '../runtime/repeated-log.js';
import {
  type AgentStore,
  type AgentStoreOptions,
  AgentStoreQuotaError,
  AgentStoreUnavailableError,
  checkQuota,
  type ItemsPage,
  type ItemsQuery,
  type JsonObject,
  type OwnerUsage,
  type ResponseChain,
  type StoredConversation,
  type StoredResponse,
  storeLimits,
} from './agent-store.js';
import { AGENT_STORE_SCRIPTS, type AgentStoreScript } from './redis-store-scripts.js';

/** Options of {@link RedisAgentStore}. */
export interface RedisAgentStoreOptions extends AgentStoreOptions {
  /** The Redis every replica shares: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS. */
  readonly url: string;
  /** How long one call may take, in ms (a connection: at least 250); 1000 by default. */
  readonly timeoutMs?: number | undefined;
  /** The keys' prefix; `disagg:agents:` by default (replicas that share the objects share it). */
  readonly keyPrefix?: string | undefined;
  /** Where an outage (and its end) is logged, at most once per 10 s. */
  readonly logger?: Logger | undefined;
}

/** The longest owner kept as it is in its keys; a longer one is kept as its digest. */
const MAX_PLAIN_OWNER = 128;

/**
 * {@link AgentStore} in one Redis that every replica of the router shares. Each write is one
 * Lua script: the owner's quota is checked and the write made in one step, so two replicas
 * cannot both take an owner's last object, and a conversation's items are appended all or
 * none. Each object's expiry (by `clock`) is in its record, and a read treats one past it as
 * gone; Redis also expires the keys by itself (`PEXPIRE`, the time to live from each write).
 * What each owner holds is kept beside its objects (a sorted set of them by expiry, with their
 * counts) and pruned of what expired by every write and by {@link usage}, so quotas and usage
 * stay exact whether or not Redis has freed an expired object yet. A conversation and its
 * items expire together (any write to it refreshes them all).
 *
 * Objects are keyed by their owner: another owner's id is not found, and cannot be taken or
 * overwritten (each owner has ids of its own). A response chain is walked back in one script
 * (one round trip); a page of items is read by its cursor, not the whole conversation.
 *
 * Every call gives up after `timeoutMs` (a first connection after at least 250 ms): an unreachable or
 * silent Redis is an {@link AgentStoreUnavailableError} naming Redis's host and port (never
 * the password), with the driver's error as its `cause`, and the client reconnects by itself.
 * One Redis (or a primary with replicas); each owner's keys share a hash tag, but the scripts
 * make keys of their own, so not a Redis Cluster. Redis should not evict keys
 * (`maxmemory-policy noeviction`): an evicted object would be counted until it expires.
 *
 * @throws TypeError when `url` is not a `redis://` or `rediss://` URL.
 * @example
 * const store = new RedisAgentStore({ url: 'redis://redis:6379', limits: { ttlMs: 7 * 24 * 3600_000 } });
 * await store.putResponse({ id: 'resp_1', owner: 'alice', storedAt: Date.now(), input: [], response: { id: 'resp_1' } });
 * const chain = await store.responseChain('resp_1', 'alice', 100);
 * await store.close();
 */
export class RedisAgentStore implements AgentStore {
  readonly description: string;
  readonly #limits: ReturnType<typeof storeLimits>;
  readonly #clock: () => number;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  /** Redis's host and port, for messages. */
  readonly #where: string;
  /** The password as the URL has it and decoded, kept out of every message. */
  readonly #secrets: string[];
  readonly #redis: Promise<Redis>;
  readonly #firstConnect: Promise<void>;
  readonly #log: FailureLog;

  constructor(options: RedisAgentStoreOptions) {
    const url = parseRedisUrl(options.url);
    this.#where = `${url.hostname}:${url.port === '' ? '6379' : url.port}`;
    this.#secrets = url.password === '' ? [] : [url.password, decodedOrSame(url.password)];
    url.password = '';
    this.description = url.toString();
    this.#limits = storeLimits(options.limits);
    this.#clock = options.clock ?? Date.now;
    this.#prefix = options.keyPrefix ?? 'disagg:agents:';
    this.#timeoutMs = options.timeoutMs ?? 1000;
    this.#log = new FailureLog(options.logger, {
      failure: `Cannot reach the stored Responses and Conversations (Redis at ${this.#where}): the requests that need them fail with a 503 until Redis answers`,
      recovery: `The stored Responses and Conversations answer again (Redis at ${this.#where})`,
    });
    this.#redis = sharedRedis(options.url, this.#timeoutMs, AGENT_STORE_SCRIPTS).redis;
    this.#firstConnect = this.#redis.then(firstSettled, () => {});
  }

  async putResponse(response: StoredResponse): Promise<void> {
    const now = this.#clock();
    const answer = await this.#script(
      'disaggAgentPutResponse',
      response.owner,
      response.id,
      JSON.stringify(response),
      response.previousResponseId ?? '',
      now,
      ...this.#writeArgs(now),
    );
    this.#refused(response.owner, answer);
  }

  async getResponse(id: string, owner: string): Promise<StoredResponse | undefined> {
    const now = this.#clock();
    const [json, expires] = await this.#call((redis) => redis.hmget(this.#key(owner, `r:${id}`), 'v', 'e'));
    if (json === null || json === undefined || !(Number(expires) >= now)) return undefined;
    return JSON.parse(json) as StoredResponse;
  }

  async deleteResponse(id: string, owner: string): Promise<boolean> {
    return (await this.#script('disaggAgentDeleteResponse', owner, id, this.#clock())) === 1;
  }

  async responseChain(id: string, owner: string, limit: number): Promise<ResponseChain | undefined> {
    const bounded = Math.max(0, Math.floor(limit));
    const answer = await this.#script('disaggAgentResponseChain', owner, id, this.#clock(), bounded);
    if (!Array.isArray(answer)) return undefined;
    const [complete, ...newestFirst] = answer as [number, ...string[]];
    return {
      responses: newestFirst.reverse().map((json) => JSON.parse(json) as StoredResponse),
      complete: complete === 1,
    };
  }

  async createConversation(conversation: StoredConversation, items: readonly JsonObject[]): Promise<void> {
    const now = this.#clock();
    const { id, owner, createdAt, metadata } = conversation;
    const answer = await this.#script(
      'disaggAgentCreateConversation',
      owner,
      id,
      JSON.stringify({ id, owner, createdAt }),
      JSON.stringify(metadata),
      now,
      ...this.#writeArgs(now),
      ...itemArgs(items),
    );
    this.#refused(owner, answer);
  }

  async getConversation(id: string, owner: string): Promise<StoredConversation | undefined> {
    const now = this.#clock();
    const [head, metadata, expires] = await this.#call((redis) =>
      redis.hmget(this.#key(owner, `c:${id}`), 'c', 'm', 'e'),
    );
    if (typeof head !== 'string' || typeof metadata !== 'string' || !(Number(expires) >= now)) return undefined;
    return conversationOf(head, metadata);
  }

  async updateConversation(
    id: string,
    owner: string,
    metadata: Readonly<Record<string, string>>,
  ): Promise<StoredConversation | undefined> {
    const now = this.#clock();
    const answer = await this.#script(
      'disaggAgentUpdateConversation',
      owner,
      id,
      JSON.stringify(metadata),
      now,
      ...this.#writeArgs(now),
    );
    this.#refused(owner, answer);
    if (!Array.isArray(answer)) return undefined;
    const [head, stored] = answer as [string, string];
    return conversationOf(head, stored);
  }

  async deleteConversation(id: string, owner: string): Promise<boolean> {
    return (await this.#script('disaggAgentDeleteConversation', owner, id, this.#clock())) === 1;
  }

  async appendItems(conversationId: string, owner: string, items: readonly JsonObject[]): Promise<boolean> {
    const now = this.#clock();
    const answer = await this.#script(
      'disaggAgentAppendItems',
      owner,
      conversationId,
      now,
      ...this.#writeArgs(now),
      ...itemArgs(items),
    );
    this.#refused(owner, answer);
    return answer === 1;
  }

  async listItems(conversationId: string, owner: string, query: ItemsQuery): Promise<ItemsPage | undefined> {
    const answer = await this.#script(
      'disaggAgentListItems',
      owner,
      conversationId,
      this.#clock(),
      query.after === undefined ? 0 : 1,
      query.after ?? '',
      Math.max(0, Math.floor(query.limit)),
      query.order,
    );
    if (!Array.isArray(answer)) return undefined;
    const [more, ...items] = answer as [number, ...string[]];
    return { items: items.map((json) => JSON.parse(json) as JsonObject), hasMore: more === 1 };
  }

  async getItem(conversationId: string, owner: string, itemId: string): Promise<JsonObject | undefined> {
    const answer = await this.#script('disaggAgentGetItem', owner, conversationId, this.#clock(), itemId);
    return typeof answer === 'string' ? (JSON.parse(answer) as JsonObject) : undefined;
  }

  async deleteItem(conversationId: string, owner: string, itemId: string): Promise<boolean> {
    return (await this.#script('disaggAgentDeleteItem', owner, conversationId, this.#clock(), itemId)) === 1;
  }

  async usage(owner: string): Promise<OwnerUsage> {
    const [objects, bytes] = (await this.#script('disaggAgentUsage', owner, this.#clock())) as [number, number];
    return { objects, bytes };
  }

  async close(): Promise<void> {
    this.#log.flush();
    try {
      (await this.#redis).disconnect();
    } catch {
      // Nothing to let go: the client was never made.
    }
  }

  /** A write's expiry (by the clock), Redis's time to live, and the owner's limits. */
  #writeArgs(now: number): [number, number, number, number] {
    const { ttlMs, maxObjectsPerOwner, maxBytesPerOwner } = this.#limits;
    // Lua reads neither Infinity nor a fraction where Redis wants an integer.
    const ttl = Math.max(1, Math.ceil(bounded(ttlMs)));
    return [now + ttl, ttl, bounded(maxObjectsPerOwner), bounded(maxBytesPerOwner)];
  }

  /** Throws the quota error a script's refusal (`['quota', objects, bytes, added objects, added bytes]`) stands for. */
  #refused(owner: string, answer: unknown): void {
    if (!Array.isArray(answer) || answer[0] !== 'quota') return;
    const [, objects, bytes, addedObjects, addedBytes] = answer.map(Number) as number[];
    const usage = { objects: objects ?? 0, bytes: bytes ?? 0 };
    const added = { objects: addedObjects ?? 0, bytes: addedBytes ?? 0 };
    checkQuota(owner, usage, added, this.#limits);
    // The script and checkQuota agree; should they not, the write was still refused.
    throw new AgentStoreQuotaError(
      `${owner} is at a limit of its stored objects`,
      added.objects > 0 ? 'objects' : 'bytes',
    );
  }

  #script(name: AgentStoreScript, owner: string, ...args: Array<string | number>): Promise<unknown> {
    return this.#call((redis) => {
      const command = (redis as unknown as Record<AgentStoreScript, (...all: unknown[]) => Promise<unknown>>)[name];
      return command.call(redis, this.#base(owner), ...args.map(String));
    });
  }

  /** One call to Redis; any failure of it (the driver gives up after the timeout) is the store unavailable. */
  async #call<T>(operation: (redis: Redis) => Promise<T>): Promise<T> {
    try {
      const redis = await this.#redis;
      // Right after start the first connection is still being made: not a Redis down.
      await this.#firstConnect;
      const answer = await operation(redis);
      this.#log.recovered();
      return answer;
    } catch (error) {
      this.#log.failed({ err: error });
      throw new AgentStoreUnavailableError(
        `The store of Responses and Conversations (Redis at ${this.#where}) cannot be reached or did not answer in time: ${this.#redact(error)}`,
        {
          cause: error,
          publicMessage:
            'The store of Responses and Conversations (Redis) cannot be reached or did not answer in time; try again later',
        },
      );
    }
  }

  #redact(error: unknown): string {
    let text = error instanceof Error ? error.message : String(error);
    for (const secret of this.#secrets) if (secret !== '') text = text.split(secret).join('***');
    return text;
  }

  /** The owner's base key: its hash tag keeps an owner's keys in one slot. */
  #base(owner: string): string {
    const plain = owner.length <= MAX_PLAIN_OWNER && !/[{}]/.test(owner);
    return `${this.#prefix}{${plain ? owner : `sha256-${createHash('sha256').update(owner).digest('hex')}`}}`;
  }

  #key(owner: string, member: string): string {
    return `${this.#base(owner)}:${member}`;
  }
}

/**
 * Settles when the client's first connection is ready or has failed. Not the client's own
 * `connect()`: a server that takes the connection and never answers fails its ready check
 * after the command timeout, but `connect()` settles only once the socket closes, seconds on.
 */
function firstSettled(redis: Redis): Promise<void> {
  if (redis.status === 'ready' || redis.status === 'end') return Promise.resolve();
  const events = ['ready', 'error', 'end'] as const;
  return new Promise((resolve) => {
    const settle = () => {
      for (const event of events) redis.off(event, settle);
      resolve();
    };
    for (const event of events) redis.on(event, settle);
  });
}

/** The URL, checked to be Redis's. */
function parseRedisUrl(text: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'redis:' && url.protocol !== 'rediss:') || url.hostname === '') {
    throw new TypeError('The Redis agent store needs a redis:// or rediss:// URL with a host');
  }
  return url;
}

/** A limit as Redis and Lua take it: no limit (Infinity) is the largest exact integer. */
function bounded(limit: number): number {
  return Number.isFinite(limit) ? limit : Number.MAX_SAFE_INTEGER;
}

/** A URL's percent-encoded part decoded, or as it is when it does not decode. */
function decodedOrSame(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Items as the scripts take them: each one's id, then its JSON. */
function itemArgs(items: readonly JsonObject[]): string[] {
  return items.flatMap((item) => [String(item.id), JSON.stringify(item)]);
}

/** A conversation from its stored head (id, owner, createdAt) and metadata. */
function conversationOf(head: string, metadata: string): StoredConversation {
  return { ...(JSON.parse(head) as Omit<StoredConversation, 'metadata'>), metadata: JSON.parse(metadata) };
}
