import { failedLeg } from '../../flow/client-stream.js';
import { DeadlineError } from '../../flow/deadlines.js';
import { PrefillError } from '../../handoff/prefill-error.js';
import { UpstreamError } from '../../http/upstream-error.js';
import { type FailureClass, workerFailureClass } from '../../protocol/failure-rules.js';
import { findCause } from '../../util/cause-chain.js';
import { branded, DisaggError } from '../../util/disagg-error.js';
import type { ErrorCode } from '../../util/error-codes.js';
import { redactAddresses } from '../../util/url.js';

/** The proxy stopped before this request ended (`DISAGG_SHUTTING_DOWN`, answered 503). */
export class ShutdownError extends DisaggError {
  static override readonly is = branded<ShutdownError>('ShutdownError');
  declare readonly code: 'DISAGG_SHUTTING_DOWN';

  constructor(message = 'The proxy is shutting down; the request was ended before it finished') {
    super('DISAGG_SHUTTING_DOWN', message);
  }
}

/** An error as the proxy answers it: the HTTP status before the first byte, and the OpenAI body. */
export interface ErrorAnswer {
  status: number;
  body: {
    error: {
      message: string;
      type: string;
      code: number | string | null;
      param: string | null;
      leg?: string | undefined;
    };
  };
}

/** An answer of the table: its HTTP status (`worker`: see {@link ANSWERS}) and OpenAI error `type`. */
type Answer = { readonly status: number | 'worker'; readonly type: string };

/**
 * An error that is no answer of its own (it never reaches a client as itself, or it is a
 * worker's failure in another form): a worker's failure in its cause chain answers for it,
 * anything else is a 500.
 */
const BY_CAUSE = null;

/**
 * How each of the library's errors is answered: its HTTP status and OpenAI error `type`.
 * `worker`: a worker's own 4xx found in the cause chain passes through with its status (the
 * request was bad, on either leg), anything else from the workers is a 502. Keyed by every
 * code, so that a code without its answer does not compile.
 */
const ANSWERS: { readonly [code in ErrorCode]: Answer | typeof BY_CAUSE } = {
  DISAGG_BAD_REQUEST: { status: 400, type: 'invalid_request_error' },
  DISAGG_HANDOFF_FIELD: { status: 400, type: 'invalid_request_error' },
  DISAGG_UNSUPPORTED_REQUEST: { status: 400, type: 'invalid_request_error' },
  DISAGG_CONFIG: { status: 400, type: 'invalid_request_error' },
  DISAGG_PREFILL_TARGET_REFUSED: { status: 403, type: 'permission_denied' },
  DISAGG_NOT_FOUND: { status: 404, type: 'not_found' },
  DISAGG_WORKER_UNKNOWN: { status: 404, type: 'not_found' },
  DISAGG_WORKER_EXISTS: { status: 409, type: 'conflict' },
  DISAGG_WORKER_LEAVING: { status: 409, type: 'conflict' },
  DISAGG_METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error' },
  DISAGG_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  DISAGG_OVERLOADED: { status: 429, type: 'rate_limit_exceeded' },
  DISAGG_NO_WORKER: { status: 503, type: 'service_unavailable' },
  DISAGG_ROUTE_UNSUPPORTED: { status: 501, type: 'not_implemented' },
  DISAGG_SHUTTING_DOWN: { status: 503, type: 'service_unavailable' },
  DISAGG_PREEMPTED: { status: 503, type: 'service_unavailable' },
  DISAGG_LIMITS_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  DISAGG_STORE_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  DISAGG_STORE_QUOTA: { status: 429, type: 'insufficient_quota' },
  DISAGG_DEADLINE_EXCEEDED: { status: 504, type: 'timeout' },
  DISAGG_PREFILL_FAILED: { status: 'worker', type: 'upstream_error' },
  DISAGG_PREFILL_NOT_ACTIVATED: { status: 'worker', type: 'upstream_error' },
  DISAGG_PREFILL_NO_HANDOFF_PARAMS: { status: 'worker', type: 'upstream_error' },
  DISAGG_UPSTREAM_STATUS: { status: 'worker', type: 'upstream_error' },
  DISAGG_UPSTREAM_CONNECTION: { status: 'worker', type: 'upstream_error' },
  DISAGG_UPSTREAM_PROTOCOL: { status: 'worker', type: 'upstream_error' },
  // An error item's text, a worker's failure as the stream told it.
  DISAGG_STREAM_ERROR: BY_CAUSE,
  // Reported to the logger and events: nobody waits for that request any more.
  DISAGG_CLEANUP_EXPIRED: BY_CAUSE,
  // Failures of the router's own parts, not of a request: the router's fault if one reaches a client.
  DISAGG_DISCOVERY_UNAVAILABLE: BY_CAUSE,
  DISAGG_EPP_UNAVAILABLE: BY_CAUSE,
  DISAGG_KV_EVENTS_UNAVAILABLE: BY_CAUSE,
  DISAGG_KV_EVENT_FORMAT: BY_CAUSE,
  // A program's registration at its start, never a request's.
  DISAGG_PLUGIN_NAME_TAKEN: BY_CAUSE,
  DISAGG_TENANTS_FILE: BY_CAUSE,
  DISAGG_TOKENIZER: BY_CAUSE,
  DISAGG_PROFILE: BY_CAUSE,
  DISAGG_TRACE_FORMAT: BY_CAUSE,
  DISAGG_TRACING_UNAVAILABLE: BY_CAUSE,
  DISAGG_WORKLOAD: BY_CAUSE,
};

