// A failure that repeats (Redis down under load, a worker every request retries away from) is
// one line per interval with a count, not one line per request: the first at once, the rest
// counted and told in one line. No timer: what was counted is told by the next line of its
// kind, when the failure ends, or at close; an idle process holds nothing open.
import type { Logger } from './logger.js';

/** The levels a repeated line may be written at. */
export type RepeatedLevel = 'error' | 'warn' | 'info' | 'debug';

/** How long one line stands for the lines of its kind after it, by default: 10 s. */
export const REPEATED_LOG_INTERVAL_MS = 10_000;

/** Kinds remembered at most; past it the oldest is told (if it counted any) and forgotten. */
const MAX_KINDS = 256;

/** Options of {@link RepeatedLog} and {@link FailureLog}. */
export interface RepeatedLogOptions {
  /** How long a written line stands for the lines of its kind after it, in ms; {@link REPEATED_LOG_INTERVAL_MS} by default. */
  intervalMs?: number | undefined;
  /** The clock, in ms; `performance.now` by default (a test gives its own). */
  now?: (() => number) | undefined;
}

/** What a kind has written and counted since. */
interface Kind {
  /** When its last line was written. */
  since: number;
  /** Lines counted since, not written. */
  repeats: number;
  /** The last of them (or the written one), as it would have been written. */
  level: RepeatedLevel;
  fields: object;
  message: string;
}

/**
 * Lines of a kind written at most once per interval. The first line of a kind is written at
 * once; the lines of that kind within `intervalMs` after it are counted, not written; once the
 * interval is over, what was counted is told in one line (the last one counted, with
 * `repeats: N` in its fields and `(N more like this in the last S s)` after its message) before
 * the next line of the kind, which is written and opens the next interval. {@link flush} tells
 * what was counted at once (the failure ended or changed, the process stops). It sets no
 * timer: a kind that stops repeating keeps its count until its next line, a flush, or until
 * {@link MAX_KINDS} newer kinds push it out.
 *
 * @example
 * const repeated = new RepeatedLog(logger);
 * repeated.write('warn', `retry ${worker.url}`, { worker: worker.url }, 'Retrying the request on another worker');
 * // the same within 10 s: counted; the next after them: "Retrying ... (1520 more like this in the last 10 s)", then itself
 */
export class RepeatedLog {
  readonly #logger: Logger | undefined;
  readonly #intervalMs: number;
  readonly #now: () => number;
  /** Each kind by its key, the least recently written first. */
  readonly #kinds = new Map<string, Kind>();

  constructor(logger: Logger | undefined, options: RepeatedLogOptions = {}) {
    this.#logger = logger;
    this.#intervalMs = options.intervalMs ?? REPEATED_LOG_INTERVAL_MS;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * One line of kind `kind` (lines alike share a kind: a message, with the worker it names):
   * counted when the kind's last line is younger than the interval; otherwise written now,
   * after one line telling what the kind counted since its last line, if anything. Answers
   * whether it was written.
   */
  write(level: RepeatedLevel, kind: string, fields: object, message: string): boolean {
    const now = this.#now();
    const seen = this.#kinds.get(kind);
    if (seen !== undefined && now - seen.since < this.#intervalMs) {
      seen.repeats += 1;
      seen.level = level;
      seen.fields = fields;
      seen.message = message;
      return false;
    }
    if (seen !== undefined && seen.repeats > 0) this.#tell(seen, now);
    this.#kinds.delete(kind);
    this.#logger?.[level](fields, message);
    this.#kinds.set(kind, { since: now, repeats: 0, level, fields, message });
    if (this.#kinds.size > MAX_KINDS) {
      const [oldest] = this.#kinds.keys();
      this.flush(oldest);
      this.#kinds.delete(oldest as string);
    }
    return true;
  }

  /** Whether a line of `kind` would be written now (its last line is at least the interval old, or there was none). */
  due(kind: string): boolean {
    const seen = this.#kinds.get(kind);
    return seen === undefined || this.#now() - seen.since >= this.#intervalMs;
  }

  /**
   * Tells now what `kind` (every kind, when none is named) counted since its last line: one
   * line, the last one counted with `repeats` and the count after its message; nothing when it
   * counted none. Its interval goes on: a line of it within the interval is still counted.
   */
  flush(kind?: string): void {
    const now = this.#now();
    for (const [key, seen] of this.#kinds) {
      if ((kind !== undefined && key !== kind) || seen.repeats === 0) continue;
      this.#tell(seen, now);
      seen.repeats = 0;
    }
  }

  /** The one line that stands for the lines a kind counted: the last of them, with their number. */
  #tell(seen: Kind, now: number): void {
    const { level, fields, message, repeats } = seen;
    const seconds = Math.max(1, Math.ceil((now - seen.since) / 1000));
    this.#logger?.[level]({ ...fields, repeats }, `${message} (${repeats} more like this in the last ${seconds} s)`);
  }
}

