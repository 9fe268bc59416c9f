import { pino } from 'pino';

/** One log method in pino's calling convention: a merge object first, then the message. */
export type LogMethod = (fields: object, message?: string) => void;

/**
 * The logger shape the library writes through: the four pino level methods it uses. A pino
 * logger (or a child of one) fits as it is; so does any object with these methods.
 *
 * @example
 * import { pino } from 'pino';
 * PrefillTask.spawn(runPrefill(), { logger: pino().child({ requestId }) });
 */
export interface Logger {
  error: LogMethod;
  warn: LogMethod;
  info: LogMethod;
  debug: LogMethod;
}

let libraryLogger: Logger | undefined;

/**
 * The logger used when none is given: pino at level `warn`, named `disagg`, writing JSON
 * lines to stderr. Created on first use, so importing the library opens nothing.
 */
export function defaultLogger(): Logger {
  libraryLogger ??= pino(
    // An error's own message, its causes nested: pino's default serializer joins their
    // messages into it, and a PrefillError's message already holds its cause's text.
    { name: 'disagg', level: 'warn', serializers: { err: pino.stdSerializers.errWithCause } },
    pino.destination({ dest: 2, sync: true }),
  );
  return libraryLogger;
}
