/** One KV handoff as a fake prefill worker sees it. */
export interface KvHandoff {
  /** What decode names to take it: the room (SGLang) or the transfer key (vLLM). */
  readonly key: string;
  /** The request id prefill was called with. */
  readonly requestId: string;
  /** `held`: committed, waiting for decode; `claimed`: decode took it; `stranded`: freed by timeout. */
  state: 'held' | 'claimed' | 'stranded';
  readonly committedAt: number;
}

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
  readonly #waiting = new Map<string, Array<(handoff: KvHandoff | undefined) => void>>();

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

  /** Records KV committed for `key`; wakes a decode that was waiting for it. */
  commit(key: string, requestId: string): KvHandoff {
    const handoff: KvHandoff = { key, requestId, state: 'held', committedAt: Date.now() };
    this.#handoffs.set(key, handoff);
    const waiting = this.#waiting.get(key);
    this.#waiting.delete(key);
    for (const wake of waiting ?? []) wake(handoff);
    return handoff;
  }

  /** Takes the KV of `key`: true if it was held (and is now claimed). */
  claim(key: string): boolean {
    const handoff = this.#handoffs.get(key);
    if (handoff === undefined || handoff.state !== 'held') return false;
    handoff.state = 'claimed';
    return true;
  }

  /** Frees a handoff nobody claimed (the worker's own timeout). */
  strand(key: string): void {
    const handoff = this.#handoffs.get(key);
    if (handoff?.state === 'held') handoff.state = 'stranded';
  }

  /** Resolves with the handoff once `key` is committed (at once if it is), or undefined on `cancel`. */
  whenCommitted(key: string): { promise: Promise<KvHandoff | undefined>; cancel(): void } {
    const known = this.#handoffs.get(key);
    if (known !== undefined) return { promise: Promise.resolve(known), cancel: () => {} };
    let wake: (handoff: KvHandoff | undefined) => void = () => {};
    const promise = new Promise<KvHandoff | undefined>((resolve) => {
      wake = resolve;
    });
    const list = this.#waiting.get(key) ?? [];
    list.push(wake);
    this.#waiting.set(key, list);
    return {
      promise,
      cancel: () => {
        const current = this.#waiting.get(key);
        if (current === undefined) return;
        const left = current.filter((entry) => entry !== wake);
        if (left.length === 0) this.#waiting.delete(key);
        else this.#waiting.set(key, left);
        wake(undefined);
      },
    };
  }
}
