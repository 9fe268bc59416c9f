import type { BlockKeys } from './block-keys.js';
import type { BlockHandle, KvEvent } from './kv-events.js';

/** Options of {@link KvBlockIndex}. */
export interface KvBlockIndexOptions {
  /**
   * The most blocks kept per worker; past it the oldest are dropped (an engine that evicts
   * says so, so this only bounds a view whose removals were lost). Default 1,048,576.
   */
  maxBlocksPerWorker?: number;
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

  constructor(keys: BlockKeys, options: KvBlockIndexOptions = {}) {
    this.#keys = keys;
    this.#max = options.maxBlocksPerWorker ?? 1_048_576;
  }

  /** Applies one of `worker`'s events. */
  apply(worker: W, event: KvEvent): ApplyResult {
    const view = this.#view(worker);
    switch (event.kind) {
      case 'cleared':
        view.byHandle.clear();
        view.refs.clear();
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
        if (parent === undefined) seed = this.#keys.root(event.lora);
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

  /** Forgets everything of `worker` (it restarted, or left the pool). */
  clear(worker: W): void {
    const view = this.#views.get(worker);
    if (view === undefined) return;
    view.byHandle.clear();
    view.refs.clear();
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
   * adapter the request names, if any.
   */
  overlap(tokens: readonly number[], candidates: readonly W[], scope?: string): Map<W, number> {
    const result = new Map<W, number>();
    const keysBySize = new Map<number, bigint[]>();
    for (const worker of candidates) {
      const view = this.#views.get(worker);
      if (view === undefined || !view.trusted || view.blockSize === undefined || view.refs.size === 0) {
        result.set(worker, 0);
        continue;
      }
      const size = view.blockSize;
      let keys = keysBySize.get(size);
      if (keys === undefined) {
        keys = this.#keys.keys(tokens, size, this.#keys.root(scope));
        keysBySize.set(size, keys);
      }
      let matched = 0;
      while (matched < keys.length && view.refs.has(keys[matched] as bigint)) matched++;
      result.set(worker, matched * size);
    }
    return result;
  }

  #view(worker: W): WorkerView {
    let view = this.#views.get(worker);
    if (view === undefined) {
      view = { blockSize: undefined, byHandle: new Map(), refs: new Map(), trusted: true, skipped: 0 };
      this.#views.set(worker, view);
    }
    return view;
  }

  #add(view: WorkerView, block: BlockHandle, key: bigint): void {
    if (view.byHandle.has(block)) this.#drop(view, block);
    view.byHandle.set(block, key);
    view.refs.set(key, (view.refs.get(key) ?? 0) + 1);
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

/** Only what a prefill reuses: GPU blocks of the first (full-attention) KV cache group. */
function counts(medium: string, group: number): boolean {
  return (medium === 'GPU' || medium === 'gpu') && group === 0;
}
