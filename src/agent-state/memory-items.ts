// A conversation's items as the in-memory store keeps them: their JSON in an array, in order,
// and each id's place in it, so that a page after a cursor starts where the cursor is instead
// of scanning from the first item (a long agent conversation is paged many times). A deleted
// item leaves a hole, filled in when holes outnumber the items: one delete is O(1), amortized.

import type { ItemsQuery } from './agent-store.js';

/** One item as stored: its id, its JSON, and the bytes it counts for (the JSON's, in UTF-8). */
export interface StoredItem {
  readonly id: string;
  readonly json: string;
  readonly bytes: number;
}

/** Holes below this many are never filled in: a short list is not worth copying. */
const MIN_HOLES_TO_COMPACT = 32;

/**
 * The items of one conversation, in order, found by id in O(1) and paged from a cursor in
 * O(page). Ids are expected unique (the contract's precondition); a repeated one is kept in
 * order and counted, and its id finds the later of the two.
 *
 * @example
 * const items = new ItemList();
 * items.append([{ id: 'msg_1', json: '{"id":"msg_1"}', bytes: 14 }]);
 * items.page({ limit: 10, order: 'asc' }).items; // ['{"id":"msg_1"}']
 */
export class ItemList {
  private slots: Array<StoredItem | undefined> = [];
  private readonly places = new Map<string, number>();
  private holes = 0;

  /** How many items it holds. */
  get size(): number {
    return this.slots.length - this.holes;
  }

  /** Adds `items` at the end, in order. */
  append(items: readonly StoredItem[]): void {
    for (const item of items) {
      this.places.set(item.id, this.slots.length);
      this.slots.push(item);
    }
  }

  /** The item `id`, if held. */
  get(id: string): StoredItem | undefined {
    const place = this.places.get(id);
    return place === undefined ? undefined : this.slots[place];
  }

  /** Removes the item `id`: what it was, undefined if it was not held. */
  delete(id: string): StoredItem | undefined {
    const place = this.places.get(id);
    if (place === undefined) return undefined;
    const item = this.slots[place];
    this.slots[place] = undefined;
    this.places.delete(id);
    this.holes++;
    if (this.holes >= MIN_HOLES_TO_COMPACT && this.holes > this.size) this.compact();
    return item;
  }

  /** At most `limit` items after the item `after` (exclusive) in `order`; none when `after` is not held. */
  page(query: ItemsQuery): { items: StoredItem[]; hasMore: boolean } {
    const step = query.order === 'asc' ? 1 : -1;
    let at: number;
    if (query.after === undefined) at = step === 1 ? 0 : this.slots.length - 1;
    else {
      const place = this.places.get(query.after);
      if (place === undefined) return { items: [], hasMore: false };
      at = place + step;
    }
    const items: StoredItem[] = [];
    for (; at >= 0 && at < this.slots.length; at += step) {
      const item = this.slots[at];
      if (item === undefined) continue;
      if (items.length >= query.limit) return { items, hasMore: true };
      items.push(item);
    }
    return { items, hasMore: false };
  }

  private compact(): void {
    const slots: StoredItem[] = [];
    this.places.clear();
    for (const item of this.slots) {
      if (item === undefined) continue;
      this.places.set(item.id, slots.length);
      slots.push(item);
    }
    this.slots = slots;
    this.holes = 0;
  }
}
