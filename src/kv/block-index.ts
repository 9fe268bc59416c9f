import type { BlockKeys } from './block-keys.js';
import type { BlockHandle, KvEvent } from './kv-events.js';

/** Options of {@link KvBlockIndex}. */
export interface KvBlockIndexOptions {
  /**
   * The most blocks kept per worker; past it the oldest are dropped (an engine that evicts
   * says so, so this only bounds a view whose removals were lost). Default 1,048,576.
   */
  maxBlocksPerWorker?: number | undefined;
  /** The clock speculative entries expire by (ms); `performance.now` by default. */
  now?: (() => number) | undefined;
}

/** What the index knows of one worker. */
interface WorkerView {
  /** Its block size, learned from its store events. */
  blockSize: number | undefined;
  /** Engine handle -> the router's key, oldest first (Map order): what removals and parents name. */
  readonly byHandle: Map<BlockHandle, bigint>;
  /** How many of its handles have each key (a block stored twice under two handles). */
  readonly refs: Map<bigint, number>;
  /** Whether its view can be used: false while events were lost and are not yet recovered. */
  trusted: boolean;
  /** Store events skipped: a parent the index never saw, or no token ids. */
  skipped: number;
  /**
   * Blocks the router expects the worker to store (it just sent it their prompt), until its
   * event confirms them or they expire: key -> when it expires, oldest first.
   */
  readonly expected: Map<bigint, number>;
}

/** What {@link KvBlockIndex.apply} did with one event, for counters. */
export type ApplyResult = 'indexed' | 'removed' | 'cleared' | 'skipped' | 'ignored';

/**
 * Which worker holds which KV blocks, as the engines' own events say (see
 * {@link decodeKvEventBatch}): a store adds blocks under the router's chained key over their
 * token ids ({@link BlockKeys}), a removal or a clear takes them away, and a request's prompt
 * is matched block by block from its start. Each router replica fed the same events holds the
 * same index, so every replica decides alike. Block sizes are learned per worker and a prompt
 * is keyed at each; only GPU blocks of the first KV cache group count (what a prefill reuses).
 *
 * @example
 * const index = new KvBlockIndex(await loadBlockKeys());
 * index.apply('w0', { kind: 'stored', blocks: ['7'], parent: undefined, tokenIds: ids, blockSize: 16, lora: undefined, medium: 'GPU', group: 0 });
 * index.overlap(ids, ['w0', 'w1']); // Map { 'w0' => 16, 'w1' => 0 } (tokens matched)
 */
export class KvBlockIndex<W = string> {
  readonly #keys: BlockKeys;
  readonly #max: number;
  readonly #views = new Map<W, WorkerView>();
  readonly #now: () => number;
  /** Each prompt's keys by block size and scope, while its token ids live ({@link #promptKeys}). */
  readonly #memo = new WeakMap<readonly number[], Map<string, bigint[]>>();
  /** LoRA adapters the engines' events named: a request naming one as its model is in its scope. */
  readonly #loras = new Set<string>();

