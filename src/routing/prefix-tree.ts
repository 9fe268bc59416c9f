/**
 * An approximate radix tree of the routing texts sent to each worker: what a router can know
 * of the workers' prefix caches without asking them. One tree is shared by every worker; each
 * node lists the workers whose texts pass through it (with when they last did), so a worker's
 * cached prefix of a text is the depth of the deepest node on the text's path that lists it.
 *
 * Lengths are UTF-16 code units, and an edge is never split inside a surrogate pair, so a
 * match never ends halfway through a character (two emoji sharing their high surrogate do
 * not share a prefix). Each worker's share is bounded (`maxChars`): past it the worker's least
 * recently used leaves are dropped, down to nine tenths of the bound.
 *
 * @example
 * const tree = new PrefixTree<string>(1_000_000);
 * tree.insert('You are a helpful assistant. Hi', 'w0');
 * tree.match('You are a helpful assistant. Bye', ['w0', 'w1']); // { length: 29, workers: ['w0'] }
 */
export class PrefixTree<W> {
  readonly #root = new TreeNode<W>('', undefined);
  readonly #sizes = new Map<W, number>();
  readonly #maxChars: number;
  #tick = 0;

  /** @param maxChars how many characters of text the tree keeps per worker. */
  constructor(maxChars: number) {
    this.#maxChars = maxChars;
  }

  /** Characters of text the tree holds for `worker`. */
  sizeOf(worker: W): number {
    return this.#sizes.get(worker) ?? 0;
  }

