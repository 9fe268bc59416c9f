// A simulated engine's KV cache: the prompt blocks it has computed, as a tree of the trace's
// block hashes (a child is a block that follows its parent in some prompt), on the GPU or
// offloaded to the CPU, each held by the requests running on it. vLLM keys its cache by a
// chain of block hashes and SGLang by a radix tree of tokens; both find the longest cached
// prefix of a prompt and, when memory runs short, drop blocks nobody holds, least recently
// used first and a prompt's tail before its head. A tree of blocks keeps exactly that.

import { MinHeap } from './min-heap.js';

/** One cached block of a prompt (a trace's 512-token block, or a prompt's shorter last one). */
export interface KvNode {
  /** The trace's hash of the block. */
  readonly id: number;
  readonly parent: KvNode | undefined;
  /** The blocks cached after it, by hash; undefined while none. */
  children: Map<number, KvNode> | undefined;
  /** Tokens it holds. */
  readonly tokens: number;
  /** The engine's blocks it takes (its tokens rounded up to the engine's block size). */
  readonly units: number;
  /** Requests running on it: it is never dropped while any does. */
  refs: number;
  /** Where it is: on the GPU, or offloaded to the CPU. */
  tier: 'gpu' | 'cpu';
  /** When a request last used it (virtual ms). */
  lastUse: number;
  /** Children on the GPU: a node is dropped from the GPU only once it has none. */
  gpuChildren: number;
  /** Bumped whenever it may have become droppable, so that a stale entry of the queue is passed over. */
  version: number;
  /** Its handle in the KV events it publishes (unique on this engine). */
  readonly handle: string;
}

/** What a KV cache tells those who follow it: a block stored on the GPU, or gone from it. */
export type KvTreeEvent =
  | { readonly kind: 'stored'; readonly node: KvNode }
  | { readonly kind: 'removed'; readonly node: KvNode };

/** Options of {@link KvTree}. */
export interface KvTreeOptions {
  /** The GPU's KV blocks. */
  readonly gpuUnits: number;
  /** Tokens per engine block. */
  readonly blockTokens: number;
  /** Tokens the CPU offload tier holds; 0 (the default) for none. */
  readonly cpuTokens?: number | undefined;
  /** Told of each block stored on, or dropped from, the GPU. */
  readonly onEvent?: ((event: KvTreeEvent) => void) | undefined;
}

/** The longest cached prefix of a prompt: the nodes, and how many of its tokens are on each tier. */
export interface KvMatch {
  readonly nodes: readonly KvNode[];
  readonly gpuTokens: number;
  readonly cpuTokens: number;
}

/** A droppable node in the queue, at the version it was queued with. */
interface Queued {
  readonly node: KvNode;
  readonly version: number;
  readonly lastUse: number;
}

/**
 * The KV cache of one simulated engine: cached prompt blocks in a tree with their GPU blocks
 * counted, plus the blocks requests hold privately (a block being computed, the answer's
 * tokens), against the GPU's capacity. Making room drops blocks nobody holds, the least
 * recently used leaf first; with an offload tier a dropped block moves to the CPU, from where
 * a later prompt can bring it back instead of computing it.
 *
 * @example
 * const tree = new KvTree({ gpuUnits: 1000, blockTokens: 16 });
 * const held = tree.insert(undefined, 7, 512, 0); // a block of prompt, held by its request
 * tree.match([7, 8]).gpuTokens; // 512
 */
export class KvTree {
  readonly #options: KvTreeOptions;
  readonly #root = new Map<number, KvNode>();
  /** GPU blocks held by the tree's nodes on the GPU. */
  #treeUnits = 0;
  /** GPU blocks held by requests outside the tree. */
  #privateUnits = 0;
  /** Tokens of the nodes on the CPU. */
  #cpuTokens = 0;
  #serial = 0;
  /** Droppable GPU nodes (refs 0, no GPU child), oldest first. */
  readonly #gpuQueue = new MinHeap<Queued>(older);
  /** CPU nodes without children, oldest first. */
  readonly #cpuQueue = new MinHeap<Queued>(older);

  constructor(options: KvTreeOptions) {
    this.#options = options;
  }

  /** The GPU's blocks. */
  get capacity(): number {
    return this.#options.gpuUnits;
  }

