/** One KV handoff as a fake prefill worker sees it. */
export interface KvHandoff {
  /** What decode names to take it: the room (SGLang) or the transfer key (vLLM). */
  readonly key: string;
  /** The request id prefill was called with. */
  readonly requestId: string;
  /**
   * `held`: committed, waiting for decode; `claimed`: decode took it; `stranded`: freed unclaimed
   * by the prefill worker's own timeout (vLLM's lease), or by an abort while it waited for
   * decode (SGLang); `released`: freed unclaimed at once because a decode worker said it will
   * not take it (vLLM's rejection clean-up, or a decode aborted before it pulled).
   */
  state: 'held' | 'claimed' | 'stranded' | 'released';
  readonly committedAt: number;
  /**
   * Times a decode worker read these blocks after they were freed: it computed on memory that
   * may already hold another request's KV. vLLM's NIXL reads cannot tell (prefill only logs
   * "Potentially invalid KV blocks for unrecognized request"), so such a decode answers 200.
   */
  staleReads: number;
}

/** What a decode worker's read of a handoff found: the KV, freed blocks, or nothing committed. */
export type KvRead = 'claimed' | 'stale' | 'unknown';

/**
 * The KV a fake prefill worker has committed for decode workers, and what became of it.
 * Tests assert on it that nothing was stranded: every handoff claimed by a decode worker, none
 * left held or freed by the prefill worker's own timeout.
 *
 * @example
 * expect(prefill.ledger.outstanding()).toEqual([]);
 * expect(prefill.ledger.stranded()).toEqual([]);
 */
export class KvLedger {
  readonly #handoffs = new Map<string, KvHandoff>();
  /** The call that committed each handoff still held, when its committer named it. */
  readonly #owners = new Map<string, object>();
  readonly #onChange: ((handoff: KvHandoff, owner: object | undefined) => void) | undefined;

  /**
   * @param options.onChange told of each handoff as it is committed (`held`) and as it stops
   *   being held, with the call its committer named (a simulated engine frees that call's KV).
   */
  constructor(options: { onChange?: ((handoff: KvHandoff, owner: object | undefined) => void) | undefined } = {}) {
    this.#onChange = options.onChange;
  }
  readonly #waiting = new Map<string, Array<(handoff: KvHandoff | undefined) => void>>();
  readonly #releasing = new Map<string, Array<(state: KvHandoff['state'] | undefined) => void>>();

