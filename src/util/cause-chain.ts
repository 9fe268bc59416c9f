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
  'ENOTFOUND',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
]);

/**
 * The codes of a connection that was never made: refused, a name that did not resolve, a
 * connect that timed out. Nothing of the request left this process, so the worker cannot
 * have seen it. A reset, a broken pipe or an unreachable host may come after the request
 * was written, and are not here.
 */
export const NEVER_CONNECTED_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Whether `error` says the call never reached the worker: a code of
 * {@link NEVER_CONNECTED_CODES} in its cause chain (as `code`, or `networkCode` on an
 * `UpstreamError`), and nothing in the chain that says the worker had answered. A decode
 * worker that cannot have seen a request cannot have freed (nor taken) the KV its handoff
 * names, so only then may the same handoff go to another one.
 *
 * @example
 * neverConnected(new UpstreamError('connection', 'refused', { url, networkCode: 'ECONNREFUSED' })); // true
 * neverConnected(UpstreamError.fromStatus(url, 503, 'busy')); // false: the worker answered
 */
export function neverConnected(error: unknown): boolean {
  let found = false;
  let at = error;
  for (let depth = 0; typeof at === 'object' && at !== null && depth < 8; depth++) {
    const { code, networkCode, afterResponse, status } = at as Record<string, unknown>;
    if (afterResponse === true || typeof status === 'number') return false;
    if (NEVER_CONNECTED_CODES.has(code as string) || NEVER_CONNECTED_CODES.has(networkCode as string)) found = true;
    at = (at as { cause?: unknown }).cause;
  }
  return found;
}

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

/**
 * The code of an error or of the first cause that has one (undici nests the socket's error:
 * `UND_ERR_SOCKET` over `ECONNRESET`, say); undefined when none has a string code.
 *
 * @example errorCode(new Error('fetch failed', { cause: Object.assign(new Error(), { code: 'ECONNREFUSED' }) })); // 'ECONNREFUSED'
 */
export function errorCode(error: unknown): string | undefined {
  const found = findCause(error, (candidate) => typeof (candidate as { code?: unknown }).code === 'string');
  return (found as { code?: string } | undefined)?.code;
}
