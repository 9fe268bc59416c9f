// The cap on Envoy's ext_proc streams open at once (`--max-ext-proc-streams`): each open stream
// holds the picker's memory (about 8 KB, and its request body while it is read), and the
// gateway's clients choose how many requests they send and how slowly. Past the cap a new
// stream is refused at once; the streams open are untouched.
import type { Logger } from '../runtime/logger.js';

/** How long one refusal line stands for the refusals after it: 10 s. */
export const REFUSAL_LOG_INTERVAL_MS = 10_000;

/**
 * The default of `--max-ext-proc-streams`: twice what admission lets hold a stream (requests
 * served at once and those queued), so that a busy gateway meets admission's 429 first and the
 * cap only stops what admission never sees (bodies still coming, streams that never end).
 *
 * @example defaultMaxExtProcStreams({ maxConcurrentRequests: 1024, queueSize: 1024 }); // 4096
 */
export function defaultMaxExtProcStreams(admission: { maxConcurrentRequests: number; queueSize: number }): number {
  return 2 * (admission.maxConcurrentRequests + admission.queueSize);
}

/**
 * The slots of open ext_proc streams: {@link take} one as a stream opens (false: refuse it),
 * {@link give} it back once as it ends, however it ends. A refusal is logged at once, then at
 * most once per `intervalMs` with the count of those since (an overloaded gateway refused
 * thousands of times a second writes one line, not thousands).
 *
 * @example
 * const slots = new StreamSlots(4096, logger);
 * if (!slots.take()) return refuse(call);
 * call.on('close', once(() => slots.give()));
 */
export class StreamSlots {
  readonly #max: number;
  readonly #logger: Logger;
  readonly #intervalMs: number;
  readonly #now: () => number;
  #open = 0;
  #loggedAt: number | undefined;
  /** Refusals since the last line, not yet told. */
  #unlogged = 0;

  /**
   * @param max the most streams open at once (`maxExtProcStreams`).
   * @param options `intervalMs`: how long a refusal line stands for those after it
   *   ({@link REFUSAL_LOG_INTERVAL_MS} by default); `now`: the clock in ms (a test gives its own).
   */
  constructor(
    max: number,
    logger: Logger,
    options: { intervalMs?: number | undefined; now?: (() => number) | undefined } = {},
  ) {
    this.#max = max;
    this.#logger = logger;
    this.#intervalMs = options.intervalMs ?? REFUSAL_LOG_INTERVAL_MS;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Streams open now. */
  get open(): number {
    return this.#open;
  }

  /** The gRPC status message of a refused stream: the cap, and the setting that sets it. */
  get refusal(): string {
    return `The endpoint picker has ${this.#max} ext_proc streams open, its limit (--max-ext-proc-streams); try again when one ends`;
  }

  /** A slot for a new stream; false when all are taken (the refusal is counted for the log). */
  take(): boolean {
    if (this.#open < this.#max) {
      this.#open++;
      return true;
    }
    this.#refused();
    return false;
  }

  /** A stream ended: its slot is free. Called once per slot taken. */
  give(): void {
    this.#open = Math.max(0, this.#open - 1);
  }

  #refused(): void {
    const now = this.#now();
    if (this.#loggedAt !== undefined && now - this.#loggedAt < this.#intervalMs) {
      this.#unlogged++;
      return;
    }
    const earlier = this.#unlogged;
    const seconds = this.#loggedAt === undefined ? 0 : Math.ceil((now - this.#loggedAt) / 1000);
    this.#loggedAt = now;
    this.#unlogged = 0;
    this.#logger.warn(
      { open: this.#max, ...(earlier > 0 ? { repeats: earlier } : {}) },
      `An ext_proc stream was refused: ${this.#max} are open, the limit (--max-ext-proc-streams)${earlier > 0 ? ` (${earlier} more like this in the last ${seconds} s)` : ''}`,
    );
  }
}
