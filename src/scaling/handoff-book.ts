// The handoffs outstanding: a prefill has done its part and holds the KV, and decode has not
// yet taken it. Only a P/D router sees this window; its count and age are the signal that the
// prefill workers' KV waits on decode (llm-d-autoscaling #1325's outstanding KV exports).
import type { FlowEvent } from '../flow/events.js';

/** How an outstanding handoff ended: decode took the KV, or it was given up (released, orphaned, retried). */
export type HandoffEnd = 'claimed' | 'released';

/** One pool's outstanding handoffs: when each began, oldest first (a Set keeps insertion order). */
class PoolHandoffs {
  readonly open = new Set<{ at: number }>();
}

/**
 * The outstanding handoffs of every pool: opened when a request's prefill has completed and
 * its handoff is made, closed when decode claims the KV or the handoff is given up, with its
 * age. Read at a scrape (`outstanding`, `oldestSeconds`).
 *
 * @example
 * const book = new HandoffBook();
 * const ages: number[] = [];
 * const listen = book.listener('default', (age) => ages.push(age));
 * // feed it a request's flow events: prefillCompleted, handoff, then kvClaimed closes it.
 */
export class HandoffBook {
  readonly #pools = new Map<string, PoolHandoffs>();
  readonly #now: () => number;

  /** `now` in milliseconds; `performance.now()` by default. */
  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** The pools that have had a handoff, for a scrape to name (0 outstanding keeps a series). */
  get pools(): readonly string[] {
    return [...this.#pools.keys()];
  }

  /** Handoffs of `pool` outstanding now. */
  outstanding(pool: string): number {
    return this.#pools.get(pool)?.open.size ?? 0;
  }

  /** The age of `pool`'s oldest outstanding handoff in seconds; 0 with none. */
  oldestSeconds(pool: string): number {
    const first = this.#pools.get(pool)?.open.values().next();
    return first === undefined || first.done === true ? 0 : (this.#now() - first.value.at) / 1000;
  }

  /**
   * A listener for one request's flow events in `pool`: its handoff is outstanding from the
   * later of `prefillCompleted` and `handoff` until `kvClaimed` (`claimed`), or until it is
   * given up (`released`: the KV released or orphaned, the request retried from prefill, or
   * settled unclaimed). `closed` hears each one's age in seconds.
   */
  listener(pool: string, closed: (ageSeconds: number, end: HandoffEnd) => void): (event: FlowEvent) => void {
    let phase: HandoffPhase = { kind: 'waiting', prefilled: false, handedOff: false };
    /** The book's entry while the phase is outstanding. */
    let entry: { at: number } | undefined;
    return (event) => {
      const next = nextHandoffPhase(phase, event.type);
      if (next === phase) return;
      if (entry !== undefined) {
        this.#side(pool).open.delete(entry);
        closed((this.#now() - entry.at) / 1000, next.kind === 'claimed' ? 'claimed' : 'released');
        entry = undefined;
      }
      if (next.kind === 'outstanding') {
        entry = { at: this.#now() };
        this.#side(pool).open.add(entry);
      }
      phase = next;
    };
  }

  #side(pool: string): PoolHandoffs {
    let side = this.#pools.get(pool);
    if (side === undefined) {
      side = new PoolHandoffs();
      this.#pools.set(pool, side);
    }
    return side;
  }
}

/**
 * Where one request's handoff stands: before it (which of prefill's completion and the handoff
 * have happened), outstanding, claimed by decode, or over without a claim.
 */
export type HandoffPhase =
  | { kind: 'waiting'; prefilled: boolean; handedOff: boolean }
  | { kind: 'outstanding' }
  | { kind: 'claimed' }
  | { kind: 'over' };

/** Events that give a handoff up: its KV released or orphaned, the request over. */
const GIVEN_UP: ReadonlySet<FlowEvent['type']> = new Set(['handoffReleased', 'cleanupExpired', 'settled']);

/**
 * The one transition of a handoff's phase on a flow event; the same phase when the event does
 * not move it. A retry from prefill starts a new handoff (the old one given up).
 */
export function nextHandoffPhase(phase: HandoffPhase, event: FlowEvent['type']): HandoffPhase {
  if (event === 'prefillRetried') {
    return phase.kind === 'waiting' && !phase.prefilled && !phase.handedOff
      ? phase
      : { kind: 'waiting', prefilled: false, handedOff: false };
  }
  switch (phase.kind) {
    case 'waiting': {
      if (event === 'kvClaimed') return { kind: 'claimed' };
      if (GIVEN_UP.has(event)) return { kind: 'over' };
      const prefilled = phase.prefilled || event === 'prefillCompleted';
      const handedOff = phase.handedOff || event === 'handoff';
      if (prefilled === phase.prefilled && handedOff === phase.handedOff) return phase;
      return prefilled && handedOff ? { kind: 'outstanding' } : { kind: 'waiting', prefilled, handedOff };
    }
    case 'outstanding':
      if (event === 'kvClaimed') return { kind: 'claimed' };
      return GIVEN_UP.has(event) ? { kind: 'over' } : phase;
    case 'claimed':
    case 'over':
      return phase;
  }
}