  /** GPU blocks in use (cached blocks and requests' own). */
  get used(): number {
    return this.#treeUnits + this.#privateUnits;
  }

  /** GPU blocks held by cached prompt blocks. */
  get cachedUnits(): number {
    return this.#treeUnits;
  }

  /** Tokens on the CPU tier. */
  get cpuTokens(): number {
    return this.#cpuTokens;
  }

  /** The engine blocks `tokens` tokens take. */
  unitsOf(tokens: number): number {
    return Math.ceil(tokens / this.#options.blockTokens);
  }

  /** The longest prefix of `blocks` cached on either tier (GPU blocks first, then the CPU's). */
  match(blocks: readonly number[]): KvMatch {
    const nodes: KvNode[] = [];
    let gpuTokens = 0;
    let cpuTokens = 0;
    let level: Map<number, KvNode> | undefined = this.#root;
    for (const id of blocks) {
      const node: KvNode | undefined = level?.get(id);
      if (node === undefined) break;
      nodes.push(node);
      if (node.tier === 'gpu') gpuTokens += node.tokens;
      else cpuTokens += node.tokens;
      level = node.children;
    }
    return { nodes, gpuTokens, cpuTokens };
  }

  /**
   * Holds `nodes` (a match) for a request, at `now`: none of them is dropped until released.
   * Nodes on the CPU come back to the GPU (their blocks allocated, as their load needs).
   * False, holding nothing, when the GPU cannot make room for those.
   */
  hold(nodes: readonly KvNode[], now: number): boolean {
    let needed = 0;
    for (const node of nodes) if (node.tier === 'cpu') needed += node.units;
    // Held first so that making room does not drop the very prefix being taken.
    for (const node of nodes) node.refs++;
    if (needed > 0 && !this.#makeRoom(needed)) {
      for (const node of nodes) node.refs--;
      return false;
    }
    for (const node of nodes) {
      node.lastUse = now;
      if (node.tier === 'cpu') this.#toGpu(node);
    }
    return true;
  }

  /**
   * Lets go of `nodes` held by one request at `now`: each becomes droppable once nobody holds
   * it, its most recent use `now`.
   */
  release(nodes: readonly KvNode[], now: number): void {
    // The tail first, so that among blocks last used together the tail is dropped first.
    for (let i = nodes.length - 1; i >= 0; i--) {
      const node = nodes[i] as KvNode;
      node.refs--;
      node.lastUse = now;
      if (node.refs === 0) this.#queueIfDroppable(node);
    }
  }

  /**
   * Takes `units` GPU blocks for a request's own use (a block being computed, the answer's
   * tokens), dropping unheld cached blocks for room. False, taking nothing, when even then
   * there is none.
   */
  allocate(units: number): boolean {
    if (units <= 0) return true;
    if (!this.#makeRoom(units)) return false;
    this.#privateUnits += units;
    return true;
  }

  /** Gives back `units` of a request's own GPU blocks. */
  free(units: number): void {
    this.#privateUnits -= units;
    if (this.#privateUnits < 0) throw new RangeError('Freed more KV blocks than were allocated');
  }

  /**
   * A computed block of a prompt, cached under `parent` (undefined: the prompt's first), and
   * held by the request that computed it. The caller frees the blocks the request allocated
   * for it first: the node takes them over. When the block is cached already (a request beside
   * it computed it first), that node is held instead, as vLLM keeps one copy of a block.
   */
  insert(parent: KvNode | undefined, id: number, tokens: number, now: number): KvNode {
    const units = this.unitsOf(tokens);
    if (parent !== undefined && parent.children === undefined) parent.children = new Map();
    const level = parent === undefined ? this.#root : (parent.children as Map<number, KvNode>);
    const existing = level.get(id);
    if (existing !== undefined) {
      existing.refs++;
      existing.lastUse = now;
      // The fresh copy replaces an offloaded one: its GPU blocks are the request's, moved over.
      if (existing.tier === 'cpu') this.#toGpu(existing);
      return existing;
    }
    const node: KvNode = {
      id,
      parent,
      children: undefined,
      tokens,
      units,
      refs: 1,
      tier: 'gpu',
      lastUse: now,
      gpuChildren: 0,
      version: 0,
      handle: `b${this.#serial++}`,
    };
    level.set(id, node);
    this.#treeUnits += units;
    if (parent !== undefined) parent.gpuChildren++;
    this.#options.onEvent?.({ kind: 'stored', node });
    return node;
  }

  /** Every cached block, on either tier (for checks of what its events said). */
  *nodes(): Generator<KvNode> {
    const stack = [...this.#root.values()];
    while (stack.length > 0) {
      const node = stack.pop() as KvNode;
      yield node;
      if (node.children !== undefined) stack.push(...node.children.values());
    }
  }

  /** GPU blocks requests hold outside the tree (0 once every request has ended: none stranded). */
  get privateUnits(): number {
    return this.#privateUnits;
  }

  /** Drops every unheld block (an engine's cache reset); held blocks stay. */
  clear(): void {
    while (this.#dropOne()) {}
  }

  /** Frees GPU blocks until `units` more fit; false when blocks held by requests leave too few. */
  #makeRoom(units: number): boolean {
    const capacity = this.#options.gpuUnits;
    while (this.#treeUnits + this.#privateUnits + units > capacity) {
      if (!this.#dropOne()) return false;
    }
    return true;
  }

  /** Drops the least recently used droppable GPU block (to the CPU tier when there is one). */
  #dropOne(): boolean {
    for (;;) {
      const entry = this.#gpuQueue.pop();
      if (entry === undefined) return false;
      const { node } = entry;
      if (entry.version !== node.version || !droppable(node)) continue;
      this.#treeUnits -= node.units;
      if (node.parent !== undefined) {
        node.parent.gpuChildren--;
        this.#queueIfDroppable(node.parent);
      }
      this.#options.onEvent?.({ kind: 'removed', node });
      if ((this.#options.cpuTokens ?? 0) >= node.tokens) {
        node.tier = 'cpu';
        node.version++;
        this.#cpuTokens += node.tokens;
        if (node.children === undefined || node.children.size === 0) this.#queueCpu(node);
        this.#trimCpu();
      } else {
        this.#unlink(node);
      }
      return true;
    }
  }

  /** A node back on the GPU from the CPU tier, in blocks the caller made room for. */
  #toGpu(node: KvNode): void {
    node.tier = 'gpu';
    node.version++;
    this.#cpuTokens -= node.tokens;
    this.#treeUnits += node.units;
    if (node.parent !== undefined) node.parent.gpuChildren++;
    this.#options.onEvent?.({ kind: 'stored', node });
  }

  /** Drops the CPU tier's oldest childless blocks until it fits its size. */
  #trimCpu(): void {
    const limit = this.#options.cpuTokens ?? 0;
    while (this.#cpuTokens > limit) {
      const entry = this.#cpuQueue.pop();
      if (entry === undefined) return;
      const { node } = entry;
      if (entry.version !== node.version || node.tier !== 'cpu' || (node.children?.size ?? 0) > 0) continue;
      this.#cpuTokens -= node.tokens;
      this.#unlink(node);
    }
  }

  /** Removes a node from the tree; its parent, on the CPU and now childless, may go next. */
  #unlink(node: KvNode): void {
    const level = node.parent === undefined ? this.#root : node.parent.children;
    level?.delete(node.id);
    node.version++;
    // Offloaded blocks after it can no longer be reached by a prompt: they go with it.
    for (const child of node.children?.values() ?? []) this.#dropUnreachable(child);
    node.children = undefined;
    const parent = node.parent;
    if (parent !== undefined && parent.tier === 'cpu' && (parent.children?.size ?? 0) === 0) this.#queueCpu(parent);
  }

  #dropUnreachable(node: KvNode): void {
    this.#cpuTokens -= node.tokens;
    node.version++;
    for (const child of node.children?.values() ?? []) this.#dropUnreachable(child);
  }

  #queueIfDroppable(node: KvNode): void {
    if (!droppable(node)) return;
    node.version++;
    this.#gpuQueue.push({ node, version: node.version, lastUse: node.lastUse });
  }

  #queueCpu(node: KvNode): void {
    node.version++;
    this.#cpuQueue.push({ node, version: node.version, lastUse: node.lastUse });
  }
}

function droppable(node: KvNode): boolean {
  return node.tier === 'gpu' && node.refs === 0 && node.gpuChildren === 0;
}

/** Least recently used first (equal ages in the order queued by the heap: the same on every run). */
function older(a: Queued, b: Queued): boolean {
  return a.lastUse < b.lastUse;
}
