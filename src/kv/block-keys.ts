import xxhash from 'xxhash-wasm';

type Hash64 = (input: Uint8Array, seed?: bigint) => bigint;

/**
 * The router's own key for each block of a prompt: a chain of 64-bit xxHash digests over the
 * block's token ids (u32, little-endian), each seeded with the key of the block before it and
 * the first with the scope (a LoRA adapter, a cache salt). Engines' own hashes cannot be
 * recomputed (vLLM seeds its sha256 at random unless PYTHONHASHSEED is set), so the index keys
 * blocks by this chain over the token ids an engine's store event carries, as Dynamo's router
 * does; every replica computes the same keys. Only whole blocks have a key.
 *
 * @example
 * const keys = (await loadBlockKeys()).keys([1, 2, 3, 4, 5], 2); // two keys: [1,2] and [3,4]
 */
export class BlockKeys {
  readonly #hash: Hash64;
  readonly #scopes = new Map<string, bigint>();
  #buffer = new Uint8Array(64 * 4);

  /** @internal Use {@link loadBlockKeys}. */
  constructor(hash: Hash64) {
    this.#hash = hash;
  }

  /** The seed of a chain's first block: 0 for the base model, else the scope's own digest. */
  root(scope: string | undefined): bigint {
    if (scope === undefined || scope === '') return 0n;
    let seed = this.#scopes.get(scope);
    if (seed === undefined) {
      seed = this.#hash(new TextEncoder().encode(scope), 0n);
      if (this.#scopes.size < 1024) this.#scopes.set(scope, seed);
    }
    return seed;
  }

  /**
   * The keys of the whole blocks of `tokens` at `blockSize`, chained from `parent` (a block
   * key, or the scope's root). At most `limit` keys.
   */
  keys(tokens: readonly number[], blockSize: number, parent = 0n, limit = Number.POSITIVE_INFINITY): bigint[] {
    const blocks = Math.min(Math.floor(tokens.length / blockSize), limit);
    const keys = new Array<bigint>(blocks);
    if (this.#buffer.length < blockSize * 4) this.#buffer = new Uint8Array(blockSize * 4);
    const bytes = this.#buffer.subarray(0, blockSize * 4);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let seed = parent;
    for (let b = 0; b < blocks; b++) {
      const start = b * blockSize;
      for (let i = 0; i < blockSize; i++) view.setUint32(i * 4, (tokens[start + i] as number) >>> 0, true);
      seed = this.#hash(bytes, seed);
      keys[b] = seed;
    }
    return keys;
  }
}

let loading: Promise<BlockKeys> | undefined;

/**
 * The block keys, once their hash (WebAssembly) is compiled: at most once per process.
 */
export function loadBlockKeys(): Promise<BlockKeys> {
  loading ??= xxhash().then((api) => new BlockKeys((input, seed) => api.h64Raw(input, seed)));
  return loading;
}