/** Each logger's own {@link RepeatedLog}. */
const BY_LOGGER = new WeakMap<Logger, RepeatedLog>();

/**
 * The {@link RepeatedLog} of `logger`, one per logger, with the default interval: every part
 * that writes a repeating line through the same logger (the proxy's retries, the flow's "no
 * prefill worker" line) shares its kinds and its counts.
 *
 * @example
 * repeatedLogOf(logger).write('warn', 'no prefill worker', { requestId }, 'No prefill worker is available');
 */
export function repeatedLogOf(logger: Logger): RepeatedLog {
  let log = BY_LOGGER.get(logger);
  if (log === undefined) {
    log = new RepeatedLog(logger);
    BY_LOGGER.set(logger, log);
  }
  return log;
}

/** What {@link FailureLog} writes: the failure's line and level, and the line of its end. */
export interface FailureLines {
  /** The line of a failure (`Redis is unreachable: ...`). */
  failure: string;
  /** Its level; `error` by default. */
  level?: 'error' | 'warn' | undefined;
  /** The line, at info, of its end (`Redis answers again`). */
  recovery: string;
}

/**
 * A failure that comes and goes, such as a Redis that cannot be reached: each call that fails
 * says {@link failed}, each that works {@link recovered}. The log gets at most one failure line
 * and one recovery line per interval ({@link RepeatedLog}), however many calls failed or how
 * often it flapped: the first failure at once, the rest counted; when it recovers, what was
 * counted in one line, then the recovery line.
 *
 * @example
 * const redisDown = new FailureLog(logger, { failure: 'Redis is unreachable', recovery: 'Redis answers again' });
 * try { await call(); redisDown.recovered(); } catch (error) { redisDown.failed({ err: error }); }
 */
export class FailureLog {
  readonly #lines: FailureLines;
  readonly #log: RepeatedLog;
  #failing = false;

  constructor(logger: Logger | undefined, lines: FailureLines, options: RepeatedLogOptions = {}) {
    this.#lines = lines;
    this.#log = new RepeatedLog(logger, options);
  }

  /** Whether the last call failed. */
  get failing(): boolean {
    return this.#failing;
  }

  /** A call failed: written, or counted within the interval of the last failure line. */
  failed(fields: object): void {
    this.#failing = true;
    this.#log.write(this.#lines.level ?? 'error', 'failure', fields, this.#lines.failure);
  }

  /**
   * A call worked: after a failure, the failures counted since its line are told, then the
   * recovery (both counted instead within the interval of the last recovery line: it flaps).
   */
  recovered(fields: object = {}): void {
    if (!this.#failing) return;
    this.#failing = false;
    if (this.#log.due('recovery')) this.#log.flush('failure');
    this.#log.write('info', 'recovery', fields, this.#lines.recovery);
  }

  /** Tells what was counted and not yet told (for a close). */
  flush(): void {
    this.#log.flush();
  }
}
