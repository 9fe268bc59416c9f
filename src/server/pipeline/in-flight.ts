import type { ServerResponse } from 'node:http';
import { finished } from '../../http/node-server.js';
import type { Controller } from '../../runtime/controller.js';

/** A request under way, as shutdown sees it. */
export interface InFlightRequest {
  readonly context: Controller;
  readonly res: ServerResponse;
  /**
   * Ends the request now: stops its context and answers `error` (a shutdown's by default; a
   * preemption's), a 503 before the first byte or the API's error event once streaming.
   */
  shutdown: (error?: unknown) => void;
}

/**
 * The requests under way, so that shutdown can let them finish within a grace period and end
 * the rest cleanly.
 *
 * @internal
 */
export class InFlightRequests {
  readonly #entries = new Set<InFlightRequest>();
  /** Responses shutdown ended: counted as cut by shutdown, not as clients that left. */
  readonly #cut = new WeakSet<ServerResponse>();
  /** Wakes a drain waiting for the last request to end. */
  #emptied: (() => void) | undefined;

  get size(): number {
    return this.#entries.size;
  }

  /** Whether shutdown ended this response before its end (past the grace period). */
  wasCut(res: ServerResponse): boolean {
    return this.#cut.has(res);
  }

  add(entry: InFlightRequest): void {
    this.#entries.add(entry);
  }

  delete(entry: InFlightRequest): void {
    this.#entries.delete(entry);
    if (this.#entries.size === 0) this.#emptied?.();
  }

  /**
   * Waits until no request is under way, or `graceMs` have passed; then ends the rest with a
   * shutdown error and waits for those last answers to leave (at most `lastWordsMs`: a client
   * may not read).
   */
  async drain(graceMs: number, lastWordsMs = 1000): Promise<void> {
    if (this.#entries.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMs);
        this.#emptied = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#emptied = undefined;
    }
    const ending = [...this.#entries].map((entry) => {
      this.#cut.add(entry.res);
      entry.shutdown();
      return finished(entry.res);
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(ending),
      new Promise((resolve) => {
        timer = setTimeout(resolve, lastWordsMs);
      }),
    ]);
    clearTimeout(timer);
  }
}
