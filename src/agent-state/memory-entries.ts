// What the in-memory store holds for each response and each conversation, and the two orders
// it keeps them in: by last use (the least recently used is evicted first) and by last write
// (all objects live the same TTL from their last write, so the oldest write is the first to
// expire, and pruning takes expired ones from that end without looking at the others). Both
// orders are links in the entry itself: moving an entry is O(1) and costs no allocation.

import type { ItemList } from './memory-items.js';

/** One owner's objects, found by id, and what they count for. */
export interface Holding {
  readonly owner: string;
  objects: number;
  bytes: number;
  readonly responses: Map<string, Entry>;
  readonly conversations: Map<string, Entry>;
}

/**
 * A response (`items` undefined) or a conversation with its items: its JSON, and the objects
 * and bytes it counts for (a conversation's with its items'), when it was last written, and
 * its places in the two orders.
 */
export class Entry {
  /** The previous response's id (a response's `previousResponseId`), kept out of the JSON to walk a chain without parsing. */
  previous: string | undefined = undefined;
  writtenAt = 0;
  olderUse: Entry | undefined = undefined;
  newerUse: Entry | undefined = undefined;
  olderWrite: Entry | undefined = undefined;
  newerWrite: Entry | undefined = undefined;

  constructor(
    readonly id: string,
    readonly holding: Holding,
    /** The response's, or the conversation's own (without its items), JSON. */
    public json: string,
    public objects: number,
    public bytes: number,
    readonly items: ItemList | undefined,
  ) {}
}

/** The entries in order of last use, the least recently used first. */
export class UseOrder {
  oldest: Entry | undefined = undefined;
  private newest: Entry | undefined = undefined;

  /** Makes `entry` the most recently used (adding it if it was not in the order). */
  touch(entry: Entry): void {
    if (this.newest === entry) return;
    this.remove(entry);
    entry.olderUse = this.newest;
    if (this.newest === undefined) this.oldest = entry;
    else this.newest.newerUse = entry;
    this.newest = entry;
  }

  /** Takes `entry` out of the order (nothing if it was not in it). */
  remove(entry: Entry): void {
    const { olderUse, newerUse } = entry;
    if (olderUse === undefined) {
      if (this.oldest === entry) this.oldest = newerUse;
    } else olderUse.newerUse = newerUse;
    if (newerUse === undefined) {
      if (this.newest === entry) this.newest = olderUse;
    } else newerUse.olderUse = olderUse;
    entry.olderUse = undefined;
    entry.newerUse = undefined;
  }

  clear(): void {
    this.oldest = undefined;
    this.newest = undefined;
  }
}

/** The entries in order of last write, the oldest write first. */
export class WriteOrder {
  oldest: Entry | undefined = undefined;
  private newest: Entry | undefined = undefined;

  /** Dates `entry`'s write `at`, and makes it the newest write. */
  written(entry: Entry, at: number): void {
    entry.writtenAt = at;
    if (this.newest === entry) return;
    this.remove(entry);
    entry.olderWrite = this.newest;
    if (this.newest === undefined) this.oldest = entry;
    else this.newest.newerWrite = entry;
    this.newest = entry;
  }

  /** Takes `entry` out of the order (nothing if it was not in it). */
  remove(entry: Entry): void {
    const { olderWrite, newerWrite } = entry;
    if (olderWrite === undefined) {
      if (this.oldest === entry) this.oldest = newerWrite;
    } else olderWrite.newerWrite = newerWrite;
    if (newerWrite === undefined) {
      if (this.newest === entry) this.newest = olderWrite;
    } else newerWrite.olderWrite = olderWrite;
    entry.olderWrite = undefined;
    entry.newerWrite = undefined;
  }

  clear(): void {
    this.oldest = undefined;
    this.newest = undefined;
  }
}
