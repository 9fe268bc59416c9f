// The logger every part of the library writes through: the one given (or the default) with a
// worker's own words kept out of every line, whatever the logger's serializers.
import { holdsWorkerText, loggable } from '../util/worker-text.js';
import { defaultLogger, type Logger, type LogMethod } from './logger.js';

/** The library's logger over each logger given, so that wrapping one twice gives the same. */
const SAFE = new WeakMap<Logger, Logger>();
/** The loggers {@link libraryLogger} made. */
const MADE = new WeakSet<Logger>();

/**
 * The logger the library writes through: `given` (a pino logger, a child of one, any
 * {@link Logger}), or {@link defaultLogger} when none, with a worker's own words kept out of
 * every line. A worker's answer may echo the prompt (vLLM's context-length and validation
 * errors do): an error holding one, under any field, is written as its type, code, status and
 * the length of the worker's words, without the words or a stack (`loggable`); every other
 * field and error goes through as it is, to the logger's own serializers. The same logger
 * always gives the same wrapper, and a wrapper is its own.
 *
 * @example
 * const logger = libraryLogger(options.logger);
 * logger.warn({ err: error }, 'Retrying'); // a worker's 400 logged as { type, error, code, status, workerTextLength }
 */
export function libraryLogger(given?: Logger): Logger {
  const logger = given ?? defaultLogger();
  if (MADE.has(logger)) return logger;
  let safe = SAFE.get(logger);
  if (safe === undefined) {
    const level =
      (name: keyof Logger): LogMethod =>
      (fields, ...message) => {
        logger[name](holdsWorkerText(fields) ? withoutWorkerText(fields) : fields, ...message);
      };
    safe = { error: level('error'), warn: level('warn'), info: level('info'), debug: level('debug') };
    SAFE.set(logger, safe);
    MADE.add(safe);
  }
  return safe;
}

/** A line's fields with each error that holds a worker's answer in the form a line may carry. */
function withoutWorkerText(fields: object): object {
  const safe: Record<string, unknown> = {};
  for (const key in fields) safe[key] = loggable((fields as Record<string, unknown>)[key]);
  return safe;
}
