// What the router keeps of agents' turns, so that any replica, after any restart, answers a
// `previous_response_id`, a `conversation`, a `GET /v1/responses/{id}` or a background poll:
// the engines stay stateless, and each turn is sent to them whole. One interface, three
// backends (memory, Redis, PostgreSQL), as SGLang Model Gateway's `data_connector` has its
// response, conversation and item storages behind one factory.

import { branded, DisaggError } from '../util/disagg-error.js';

/** A JSON object as a client or an engine wrote it: items, responses, metadata. */
export type JsonObject = Record<string, unknown>;

/**
 * One Responses answer as stored: whose it is, the turn it continued, the input items this
 * turn's request carried (each with its `id`), and the `response` object as the client sees
 * it (its `status`, `output` items, `usage`, `model`, `metadata`...). A background response is
 * stored when queued and replaced as it goes (`in_progress`, then its end); its stream's events
 * are kept with it, for a stream resumed by sequence number.
 */
export interface StoredResponse {
  /** The response's id (`resp_...`): the router's own, random, unless the client named it. */
  readonly id: string;
  /** The tenant (or API key) that created it: nobody else finds it. */
  readonly owner: string;
  /** When it was first stored, in milliseconds since the epoch (its time to live counts from it). */
  readonly storedAt: number;
  /** The response this turn continued (`previous_response_id`), if any. */
  readonly previousResponseId?: string | undefined;
  /** The conversation this turn was added to, if any. */
  readonly conversationId?: string | undefined;
  /** This turn's own input items (not the chain's), in order, each with a string `id`. */
  readonly input: readonly JsonObject[];
  /** The response object, as answered (or as it stands, for a background one under way). */
  readonly response: JsonObject;
  /** A background stream's events, in order (each with its `sequence_number`). */
  readonly events?: readonly JsonObject[] | undefined;
}

/** A conversation: its id (`conv_...`), owner, creation time (Unix seconds) and metadata. */
export interface StoredConversation {
  readonly id: string;
  readonly owner: string;
  /** Unix seconds, as OpenAI's `created_at`. */
  readonly createdAt: number;
  /** Up to 16 string pairs, as OpenAI's (the router checks them before they get here). */
  readonly metadata: Readonly<Record<string, string>>;
}

/** One page of a conversation's items: `after` an item's id (exclusive), in `order`, at most `limit`. */
export interface ItemsQuery {
  readonly after?: string | undefined;
  readonly limit: number;
  readonly order: 'asc' | 'desc';
}

/** A page of items, and whether more follow it in the same order. */
export interface ItemsPage {
  readonly items: readonly JsonObject[];
  readonly hasMore: boolean;
}

/** The chain of responses a `previous_response_id` names, oldest first. */
export interface ResponseChain {
  /** The responses, oldest first, the named one last: at most the `limit` asked for (the newest ones). */
  readonly responses: readonly StoredResponse[];
  /** Whether the first of `responses` starts the chain (false: the chain was longer than the limit). */
  readonly complete: boolean;
}

/** What one owner holds: objects (responses, conversations, conversation items) and their bytes. */
export interface OwnerUsage {
  readonly objects: number;
  readonly bytes: number;
}

/**
 * The bounds every backend keeps for each owner, and how long an object lives. An object is a
 * response, a conversation or a conversation item; its bytes are its JSON's (UTF-8).
 */
export interface StoreLimits {
  /** How long an object lives after it was last written, in milliseconds. Default: 30 days, as OpenAI keeps responses. */
  readonly ttlMs?: number | undefined;
  /** The most objects one owner may hold. Default: 100,000. */
  readonly maxObjectsPerOwner?: number | undefined;
  /** The most bytes one owner may hold. Default: 1 GiB. */
  readonly maxBytesPerOwner?: number | undefined;
}

/** The defaults of {@link StoreLimits}. */
export const STORE_LIMITS: Required<{ [K in keyof StoreLimits]: number }> = Object.freeze({
  ttlMs: 30 * 24 * 60 * 60 * 1000,
  maxObjectsPerOwner: 100_000,
  maxBytesPerOwner: 1024 * 1024 * 1024,
});

/**
 * Where the router keeps Responses and Conversations: in memory (one process, bounded), in
 * Redis (replicas share it, objects expire by TTL) or in PostgreSQL (durable). Every read and
 * change names the owner: another owner's object is not found (`undefined`, `false`), exactly
 * as one that never existed, so nothing says it exists. An object past its time to live is
 * gone the same way.
 *
 * Writes of one request are not a transaction across calls; each call is atomic on its own,
 * and a failed call leaves what was stored before it as it was (a chain is never half
 * written: a response is one record).
 *
 * Every method may throw {@link AgentStoreUnavailableError} (the backend cannot be reached, or
 * did not answer in time); the writes may throw {@link AgentStoreQuotaError}.
 */
export interface AgentStore {
  /** Where it keeps things, for logs (a URL without its password). */
  readonly description: string;

  /**
   * Stores `response`, or replaces the one with its id (the same owner's; its TTL starts
   * again). Throws {@link AgentStoreQuotaError} when a new response would take its owner past
   * a limit (a replacement only when its growth would).
   */
  putResponse(response: StoredResponse): Promise<void>;
  /** The response `id` of `owner`, if stored. */
  getResponse(id: string, owner: string): Promise<StoredResponse | undefined>;
  /** Deletes the response `id` of `owner`: true if there was one. Its chain's others stay. */
  deleteResponse(id: string, owner: string): Promise<boolean>;
  /**
   * The chain ending at response `id` (following `previousResponseId`), oldest first, at most
   * `limit` responses; undefined when `id`, or any response on the way back, is not `owner`'s
   * or not stored (a chain with a hole cannot be continued faithfully).
   */
  responseChain(id: string, owner: string, limit: number): Promise<ResponseChain | undefined>;

