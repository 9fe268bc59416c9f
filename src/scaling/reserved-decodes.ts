// Decode legs chosen but not yet sent: a sequential request holds its decode worker's lease
// from the routing decision (so that routing counts the seat it will take), while its prompt
// is still being prefilled. The decode stage's own load leaves them out, or a slow prefill
// would read as a busy decode.
import type { FlowEvent } from '../flow/events.js';

/** What one pool's reserved decode legs add up to, per worker and in all. */
class PoolReservations {
  readonly byWorker = new Map<unknown, number>();
  requests = 0;
  tokens = 0;
}

/**
 * The decode legs of every pool that are reserved (routed) and not yet dispatched, by worker,
 * with their prompt tokens.
 *
 * @example
 * const reserved = new ReservedDecodes();
 * const listen = reserved.listener('default', () => 1200);
 * // routed (with its decode worker) reserves; decodeDispatched, a retry or the end gives it back.
 */
export class ReservedDecodes {
  readonly #pools = new Map<string, PoolReservations>();

  /** Reserved decode legs of `pool` on `worker`. */
  on(pool: string, worker: unknown): number {
    return this.#pools.get(pool)?.byWorker.get(worker) ?? 0;
  }

  /** Reserved decode legs of `pool`, and their prompt tokens. */
  of(pool: string): { requests: number; tokens: number } {
    const side = this.#pools.get(pool);
    return { requests: side?.requests ?? 0, tokens: side?.tokens ?? 0 };
  }

  /**
   * A listener for one request's flow events in `pool`: a disaggregated `routed` reserves its
   * decode worker with the prompt's `tokens` (read then: the prompt is tokenized by routing);
   * `decodeDispatched`, `prefillRetried` (routed again) or the request's end gives it back.
   */
  listener(pool: string, tokens: () => number): (event: FlowEvent) => void {
    let held: { worker: unknown; tokens: number } | undefined;
    const giveBack = () => {
      if (held === undefined) return;
      const side = this.#side(pool);
      const left = (side.byWorker.get(held.worker) ?? 1) - 1;
      if (left === 0) side.byWorker.delete(held.worker);
      else side.byWorker.set(held.worker, left);
      side.requests -= 1;
      side.tokens -= held.tokens;
      held = undefined;
    };
    return (event) => {
      switch (event.type) {
        case 'routed': {
          giveBack();
          if (event.strategy === 'aggregated' || event.decodeWorker === undefined) return;
          held = { worker: event.decodeWorker, tokens: tokens() };
          const side = this.#side(pool);
          side.byWorker.set(held.worker, (side.byWorker.get(held.worker) ?? 0) + 1);
          side.requests += 1;
          side.tokens += held.tokens;
          return;
        }
        case 'decodeDispatched':
        case 'prefillRetried':
        case 'finished':
        case 'settled':
          giveBack();
          return;
        default:
          return;
      }
    };
  }

  #side(pool: string): PoolReservations {
    let side = this.#pools.get(pool);
    if (side === undefined) {
      side = new PoolReservations();
      this.#pools.set(pool, side);
    }
    return side;
  }
}