  constructor(keys: BlockKeys, options: KvBlockIndexOptions = {}) {
    this.#keys = keys;
    this.#max = options.maxBlocksPerWorker ?? 1_048_576;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * A speculative entry: `worker` was just sent this prompt, so it will hold its blocks once
   * it has computed them; until its store event says so (or `ttlMs` passes), the index counts
   * them as held, so that a burst of requests sharing a new prefix follows the first instead
   * of spreading by load (llm-d and vllm-router do the same). At `blockSize`, the worker's own
   * once known.
   */
  expect(worker: W, tokens: readonly number[], ttlMs: number, scope?: string, blockSize = 16): void {
    const view = this.#view(worker);
    const size = view.blockSize ?? blockSize;
    const until = this.#now() + ttlMs;
    for (const key of this.#promptKeys(tokens, size, scope)) {
      if (view.refs.has(key)) continue;
      view.expected.delete(key);
      view.expected.set(key, until);
    }
    if (view.blockSize === undefined) view.blockSize = size;
    while (view.expected.size > 65_536) view.expected.delete(view.expected.keys().next().value as bigint);
  }

  /** Applies one of `worker`'s events. */
  apply(worker: W, event: KvEvent): ApplyResult {
    const view = this.#view(worker);
    switch (event.kind) {
      case 'cleared':
        view.byHandle.clear();
        view.refs.clear();
        view.expected.clear();
        return 'cleared';
      case 'removed': {
        if (!counts(event.medium, event.group)) return 'ignored';
        for (const block of event.blocks) this.#drop(view, block);
        return 'removed';
      }
      case 'stored': {
        if (!counts(event.medium, event.group)) return 'ignored';
        const { blockSize, tokenIds, blocks, parent } = event;
        if (tokenIds === undefined || blockSize <= 0 || tokenIds.length < blocks.length * blockSize) {
          view.skipped++;
          return 'skipped';
        }
        let seed: bigint | undefined;
        if (event.lora !== undefined) this.#loras.add(event.lora);
        if (parent === undefined) seed = this.#keys.root(scopeKey(event.lora, event.salt));
        else seed = view.byHandle.get(parent);
        if (seed === undefined) {
          // A parent stored before this view began (lost events): its chain cannot be rebuilt.
          view.skipped++;
          return 'skipped';
        }
        view.blockSize = blockSize;
        const keys = this.#keys.keys(tokenIds, blockSize, seed, blocks.length);
        for (let i = 0; i < keys.length; i++) this.#add(view, blocks[i] as BlockHandle, keys[i] as bigint);
        return 'indexed';
      }
    }
  }

  /**
   * The scope of a request's blocks: the LoRA adapter its `model` names (when the engines' events
   * have named it as one) and its `cache_salt`; undefined for the base model without a salt.
   */
  scopeOf(body: Readonly<Record<string, unknown>>): string | undefined {
    const model = typeof body.model === 'string' && this.#loras.has(body.model) ? body.model : undefined;
    const salt = typeof body.cache_salt === 'string' && body.cache_salt !== '' ? body.cache_salt : undefined;
    return scopeKey(model, salt);
  }

  /** Forgets everything of `worker` (it restarted, or left the pool). */
  clear(worker: W): void {
    const view = this.#views.get(worker);
    if (view === undefined) return;
    view.byHandle.clear();
    view.refs.clear();
    view.expected.clear();
  }

  /** Drops `worker` from the index. */
  forget(worker: W): void {
    this.#views.delete(worker);
  }

  /** Marks `worker`'s view usable or not (events lost and not yet replayed). An untrusted view matches nothing. */
  setTrusted(worker: W, trusted: boolean): void {
    this.#view(worker).trusted = trusted;
  }

  /** Whether `worker`'s view is trusted. */
  isTrusted(worker: W): boolean {
    return this.#views.get(worker)?.trusted ?? true;
  }

  /** How many blocks `worker` holds, as far as the index knows. */
  blocks(worker: W): number {
    return this.#views.get(worker)?.byHandle.size ?? 0;
  }

  /** `worker`'s block size, once a store event said it. */
  blockSize(worker: W): number | undefined {
    return this.#views.get(worker)?.blockSize;
  }

  /**
   * For each candidate, how many leading tokens of `tokens` it holds in whole blocks (0 for a
   * worker the index knows nothing of, or whose view is not trusted). `scope` is the LoRA
   * adapter the request names, if any. A prompt's keys are worked out once per array of token
   * ids (and kept while it lives): an array changed after a call keeps the keys of its first.
   */
  overlap(tokens: readonly number[], candidates: readonly W[], scope?: string): Map<W, number> {
    const result = new Map<W, number>();
    const keysBySize = new Map<number, bigint[]>();
    for (const worker of candidates) {
      const view = this.#views.get(worker);
      if (
        view === undefined ||
        !view.trusted ||
        view.blockSize === undefined ||
        (view.refs.size === 0 && view.expected.size === 0)
      ) {
        result.set(worker, 0);
        continue;
      }
      const size = view.blockSize;
      let keys = keysBySize.get(size);
      if (keys === undefined) {
        keys = this.#promptKeys(tokens, size, scope);
        keysBySize.set(size, keys);
      }
      let matched = 0;
      const now = this.#now();
      while (matched < keys.length && this.#holds(view, keys[matched] as bigint, now)) matched++;
      result.set(worker, matched * size);
    }
    return result;
  }

  /**
   * A prompt's keys at `size` in `scope`, hashed once per prompt: a request is matched against
   * each pool, then expected on the worker each picked, all with the same token ids (the
   * routing input's), so the keys of the first call serve the others. Kept with the token ids'
   * array, and gone with it.
   */
  #promptKeys(tokens: readonly number[], size: number, scope: string | undefined): bigint[] {
    let bySize = this.#memo.get(tokens);
    if (bySize === undefined) {
      bySize = new Map();
      this.#memo.set(tokens, bySize);
    }
    const at = `${size}\u0000${scope ?? ''}`;
    let keys = bySize.get(at);
    if (keys === undefined) {
      keys = this.#keys.keys(tokens, size, this.#keys.root(scope));
      bySize.set(at, keys);
    }
    return keys;
  }

  /** Whether the view holds `key`, or expects it (an expired expectation is dropped). */
  #holds(view: WorkerView, key: bigint, now: number): boolean {
    if (view.refs.has(key)) return true;
    const until = view.expected.get(key);
    if (until === undefined) return false;
    if (until > now) return true;
    view.expected.delete(key);
    return false;
  }

  #view(worker: W): WorkerView {
    let view = this.#views.get(worker);
    if (view === undefined) {
      view = {
        blockSize: undefined,
        byHandle: new Map(),
        refs: new Map(),
        trusted: true,
        skipped: 0,
        expected: new Map(),
      };
      this.#views.set(worker, view);
    }
    return view;
  }

  #add(view: WorkerView, block: BlockHandle, key: bigint): void {
    if (view.byHandle.has(block)) this.#drop(view, block);
    view.byHandle.set(block, key);
    view.refs.set(key, (view.refs.get(key) ?? 0) + 1);
    // Confirmed: what was expected is held now.
    view.expected.delete(key);
    if (view.byHandle.size > this.#max) {
      const oldest = view.byHandle.keys().next().value as BlockHandle;
      this.#drop(view, oldest);
    }
  }

  #drop(view: WorkerView, block: BlockHandle): void {
    const key = view.byHandle.get(block);
    if (key === undefined) return;
    view.byHandle.delete(block);
    const refs = (view.refs.get(key) ?? 1) - 1;
    if (refs <= 0) view.refs.delete(key);
    else view.refs.set(key, refs);
  }
}

/** One string for a LoRA adapter and a cache salt, either or both; undefined for neither. */
function scopeKey(lora: string | undefined, salt: string | undefined): string | undefined {
  if (salt === undefined) return lora;
  return `${lora ?? ''}\u0000salt\u0000${salt}`;
}

/** Only what a prefill reuses: GPU blocks of the first (full-attention) KV cache group. */
function counts(medium: string, group: number): boolean {
  return (medium === 'GPU' || medium === 'gpu') && group === 0;
}
