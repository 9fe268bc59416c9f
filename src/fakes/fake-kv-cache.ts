import { createHash, randomBytes } from 'node:crypto';
import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf } from '../endpoints/registry.js';
import { RoutingInput } from '../routing/routing-input.js';
import { TokenizerPool } from '../tokenize/tokenizer-pool.js';
import { endpointAt } from './fake-formats.js';
import type { FakeKvEvent, FakeKvPublisher } from './fake-kv-publisher.js';

/** Options of a fake worker's KV cache in token blocks (`FakeWorkerOptions.kvCache`). */
export interface FakeKvCacheOptions {
  /** Tokens per block; 16 by default (vLLM's). */
  blockSize?: number | undefined;
  /** Blocks it holds, least recently used evicted first; 4,096 by default. */
  capacityBlocks?: number | undefined;
  /** How its events are encoded (see {@link FakeKvPublisher}); `map` by default. */
  encoding?: 'map' | 'array' | undefined;
  /** How its replays answer; `topic` by default. */
  replayForm?: 'topic' | 'legacy' | undefined;
  /** The topic of its events; `''` by default. */
  topic?: string | undefined;
  /** The port its events are published on, on the worker's address (vLLM's `endpoint`); any free port by default. */
  port?: number | undefined;
  /** Its replay socket's port (vLLM's `replay_endpoint`); any free port by default. */
  replayPort?: number | undefined;
  /** Milliseconds of computing per prompt token not found in the cache; 0 by default. */
  msPerToken?: number | undefined;
  /**
   * A Hugging Face tokenizer directory (as `--tokenizer` takes): text and chat prompts are
   * tokenized with it, as the engine would, instead of into fake tokens.
   */
  tokenizer?: string | undefined;
}

/**
 * What vLLM's prefix cache does with a prompt's tokens, in small, and what it publishes about
 * it: the prompt is cut into whole blocks, each named by the engine's own chained hash (seeded
 * at random per worker, as vLLM's sha256 is unless PYTHONHASHSEED is set, so that a router can
 * only match blocks by their token ids); the leading blocks already held are hits; the rest
 * are stored and published as `BlockStored` (with their parent and tokens), and blocks evicted
 * at capacity as `BlockRemoved`, one batch per prefill, over a {@link FakeKvPublisher}. A text
 * prompt is cut into fake tokens of four characters. `restart()` empties it and starts the
 * publisher's sequence again, as a restarted engine does.
 */
export class FakeKvCache {
  readonly #blockSize: number;
  readonly #capacity: number;
  readonly #msPerToken: number;
  readonly publisher: FakeKvPublisher;
  #seed = randomBytes(8);
  readonly #tokenizer: Promise<TokenizerPool> | undefined;
  /** Engine hash -> true, least recently used first. */
  readonly #blocks = new Map<bigint, true>();

  constructor(publisher: FakeKvPublisher, options: FakeKvCacheOptions = {}) {
    this.publisher = publisher;
    this.#blockSize = options.blockSize ?? 16;
    this.#capacity = options.capacityBlocks ?? 4096;
    this.#msPerToken = options.msPerToken ?? 0;
    this.#tokenizer = options.tokenizer === undefined ? undefined : TokenizerPool.start({ dir: options.tokenizer });
    // Reported by the first compute, not left unhandled if none comes.
    this.#tokenizer?.catch(() => {});
  }

