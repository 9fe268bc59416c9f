import { randomBytes } from 'node:crypto';

/** How many answers' decode workers are remembered: the last 65,536. */
/** How many answers' homes are remembered at most. */
export const REMEMBERED = 65_536;

/**
 * What the remembered ids and owners may hold in all, counted as UTF-16 (two bytes a
 * character) with {@link ENTRY_COST} per entry: 16 MiB. Ordinary ids (vLLM's are 37
 * characters) fill the entries first; the bytes bound long ones a worker or a client chose.
 */
const REMEMBERED_BYTES = 16 * 1024 * 1024;

/** About what a `Map` entry and its record hold besides the two strings. */
const ENTRY_COST = 96;

/**
 * The longest answer id remembered: a worker's id past it (the router's own are 37
 * characters, a client's at most 64) is served, but its GET answers 404.
 */
const MAX_REMEMBERED_ID = 256;

/** A Responses id the router hands out when the client names none: as vLLM's, `resp_` and 128 random bits. */
export function newResponseId(): string {
  return `resp_${randomBytes(16).toString('hex')}`;
}

/** An answer the router knows: whose it is, and the decode worker holding it (none while it is served). */
interface Home<W> {
  readonly owner: string;
  worker: W | undefined;
}

/** Options of {@link ResponseHomes}: its bounds (the defaults above; smaller in tests). */
export interface ResponseHomesLimits {
  entries?: number | undefined;
  bytes?: number | undefined;
}

/**
 * The Responses answers this router handed out, by id: whose each is (the tenant that asked
 * for it) and which decode worker served it, where its `GET /v1/responses/{id}` and `cancel`
 * must go, since only that worker's store can hold it (vLLM's, with
 * `VLLM_ENABLE_RESPONSES_API_STORE`). An id is claimed before its request reaches a worker,
 * so no request may take one already known (another tenant's, or one under way), and only its
 * owner finds it again. Bounded in entries and in bytes, oldest forgotten first.
 *
 * @internal
 */
export class ResponseHomes<W> {
  readonly #homes = new Map<string, Home<W>>();
  readonly #entries: number;
  readonly #maxBytes: number;
  #bytes = 0;

  constructor(limits: ResponseHomesLimits = {}) {
    this.#entries = limits.entries ?? REMEMBERED;
    this.#maxBytes = limits.bytes ?? REMEMBERED_BYTES;
  }

  /** How many answers are known, and what their ids and owners hold (see {@link REMEMBERED_BYTES}). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#homes.size, bytes: this.#bytes };
  }

  /**
   * Claims `id` for a request of `owner` about to be served; false when the id is known
   * already (served, or under way), whoever's it is: a client may not take another's id, nor
   * point it at its own worker.
   */
  claim(id: string, owner: string): boolean {
    if (this.#homes.has(id) || id.length > MAX_REMEMBERED_ID) return false;
    this.#add(id, { owner, worker: undefined });
    return true;
  }

  /**
   * The request that claimed `claimed` is over: answered as `answerId` by `worker` (the
   * worker's own id, the claimed one unless the engine ignored it), or not answered at all
   * (both undefined), when the claim is let go.
   */
  settle(claimed: string, answerId: string | undefined, worker: W | undefined): void {
    const home = this.#homes.get(claimed);
    if (home === undefined || home.worker !== undefined) return;
    if (answerId === claimed && worker !== undefined) {
      home.worker = worker;
      return;
    }
    this.#delete(claimed, home);
    if (answerId !== undefined && worker !== undefined && this.claim(answerId, home.owner)) {
      (this.#homes.get(answerId) as Home<W>).worker = worker;
    }
  }

  /** The worker that served `id`, if it is remembered and `owner`'s; undefined for anyone else's. */
  homeOf(id: string, owner: string): W | undefined {
    const home = this.#homes.get(id);
    return home?.owner === owner ? home.worker : undefined;
  }

  #add(id: string, home: Home<W>): void {
    this.#homes.set(id, home);
    this.#bytes += costOf(id, home);
    // Oldest first (a Map keeps insertion order).
    for (const [oldest, its] of this.#homes) {
      if (this.#homes.size <= this.#entries && this.#bytes <= this.#maxBytes) break;
      this.#delete(oldest, its);
    }
  }

  #delete(id: string, home: Home<W>): void {
    this.#homes.delete(id);
    this.#bytes -= costOf(id, home);
  }
}

function costOf(id: string, home: Home<unknown>): number {
  return 2 * (id.length + home.owner.length) + ENTRY_COST;
}