  /** Records that `text` was sent to `worker` (the worker now caches its prefixes). */
  insert(text: string, worker: W): void {
    const tick = ++this.#tick;
    let node = this.#root;
    let at = 0;
    let added = 0;
    while (at < text.length) {
      let child = node.children.get(text.codePointAt(at) as number);
      if (child === undefined) {
        child = new TreeNode<W>(text.slice(at), node);
        node.children.set(text.codePointAt(at) as number, child);
      } else {
        const common = commonLength(child.edge, text, at);
        if (common < child.edge.length) child = child.split(common);
      }
      if (!child.tenants.has(worker)) added += child.edge.length;
      child.tenants.set(worker, tick);
      at += child.edge.length;
      node = child;
    }
    const size = this.sizeOf(worker) + added;
    this.#sizes.set(worker, size);
    if (size > this.#maxChars) this.#evict(worker, Math.floor(this.#maxChars * 0.9));
  }

  /**
   * The longest prefix of `text` the tree holds for any of `candidates`, and which of them
   * hold it (in the order of `candidates`); `{ length: 0, workers: [] }` when none holds any.
   */
  match(text: string, candidates: readonly W[]): { length: number; workers: W[] } {
    let node = this.#root;
    let at = 0;
    let best: TreeNode<W> | undefined;
    let bestLength = 0;
    while (at < text.length) {
      const child = node.children.get(text.codePointAt(at) as number);
      if (child === undefined) break;
      const common = commonLength(child.edge, text, at);
      // A worker on a node is on every node above it: once no candidate is here, none is below.
      if (!candidates.some((worker) => child.tenants.has(worker))) break;
      best = child;
      bestLength = at + common;
      if (common < child.edge.length) break;
      at += common;
      node = child;
    }
    if (best === undefined) return { length: 0, workers: [] };
    const holder = best;
    return { length: bestLength, workers: candidates.filter((worker) => holder.tenants.has(worker)) };
  }

  /** Forgets everything sent to `worker` (it left the rotation: its cache is not to be counted on). */
  remove(worker: W): void {
    if (!this.#sizes.has(worker)) return;
    this.#sizes.delete(worker);
    const stack = [this.#root];
    while (stack.length > 0) {
      const node = stack.pop() as TreeNode<W>;
      for (const child of node.children.values()) {
        if (!child.tenants.delete(worker)) continue;
        if (child.tenants.size === 0) node.children.delete(child.edge.codePointAt(0) as number);
        else stack.push(child);
      }
    }
  }

  /** Drops `worker`'s least recently used leaves until it holds at most `target` characters. */
  #evict(worker: W, target: number): void {
    let size = this.sizeOf(worker);
    while (size > target) {
      const leaves = this.#leavesOf(worker);
      if (leaves.length === 0) break;
      leaves.sort((a, b) => (a.tenants.get(worker) as number) - (b.tenants.get(worker) as number));
      for (const leaf of leaves) {
        if (size <= target) break;
        leaf.tenants.delete(worker);
        size -= leaf.edge.length;
        if (leaf.tenants.size === 0) leaf.detach();
      }
    }
    this.#sizes.set(worker, size);
  }

  /** The nodes that list `worker` while none of their children does. */
  #leavesOf(worker: W): TreeNode<W>[] {
    const leaves: TreeNode<W>[] = [];
    const stack = [this.#root];
    while (stack.length > 0) {
      const node = stack.pop() as TreeNode<W>;
      let below = false;
      for (const child of node.children.values()) {
        if (child.tenants.has(worker)) {
          below = true;
          stack.push(child);
        }
      }
      if (!below && node !== this.#root) leaves.push(node);
    }
    return leaves;
  }
}

class TreeNode<W> {
  edge: string;
  parent: TreeNode<W> | undefined;
  /** By the first code point of their edge (not code unit: two emoji may share a high surrogate). */
  readonly children = new Map<number, TreeNode<W>>();
  /** The workers whose texts pass through this node, with the tick of their last insert. */
  tenants = new Map<W, number>();

  constructor(edge: string, parent: TreeNode<W> | undefined) {
    this.edge = edge;
    this.parent = parent;
  }

  /** Splits this node's edge after `length` characters; returns the new upper node. */
  split(length: number): TreeNode<W> {
    const parent = this.parent as TreeNode<W>;
    const upper = new TreeNode<W>(this.edge.slice(0, length), parent);
    upper.tenants = new Map(this.tenants);
    parent.children.set(upper.edge.codePointAt(0) as number, upper);
    this.edge = this.edge.slice(length);
    this.parent = upper;
    upper.children.set(this.edge.codePointAt(0) as number, this);
    return upper;
  }

  detach(): void {
    this.parent?.children.delete(this.edge.codePointAt(0) as number);
    this.parent = undefined;
  }
}

/**
 * How many code units `edge` and `text` from `at` have in common, never ending between the two
 * halves of a surrogate pair in either (a lone high surrogate is not the start of an emoji).
 */
function commonLength(edge: string, text: string, at: number): number {
  let n: number;
  // The usual case, a whole edge matched. Equality of two slices is a memory compare in V8;
  // `startsWith` compares character by character, sixty times slower on a long edge.
  if (sameAt(text, at, edge, 0, edge.length)) n = edge.length;
  else {
    const limit = Math.min(edge.length, text.length - at);
    n = 0;
    // A stretch at a time up to the stretch that differs (a long shared history costs a few
    // memory compares, not a loop over every character), then character by character.
    while (n + STRETCH <= limit && sameAt(text, at + n, edge, n, STRETCH)) n += STRETCH;
    while (n < limit && edge.charCodeAt(n) === text.charCodeAt(at + n)) n++;
  }
  if (n > 0 && isHigh(edge.charCodeAt(n - 1)) && (isLow(edge.charCodeAt(n)) || isLow(text.charCodeAt(at + n)))) n--;
  return n;
}

/** Whether `a` from `i` and `b` from `j` hold the same `length` characters. */
function sameAt(a: string, i: number, b: string, j: number, length: number): boolean {
  return i + length <= a.length && a.substring(i, i + length) === b.substring(j, j + length);
}

/** Characters compared natively at a time when an edge is not matched whole. */
const STRETCH = 256;

function isHigh(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function isLow(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