  /** Every handoff, in the order committed. */
  all(): KvHandoff[] {
    return [...this.#handoffs.values()];
  }

  /** Committed and not yet claimed (nor freed). */
  outstanding(): KvHandoff[] {
    return this.all().filter((handoff) => handoff.state === 'held');
  }

  /** Freed by the prefill worker's timeout because no decode claimed them. */
  stranded(): KvHandoff[] {
    return this.all().filter((handoff) => handoff.state === 'stranded');
  }

  /** Claimed by a decode worker. */
  claimed(): KvHandoff[] {
    return this.all().filter((handoff) => handoff.state === 'claimed');
  }

  /** Freed at once, unclaimed, because a decode worker said it would not take them. */
  released(): KvHandoff[] {
    return this.all().filter((handoff) => handoff.state === 'released');
  }

  /** Read by a decode worker after they were freed: answers computed on blocks that were not theirs. */
  staleReads(): KvHandoff[] {
    return this.all().filter((handoff) => handoff.staleReads > 0);
  }

  /**
   * Records KV committed for `key` by the call `owner` (if named); wakes a decode that was
   * waiting for it.
   */
  commit(key: string, requestId: string, owner?: object): KvHandoff {
    const handoff: KvHandoff = { key, requestId, state: 'held', committedAt: Date.now(), staleReads: 0 };
    this.#handoffs.set(key, handoff);
    if (owner !== undefined) this.#owners.set(key, owner);
    this.#onChange?.(handoff, owner);
    const waiting = this.#waiting.get(key);
    this.#waiting.delete(key);
    for (const wake of waiting ?? []) wake(handoff);
    return handoff;
  }

  /** Takes the KV of `key`: true if it was held (and is now claimed). */
  claim(key: string): boolean {
    const handoff = this.#handoffs.get(key);
    if (handoff === undefined || handoff.state !== 'held') return false;
    this.#release(handoff, 'claimed');
    return true;
  }

  /**
   * A decode worker's read of `key` as vLLM's NIXL does it: the held KV is claimed; blocks
   * already freed (taken by an earlier decode, or freed unclaimed) are read all the same (a
   * stale read, counted); a key never committed here is a failed transfer.
   */
  read(key: string): KvRead {
    const handoff = this.#handoffs.get(key);
    if (handoff === undefined) return 'unknown';
    if (handoff.state === 'held') {
      this.#release(handoff, 'claimed');
      return 'claimed';
    }
    // Taken already (prefill frees blocks once they are pulled), or freed unclaimed.
    handoff.staleReads++;
    return 'stale';
  }

  /**
   * Frees a handoff nobody claimed: the worker's own timeout, or its prefill request aborted
   * while it waited for decode. Either way the KV was computed for a decode that never took it.
   */
  strand(key: string): void {
    const handoff = this.#handoffs.get(key);
    if (handoff?.state === 'held') this.#release(handoff, 'stranded');
  }

  /**
   * Frees a held handoff at once because a decode worker will not take it (vLLM's rejection
   * clean-up: decode refused the request, or aborted it before pulling).
   */
  release(key: string): void {
    const handoff = this.#handoffs.get(key);
    if (handoff?.state === 'held') this.#release(handoff, 'released');
  }

  /** How many decode legs are waiting at the rendezvous for `key` to be committed. */
  waitingFor(key: string): number {
    return this.#waiting.get(key)?.length ?? 0;
  }

  /**
   * Resolves with what became of the held handoff of `key` (`claimed`, `stranded` or
   * `released`) once it is no longer held, or undefined on `cancel`.
   */
  whenReleased(key: string): { promise: Promise<KvHandoff['state'] | undefined>; cancel(): void } {
    const known = this.#handoffs.get(key);
    if (known !== undefined && known.state !== 'held') return { promise: Promise.resolve(known.state), cancel() {} };
    return waiter(this.#releasing, key);
  }

  #release(handoff: KvHandoff, state: Exclude<KvHandoff['state'], 'held'>): void {
    handoff.state = state;
    const owner = this.#owners.get(handoff.key);
    this.#owners.delete(handoff.key);
    this.#onChange?.(handoff, owner);
    const waiting = this.#releasing.get(handoff.key);
    this.#releasing.delete(handoff.key);
    for (const wake of waiting ?? []) wake(state);
  }

  /** Resolves with the handoff once `key` is committed (at once if it is), or undefined on `cancel`. */
  whenCommitted(key: string): { promise: Promise<KvHandoff | undefined>; cancel(): void } {
    const known = this.#handoffs.get(key);
    if (known !== undefined) return { promise: Promise.resolve(known), cancel: () => {} };
    return waiter(this.#waiting, key);
  }
}

/** A wait registered under `key` in `map`, woken with a value or undefined on `cancel`. */
function waiter<T>(
  map: Map<string, Array<(value: T | undefined) => void>>,
  key: string,
): { promise: Promise<T | undefined>; cancel(): void } {
  let wake: (value: T | undefined) => void = () => {};
  const promise = new Promise<T | undefined>((resolve) => {
    wake = resolve;
  });
  const list = map.get(key) ?? [];
  list.push(wake);
  map.set(key, list);
  return {
    promise,
    cancel: () => {
      const current = map.get(key);
      if (current === undefined || !current.includes(wake)) return;
      const left = current.filter((entry) => entry !== wake);
      if (left.length === 0) map.delete(key);
      else map.set(key, left);
      wake(undefined);
    },
  };
}
