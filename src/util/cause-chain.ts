/**
 * Error codes of Node and undici for connections that could not be made, broke, or timed out:
 * the failures a retry on the same or another worker may get past.
 */
export const CONNECTION_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
]);

/**
 * The first error in `error`'s cause chain (itself included) that `test` accepts, looking at
 * most eight deep (a cycle of causes ends the walk too).
 */
export function findCause<T>(error: unknown, test: (candidate: object) => candidate is T & object): T | undefined;
export function findCause(error: unknown, test: (candidate: object) => boolean): object | undefined;
export function findCause(error: unknown, test: (candidate: object) => boolean): object | undefined {
  let at = error;
  for (let depth = 0; typeof at === 'object' && at !== null && depth < 8; depth++) {
    if (test(at)) return at;
    at = (at as { cause?: unknown }).cause;
  }
  return undefined;
}
