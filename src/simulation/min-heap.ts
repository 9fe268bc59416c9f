// The one priority queue of the simulation: a binary heap under a `before` order, for the
// virtual clock's events and a KV cache's blocks to drop, oldest first.

/**
 * A binary min-heap: {@link pop} gives the item no other comes `before`.
 *
 * @example
 * const heap = new MinHeap<number>((a, b) => a < b);
 * heap.push(3); heap.push(1);
 * heap.pop(); // 1
 */
export class MinHeap<T> {
  readonly #items: T[] = [];
  readonly #before: (a: T, b: T) => boolean;

  /** @param before whether `a` comes out before `b`. */
  constructor(before: (a: T, b: T) => boolean) {
    this.#before = before;
  }

  /** Items in it. */
  get size(): number {
    return this.#items.length;
  }

  /** The item that comes out next, left in. */
  peek(): T | undefined {
    return this.#items[0];
  }

  push(item: T): void {
    const items = this.#items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before(item, items[parent] as T)) break;
      items[i] = items[parent] as T;
      i = parent;
    }
    items[i] = item;
  }

  /** Takes out the item no other comes before; undefined when empty. */
  pop(): T | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && this.#before(items[right] as T, items[left] as T) ? right : left;
      if (!this.#before(items[child] as T, last)) break;
      items[i] = items[child] as T;
      i = child;
    }
    items[i] = last;
    return top;
  }
}
