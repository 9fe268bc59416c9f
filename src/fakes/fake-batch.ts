// A decode engine's batch: at most so many requests run at once (vLLM's --max-num-seqs,
// SGLang's --max-running-requests); the rest wait in its queue, answering nothing, as an
// engine's waiting requests do until the scheduler takes them.
import type { ServerResponse } from 'node:http';

/** The seats of a fake decode worker's batch, and the queue before them. */
export class BatchSeats {
  readonly #max: number;
  #seated = 0;
  /** Who waits for a seat, first come first seated. */
  readonly #queue = new Set<() => void>();

  /** `max` seats; unlimited when undefined. */
  constructor(max: number | undefined) {
    this.#max = max ?? Number.POSITIVE_INFINITY;
  }

  /** Requests waiting for a seat: what the engine's `num_requests_waiting` reports. */
  get waiting(): number {
    return this.#queue.size;
  }

  /**
   * Seats the request `res` answers, after those before it: true once seated (the seat is
   * freed when `res` closes), false when `res` closed while it waited.
   */
  async seat(res: ServerResponse): Promise<boolean> {
    if (this.#seated >= this.#max || this.#queue.size > 0) {
      const seated = await new Promise<boolean>((resolve) => {
        const turn = () => {
          res.off('close', gone);
          resolve(true);
        };
        const gone = () => {
          this.#queue.delete(turn);
          resolve(false);
        };
        this.#queue.add(turn);
        res.once('close', gone);
      });
      if (!seated) return false;
    }
    this.#seated++;
    res.once('close', () => {
      this.#seated--;
      this.#next();
    });
    return true;
  }

  #next(): void {
    if (this.#seated >= this.#max) return;
    const [turn] = this.#queue;
    if (turn === undefined) return;
    this.#queue.delete(turn);
    turn();
  }
}
