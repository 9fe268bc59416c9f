/**
 * What a failed call to a worker was, decided once for health, retries, metrics and the
 * errors' own `retryable`:
 * - `unreachable`: no answer began (refused, reset, a name that does not resolve);
 * - `broken-off`: the worker had answered, then the connection broke;
 * - `worker-error`: a 5xx answer, or a 404 or 405 that is not the engine's own error (no such
 *   route at the path the router called: the worker's URL is wrong, not the request);
 * - `overloaded`: a 429;
 * - `refused`: any other 4xx (the request's fault, not the worker's);
 * - `protocol`: an answer the proxy could not read (an error event, bad JSON);
 * - `deadline`: one of the flow's deadlines passed;
 * - `other`: anything else (no worker, a cancellation, a bug).
 */
export type FailureClass =
  | 'unreachable'
  | 'broken-off'
  | 'worker-error'
  | 'overloaded'
  | 'refused'
  | 'protocol'
  | 'deadline'
  | 'other';

/**
 * What the proxy does about a class of failure. `retry`: the same request may go to another
 * worker before the client got a byte (what the errors' `retryable` says). `health`: `eject`
 * takes the worker out of rotation until a probe finds it again, `count` feeds its circuit
 * breaker, `ignore` says nothing of the worker.
 */
export interface FailureRule {
  retry: boolean;
  health: 'eject' | 'count' | 'ignore';
}

/**
 * The rules, as data (undici's retry handler keeps its rules the same way). A deadline is not
 * retried although the same request could succeed elsewhere: waiting again would double the
 * wait the client already had. A 429 is retried on another worker but says nothing of the one
 * that sent it (it is busy, not broken). A stream that broke after the worker answered is not
 * retried: the client may have its first tokens, and the worker may have taken the KV.
 */
export const FAILURE_RULES: Readonly<Record<FailureClass, FailureRule>> = Object.freeze({
  unreachable: { retry: true, health: 'eject' },
  'broken-off': { retry: false, health: 'count' },
  'worker-error': { retry: true, health: 'count' },
  overloaded: { retry: true, health: 'ignore' },
  refused: { retry: false, health: 'ignore' },
  protocol: { retry: false, health: 'count' },
  deadline: { retry: false, health: 'ignore' },
  other: { retry: false, health: 'ignore' },
});

/**
 * The class of a worker's failure, from what the failed call says of itself (an
 * `UpstreamError`'s `kind`, `status` and `afterResponse`).
 *
 * @internal
 */
export function workerFailureClass(failure: {
  readonly kind: string;
  readonly status?: number | undefined;
  readonly body?: string | undefined;
  readonly afterResponse?: boolean | undefined;
}): FailureClass {
  switch (failure.kind) {
    case 'connection':
      return failure.afterResponse === true ? 'broken-off' : 'unreachable';
    case 'status':
      return statusFailureClass(failure.status ?? 0, failure.body);
    default:
      return 'protocol';
  }
}

/**
 * @internal The class of a worker's answer with HTTP error `status` (and `body`, when known).
 * A 404 or 405 whose body is not an engine's error object (`404 page not found`, FastAPI's
 * `{"detail":"Not Found"}`) came from no handler of the engine: the router called a path the
 * worker does not serve, the router's fault; an engine's own 404 (vLLM's `The model ... does
 * not exist`) is the request's.
 */
export function statusFailureClass(status: number, body?: string): FailureClass {
  if (status === 429) return 'overloaded';
  if (status >= 500) return 'worker-error';
  if ((status === 404 || status === 405) && body !== undefined && !isEngineError(body)) return 'worker-error';
  return 'refused';
}

/** Whether `body` is an engine's OpenAI-style error (`{"error": {...}}`, `{"object": "error", ...}`). */
function isEngineError(body: string): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return false;
  }
  if (typeof parsed !== 'object' || parsed === null) return false;
  const { error, object } = parsed as { error?: unknown; object?: unknown };
  return object === 'error' || (typeof error === 'object' && error !== null) || typeof error === 'string';
}