/** The answer of `code`, none for a code not in the table (another copy's, or a program's own). */
function answerOf(code: string): Answer | undefined {
  return Object.hasOwn(ANSWERS, code) ? (ANSWERS[code as ErrorCode] ?? undefined) : undefined;
}

const INTERNAL = { status: 500, type: 'internal_error' } as const;

/** The classes of a worker's 4xx that are the request's: passed on with their status and words. */
const CLIENT_CLASSES: ReadonlySet<FailureClass> = new Set(['refused', 'overloaded']);

/** The client's message for a worker's 4xx that was the router's fault (a path the worker does not serve). */
function misrouted(leg: string | undefined): string {
  return `The ${leg === undefined ? '' : `${leg} `}worker could not serve the request: it has no such route, a router misconfiguration (nothing is wrong with the request)`;
}

/**
 * A request's failure as a router answers it, in OpenAI's shape: `{ status, body }` by the
 * library's one table of errors (a worker's 4xx with its own status and words, other worker
 * failures 502, a deadline 504, no worker 503, the router's own refusals with theirs), the
 * failing `leg` named ({@link failedLeg} unless given), `param` where a field is at fault, and
 * the message passed through `redact` (give it `workerRedactor(workers)` to name each worker),
 * then every address left in it (a URL's origin, a `host:port`, also one inside a worker's own
 * words, such as the peer a vLLM worker failed to reach) becomes `worker`. No internal address
 * reaches a client either way. `disagg serve` answers every failure with it.
 *
 * @example
 * const redact = workerRedactor([...prefillWorkers.workers, ...decodeWorkers.workers]);
 * const { status, body } = errorToResponse(error, { redact });
 * res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
 */
export function errorToResponse(
  error: unknown,
  options: { redact?: ((text: string) => string) | undefined; leg?: 'prefill' | 'decode' | undefined } = {},
): ErrorAnswer {
  return errorAnswer(error, options.leg ?? failedLeg(error), options.redact);
}

/**
 * What the client is told about a failure, by the one table above: the router's own refusals
 * with their status, a worker's 4xx with its own status and words, other worker failures 502,
 * anything unknown 500. `leg` says which leg failed (taken from the error when not given);
 * `param` names the request field at fault, when the error says. `redact` takes out of the
 * message what clients must not see (the known workers' addresses, each by its name); any
 * address still in it after that (a worker's own text may hold one: `connect ECONNREFUSED
 * 10.0.3.7:8998`) becomes `worker`, here, whatever `redact` did.
 */
export function errorAnswer(
  error: unknown,
  leg?: 'prefill' | 'decode',
  redact: (text: string) => string = (text) => text,
): ErrorAnswer {
  // An error with words of its own for clients (a store's, without its address) says those.
  const told = (error as { publicMessage?: unknown } | null)?.publicMessage;
  const message = redactAddresses(
    redact(typeof told === 'string' ? told : error instanceof Error ? error.message : String(error)),
  );
  const param = (error as { param?: unknown } | null)?.param;
  // An API's own code for the error where it has one (Responses' `previous_response_not_found`).
  const apiCode = (error as { apiCode?: unknown } | null)?.apiCode;
  const upstream = findCause(error, UpstreamError.is);
  let entry = DisaggError.is(error) ? answerOf(error.code) : undefined;
  // A failure from a worker that is not one of the library's errors (a plain error item).
  if (entry === undefined && upstream !== undefined) entry = answerOf(upstream.code);
  let status: number;
  let type: string;
  if (entry === undefined) {
    ({ status, type } = INTERNAL);
  } else if (entry.status !== 'worker') {
    ({ status, type } = entry as { status: number; type: string });
  } else if (
    upstream?.kind === 'status' &&
    upstream.status !== undefined &&
    upstream.status < 500 &&
    CLIENT_CLASSES.has(workerFailureClass(upstream))
  ) {
    status = upstream.status;
    type = 'invalid_request_error';
  } else {
    status = 502;
    type = entry.type;
  }
  const which = leg ?? (PrefillError.is(error) ? 'prefill' : DeadlineError.is(error) ? error.leg : undefined);
  return {
    status,
    body: {
      error: {
        // A worker's 4xx that is no answer of its engine's (no such route) says where the
        // router called: its own fault, told without the worker's name or path.
        message:
          upstream?.kind === 'status' && status === 502 && (upstream.status as number) < 500
            ? misrouted(which)
            : message,
        type,
        code: typeof apiCode === 'string' ? apiCode : status,
        param: typeof param === 'string' ? param : null,
        ...(which === undefined ? {} : { leg: which }),
      },
    },
  };
}