  /** Creates a conversation with its first items (each with its `id`), in order. Quota as for responses. */
  createConversation(conversation: StoredConversation, items: readonly JsonObject[]): Promise<void>;
  /** The conversation `id` of `owner`, if stored. */
  getConversation(id: string, owner: string): Promise<StoredConversation | undefined>;
  /** Replaces its metadata; the conversation as it is now, undefined if not `owner`'s. */
  updateConversation(
    id: string,
    owner: string,
    metadata: Readonly<Record<string, string>>,
  ): Promise<StoredConversation | undefined>;
  /** Deletes the conversation and its items: true if there was one. */
  deleteConversation(id: string, owner: string): Promise<boolean>;
  /**
   * Adds items (each with its `id`, unique in the conversation) at the conversation's end, in
   * order, all or none; false when the conversation is not `owner`'s. Refreshes the
   * conversation's TTL and its items'. Quota as for responses.
   */
  appendItems(conversationId: string, owner: string, items: readonly JsonObject[]): Promise<boolean>;
  /** A page of the conversation's items; undefined when the conversation is not `owner`'s. An unknown `after` gives an empty page. */
  listItems(conversationId: string, owner: string, query: ItemsQuery): Promise<ItemsPage | undefined>;
  /** One item of the conversation, if both are `owner`'s. */
  getItem(conversationId: string, owner: string, itemId: string): Promise<JsonObject | undefined>;
  /** Deletes one item: true if the conversation is `owner`'s and held it. */
  deleteItem(conversationId: string, owner: string, itemId: string): Promise<boolean>;

  /** What `owner` holds now (expired objects not counted). */
  usage(owner: string): Promise<OwnerUsage>;
  /** Lets go of connections and timers; the store is not used after. Never throws. */
  close(): Promise<void>;
}

/**
 * The store of Responses and Conversations could not be reached, or did not answer in time: the
 * requests that need it fail with a 503 (`code` `DISAGG_STORE_UNAVAILABLE`); those that do not
 * (`store: false`, no `previous_response_id`, no `conversation`) are served as ever.
 */
export class AgentStoreUnavailableError extends DisaggError {
  static override readonly is = branded<AgentStoreUnavailableError>('AgentStoreUnavailableError');
  declare readonly code: 'DISAGG_STORE_UNAVAILABLE';
  /**
   * What a client is told: the store's kind without its address or the driver's words (the
   * message, for the log, has both). The message when not given.
   */
  readonly publicMessage: string;

  constructor(message: string, options?: { cause?: unknown; publicMessage?: string | undefined }) {
    super('DISAGG_STORE_UNAVAILABLE', message, options);
    this.publicMessage = options?.publicMessage ?? message;
  }
}

/**
 * A write would take its owner past a limit of {@link StoreLimits} (`code`
 * `DISAGG_STORE_QUOTA`, a 429 `insufficient_quota`): delete some of its responses or
 * conversations, or wait for them to expire. Nothing was written.
 */
export class AgentStoreQuotaError extends DisaggError {
  static override readonly is = branded<AgentStoreQuotaError>('AgentStoreQuotaError');
  declare readonly code: 'DISAGG_STORE_QUOTA';
  /** OpenAI's code for it. */
  readonly apiCode = 'insufficient_quota';

  constructor(
    message: string,
    /** The limit hit. */
    readonly limit: 'objects' | 'bytes',
  ) {
    super('DISAGG_STORE_QUOTA', message);
  }
}

/** The bytes an object counts for: its JSON's, in UTF-8. */
export function objectBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '');
}

/**
 * Throws the {@link AgentStoreQuotaError} that adding `added` to what `owner` holds (`usage`)
 * would earn under `limits`; nothing when it fits. Every backend checks through it, so the
 * words are the same whichever holds the objects.
 */
export function checkQuota(
  owner: string,
  usage: OwnerUsage,
  added: OwnerUsage,
  limits: Required<{ [K in keyof StoreLimits]: number }>,
): void {
  if (added.objects > 0 && usage.objects + added.objects > limits.maxObjectsPerOwner) {
    throw new AgentStoreQuotaError(
      `${owner} holds ${usage.objects} stored objects, the most allowed is ${limits.maxObjectsPerOwner}: delete responses or conversations, or wait for them to expire`,
      'objects',
    );
  }
  if (added.bytes > 0 && usage.bytes + added.bytes > limits.maxBytesPerOwner) {
    throw new AgentStoreQuotaError(
      `${owner} holds ${usage.bytes} bytes of stored objects, the most allowed is ${limits.maxBytesPerOwner}: delete responses or conversations, or wait for them to expire`,
      'bytes',
    );
  }
}

/** `limits` with each bound not given at its default ({@link STORE_LIMITS}). */
export function storeLimits(limits: StoreLimits = {}): Required<{ [K in keyof StoreLimits]: number }> {
  return {
    ttlMs: limits.ttlMs ?? STORE_LIMITS.ttlMs,
    maxObjectsPerOwner: limits.maxObjectsPerOwner ?? STORE_LIMITS.maxObjectsPerOwner,
    maxBytesPerOwner: limits.maxBytesPerOwner ?? STORE_LIMITS.maxBytesPerOwner,
  };
}

/** What every backend takes besides its address: its limits, and the clock that dates objects. */
export interface AgentStoreOptions {
  /** The owners' limits and the objects' time to live ({@link STORE_LIMITS} by default). */
  readonly limits?: StoreLimits | undefined;
  /**
   * Milliseconds since the epoch (`Date.now` by default): an object is gone once this clock
   * passes its write plus the TTL, whether or not the backend has removed it yet.
   */
  readonly clock?: (() => number) | undefined;
}
