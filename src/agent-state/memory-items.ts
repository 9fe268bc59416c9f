// A conversation's items as the in-memory store keeps them: their JSON in an array, in order,
// and each id's place in it, so that a page after a cursor starts where the cursor is instead
// of scanning from the first item (a long agent conversation is paged many times). A deleted
// item leaves a hole, filled in when holes outnumber the items: one delete is O(1), amortized.
// Ids and JSON sit in two arrays rather than an object per item: 40 bytes less heap an item,
// a quarter of what an item costs besides its JSON (measured in test/agent-state/memory.test.ts).

import type { ItemsQuery } from './agent-store.js';

/** One item to store: its id, its JSON, and the bytes it counts for (the JSON's, in UTF-8). */
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
  // The same place in both; a hole is undefined in both.
  private ids: Array<string | undefined> = [];
  private jsons: Array<string | undefined> = [];
  private readonly places = new Map<string, number>();
  private holes = 0;

  /** How many items it holds. */
  get size(): number {
    return this.ids.length - this.holes;
  }

  /** Adds `items` at the end, in order. */
  append(items: readonly StoredItem[]): void {
    for (const item of items) {
      this.places.set(item.id, this.ids.length);
      this.ids.push(item.id);
      this.jsons.push(item.json);
    }
  }

  /** The JSON of the item `id`, if held. */
  get(id: string): string | undefined {
    const place = this.places.get(id);
    return place === undefined ? undefined : this.jsons[place];
  }

  /** Removes the item `id`: the bytes it counted for, undefined if it was not held. */
  delete(id: string): number | undefined {
    const place = this.places.get(id);
    if (place === undefined) return undefined;
    const json = this.jsons[place] as string;
    this.ids[place] = undefined;
    this.jsons[place] = undefined;
    this.places.delete(id);
    this.holes++;
    if (this.holes >= MIN_HOLES_TO_COMPACT && this.holes > this.size) this.compact();
    return Buffer.byteLength(json);
  }

  /** The JSON of at most `limit` items after the item `after` (exclusive) in `order`; none when `after` is not held. */
  page(query: ItemsQuery): { items: string[]; hasMore: boolean } {
    const step = query.order === 'asc' ? 1 : -1;
    let at: number;
    if (query.after === undefined) at = step === 1 ? 0 : this.jsons.length - 1;
    else {
      const place = this.places.get(query.after);
      if (place === undefined) return { items: [], hasMore: false };
      at = place + step;
    }
    const items: string[] = [];
    for (; at >= 0 && at < this.jsons.length; at += step) {
      const json = this.jsons[at];
      if (json === undefined) continue;
      if (items.length >= query.limit) return { items, hasMore: true };
      items.push(json);
    }
    return { items, hasMore: false };
  }

  private compact(): void {
    const ids: string[] = [];
    const jsons: string[] = [];
    this.places.clear();
    for (let at = 0; at < this.ids.length; at++) {
      const id = this.ids[at];
      if (id === undefined) continue;
      this.places.set(id, ids.length);
      ids.push(id);
      jsons.push(this.jsons[at] as string);
    }
    this.ids = ids;
    this.jsons = jsons;
    this.holes = 0;
  }
}
