// The cap on Envoy's ext_proc streams open at once (`--max-ext-proc-streams`): each open stream
// holds the picker's memory (about 8 KB, and its request body while it is read), and the
// gateway's clients choose how many requests they send and how slowly. Past the cap a new
// stream is refused at once; the streams open are untouched.
import type { Logger } from '../runtime/logger.js';
import { RepeatedLog, type RepeatedLogOptions } from '../runtime/repeated-log.js';

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
 * most once per interval with the count of those since ({@link RepeatedLog}: a gateway refused
 * thousands of times a second writes one line, not thousands).
 *
 * @example
 * const slots = new StreamSlots(4096, logger);
 * if (!slots.take()) return refuse(call);
 * call.on('close', once(() => slots.give()));
 */
export class StreamSlots {
  readonly #max: number;
  readonly #log: RepeatedLog;
  #open = 0;

  /**
   * @param max the most streams open at once (`maxExtProcStreams`).
   * @param options the refusal line's interval and clock ({@link RepeatedLogOptions}: 10 s, `performance.now`).
   */
  constructor(max: number, logger: Logger, options: RepeatedLogOptions = {}) {
    this.#max = max;
    this.#log = new RepeatedLog(logger, options);
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
    this.#log.write(
      'warn',
      'refused',
      { open: this.#max },
      `An ext_proc stream was refused: ${this.#max} are open, the limit (--max-ext-proc-streams)`,
    );
    return false;
  }

  /** A stream ended: its slot is free. Called once per slot taken. */
  give(): void {
    this.#open = Math.max(0, this.#open - 1);
  }

  /** Tells the refusals counted since the last line (the picker is closing). */
  flush(): void {
    this.#log.flush();
  }
}
