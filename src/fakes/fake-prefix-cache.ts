import { createHash } from 'node:crypto';
import type { Endpoint } from '../endpoints/endpoint.js';
import { routingText } from '../routing/routing-input.js';

/** Options of a fake worker's prefix cache (`FakeWorkerOptions.prefixCache`). */
export interface FakePrefixCacheOptions {
  /** Characters per cached block (a fake token is four characters); 64 by default. */
  blockChars?: number | undefined;
  /** Blocks it holds, least recently used dropped first; 4,096 by default. */
  capacityBlocks?: number | undefined;
  /** Milliseconds of computing per prompt token not found in the cache; 0 by default. */
  msPerToken?: number | undefined;
}

/**
 * What a prefix-caching engine (vLLM's automatic prefix caching, SGLang's radix cache) does
 * with a prompt, in small: the prompt's text (as routers see it: the prompt, or the chat
 * messages in order) is cut into whole blocks, each named by a hash of everything up to its
 * end, and the leading blocks already held are not computed again. Deterministic: the same
 * prompts in the same order give the same hits.
 */
export class FakePrefixCache {
  readonly #blockChars: number;
  readonly #capacity: number;
  readonly #msPerToken: number;
  /** Block names in least recently used order (a Map keeps insertion order). */
  readonly #blocks = new Map<string, true>();

  constructor(options: FakePrefixCacheOptions = {}) {
    this.#blockChars = options.blockChars ?? 64;
    this.#capacity = options.capacityBlocks ?? 4096;
    this.#msPerToken = options.msPerToken ?? 0;
  }

  /**
   * Computes `body`'s prompt: the tokens found cached (whole blocks from the start), and the
   * milliseconds the rest takes. The prompt's blocks are cached afterwards. `endpoint`: the
   * API the call came in on (the worker's route); by the body's shape when omitted.
   */
  compute(
    body: Record<string, unknown>,
    promptTokens: number,
    endpoint?: Endpoint,
  ): { cachedTokens: number; computeMs: number } {
    const text = routingText(body, undefined, endpoint);
    let previous = '';
    let hits = 0;
    let missed = false;
    const names: string[] = [];
    for (let end = this.#blockChars; end <= text.length; end += this.#blockChars) {
      previous = createHash('sha1')
        .update(previous)
        .update(text.slice(end - this.#blockChars, end))
        .digest('hex');
      names.push(previous);
      if (!missed && this.#blocks.has(previous)) hits++;
      else missed = true;
    }
    for (const name of names) {
      this.#blocks.delete(name);
      this.#blocks.set(name, true);
    }
    while (this.#blocks.size > this.#capacity) this.#blocks.delete(this.#blocks.keys().next().value as string);
    const cachedTokens = Math.min(promptTokens, Math.floor((hits * this.#blockChars) / 4));
    return { cachedTokens, computeMs: (promptTokens - cachedTokens) * this.#msPerToken };
  }

  /** Blocks held now. */
  get size(): number {
    return this.#blocks.size;
  }
}
