import type { JsonObject } from './agent-store.js';

/**
 * A background response under way on this replica: the events of its stream as they come (each
 * with its `sequence_number`), the streams that follow it (a client that asked for
 * `stream: true`, one resumed by `GET ?stream=true`), and how to stop it. Bounded by the
 * response itself: it ends when the response does, and is dropped then.
 *
 * @example
 * const run = new BackgroundRun('resp_1', 'tenant:default', () => {});
 * const stop = run.follow(-1, (event) => {}, () => {});
 * run.push({ type: 'response.created', sequence_number: 0 });
 * run.end();
 * stop();
 */
export class BackgroundRun {
  readonly events: JsonObject[] = [];
  #ended = false;
  readonly #followers = new Set<{ event: (event: JsonObject) => void; end: () => void }>();
  #markStored: () => void = () => {};
  /** Settles once the run's end is stored (what a cancel answers with is then in the store). */
  readonly stored: Promise<void> = new Promise((resolve) => {
    this.#markStored = resolve;
  });

  constructor(
    readonly id: string,
    readonly owner: string,
    /** Stops the run (both legs): `cancel` of the response. */
    readonly stop: () => void,
  ) {}

  get ended(): boolean {
    return this.#ended;
  }

  /** One more event of the stream: kept, and passed to each follower. */
  push(event: JsonObject): void {
    if (this.#ended) return;
    this.events.push(event);
    for (const follower of this.#followers) follower.event(event);
  }

  /** The stream is over: each follower's `end`, and no more events. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const follower of this.#followers) follower.end();
    this.#followers.clear();
  }

  /** The run's end is stored: see {@link BackgroundRun.stored}. */
  markStored(): void {
    this.#markStored();
  }

  /**
   * Follows the stream from after sequence number `after` (-1: from its start): the events kept
   * so far at once, then each as it comes, then `end`. Returns how to stop following (a client
   * gone); the run goes on.
   */
  follow(after: number, event: (event: JsonObject) => void, end: () => void): () => void {
    for (const kept of this.events) if (sequenceOf(kept) > after) event(kept);
    if (this.#ended) {
      end();
      return () => {};
    }
    const follower = { event, end };
    this.#followers.add(follower);
    return () => this.#followers.delete(follower);
  }
}

/** An event's `sequence_number` (-1 without one). */
export function sequenceOf(event: JsonObject): number {
  return typeof event.sequence_number === 'number' ? event.sequence_number : -1;
}