  /** Ends its tokenizer's thread, if it has one. */
  async close(): Promise<void> {
    await (await this.#tokenizer?.catch(() => undefined))?.close();
  }

  /** Blocks held now. */
  get size(): number {
    return this.#blocks.size;
  }

  /** Blocks it can hold. */
  get capacity(): number {
    return this.#capacity;
  }

  /**
   * Computes `body`'s prompt: the tokens found cached (whole blocks from the start) and the
   * milliseconds the rest takes; the blocks computed are stored, and the batch of what changed
   * is published before this resolves. `path` is the route it came in on, which says how a
   * tokenizer renders it; without it, the body's shape does.
   */
  async compute(
    body: Record<string, unknown>,
    path?: string,
  ): Promise<{ cachedTokens: number; computeMs: number; promptTokens: number }> {
    const tokens = await this.tokens(body, path);
    const size = this.#blockSize;
    const events: FakeKvEvent[] = [];
    let parent: bigint | null = null;
    let hits = 0;
    let missed = false;
    const stored: { hashes: bigint[]; parent: bigint | null; tokens: number[] } = {
      hashes: [],
      parent: null,
      tokens: [],
    };
    for (let start = 0; start + size <= tokens.length; start += size) {
      const block = tokens.slice(start, start + size);
      const hash = this.#hash(parent, block);
      if (!missed && this.#blocks.has(hash)) {
        hits++;
        this.#blocks.delete(hash);
        this.#blocks.set(hash, true);
      } else {
        if (!missed) stored.parent = parent;
        missed = true;
        // Every block from the first miss on is computed and stored: one chain for the event.
        stored.hashes.push(hash);
        stored.tokens.push(...block);
        this.#blocks.delete(hash);
        this.#blocks.set(hash, true);
      }
      parent = hash;
    }
    if (stored.hashes.length > 0) {
      events.push({
        type: 'BlockStored',
        block_hashes: stored.hashes,
        parent_block_hash: stored.parent,
        token_ids: stored.tokens,
        block_size: size,
      });
    }
    const evicted: bigint[] = [];
    while (this.#blocks.size > this.#capacity) {
      const oldest = this.#blocks.keys().next().value as bigint;
      this.#blocks.delete(oldest);
      evicted.push(oldest);
    }
    if (evicted.length > 0) events.push({ type: 'BlockRemoved', block_hashes: evicted });
    if (events.length > 0) await this.publisher.publish(events);
    const cachedTokens = hits * size;
    return { cachedTokens, computeMs: (tokens.length - cachedTokens) * this.#msPerToken, promptTokens: tokens.length };
  }

  /**
   * The token ids of `body`'s prompt as this engine computes them: its tokenizer's (when it has
   * one and the prompt is text), else the fake prompt's own (`fakePromptTokenIds`). `path` as in {@link compute}.
   */
  async tokens(body: Record<string, unknown>, path?: string): Promise<number[]> {
    const endpoint = endpointFor(body, path);
    return (await this.#tokens(body, endpoint)) ?? tokensOf(body, endpoint);
  }

  /** The engine restarted: its cache is empty, its hash seed new, its event sequence back at 0. */
  restart(): void {
    this.#blocks.clear();
    this.#seed = randomBytes(8);
    this.publisher.restart();
  }

  /** The cache was reset (vLLM's `/reset_prefix_cache`): empty, and `AllBlocksCleared` published. */
  async clear(): Promise<void> {
    this.#blocks.clear();
    await this.publisher.publish([{ type: 'AllBlocksCleared' }]);
  }

  async #tokens(body: Record<string, unknown>, endpoint: Endpoint): Promise<number[] | undefined> {
    if (
      this.#tokenizer === undefined ||
      new RoutingInput(body, undefined, undefined, endpoint).tokenIds !== undefined
    ) {
      return undefined;
    }
    // As the engine renders it: chat through the template (Responses and Messages converted to chat first).
    const route = endpoint.tokenize === 'chat' ? 'chat' : endpoint.answer === 'generate' ? 'generate' : 'completions';
    return (await this.#tokenizer).tokenize(endpoint.chatForm?.(body) ?? body, route);
  }

  #hash(parent: bigint | null, block: readonly number[]): bigint {
    const digest = createHash('sha256')
      .update(this.#seed)
      .update(parent === null ? '' : parent.toString())
      .update(Uint32Array.from(block))
      .digest();
    return digest.readBigUInt64BE(0);
  }
}

/**
 * A request's prompt token ids as a fake engine without a tokenizer has them: its ids, else its
 * text cut into fake tokens of four characters. `path` is the route it came in on (which says
 * how to read the body); without it, the body's shape does.
 *
 * @example
 * fakePromptTokenIds({ prompt: [5, 6, 7] }, '/v1/completions'); // [5, 6, 7]
 */
export function fakePromptTokenIds(body: Record<string, unknown>, path?: string): number[] {
  return tokensOf(body, endpointFor(body, path));
}

// The endpoint of the route the request came in on; only a bare body is read for its shape.
const endpointFor = (body: Record<string, unknown>, path: string | undefined): Endpoint =>
  (path === undefined ? undefined : endpointAt(path)) ?? endpointOf(body);

function tokensOf(body: Record<string, unknown>, endpoint: Endpoint): number[] {
  const input = new RoutingInput(body, undefined, undefined, endpoint);
  const ids = input.tokenIds;
  if (ids !== undefined) return [...ids];
  const text = input.text;
  const out: number[] = [];
  for (let i = 0; i + 4 <= text.length; i += 4) {
    let id = 0;
    for (let j = 0; j < 4; j++) id = (id * 31 + text.charCodeAt(i + j)) >>> 0;
    out.push(id % 150_000);
  }
  return out;
}
