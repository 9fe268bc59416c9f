import { FAILURE_RULES, workerFailureClass } from '../protocol/failure-rules.js';
import { CONNECTION_ERROR_CODES, errorCode } from '../util/cause-chain.js';
import { describeValue } from '../util/describe-value.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { markWorkerText } from '../util/worker-text.js';

/**
 * How a call to a worker failed:
 * - `status`: the worker answered with an HTTP error status (its body is kept);
 * - `connection`: the worker could not be reached, or the connection broke (refused, reset,
 *   timed out);
 * - `protocol`: the worker answered something that is not what its protocol says (bad JSON,
 *   an unexpected content type).
 */
export type UpstreamErrorKind = 'status' | 'connection' | 'protocol';

/** The stable code of each kind. */
const CODES = {
  status: 'DISAGG_UPSTREAM_STATUS',
  connection: 'DISAGG_UPSTREAM_CONNECTION',
  protocol: 'DISAGG_UPSTREAM_PROTOCOL',
} as const satisfies Record<UpstreamErrorKind, string>;

/**
 * A worker call that failed. The message carries the worker's own text (the `message` of an
 * OpenAI-style error body, or the body itself) after the router's words and `: `: a client is
 * told it, the library's log lines only its length, as it may echo the prompt (give
 * `workerText` when a message of your own puts it elsewhere). `status` and `body` keep the
 * HTTP answer; `cause` keeps the network error and `networkCode` its code. `retryable`, as the
 * failure rules say (`FAILURE_RULES`): a 5xx or 429 answer, or a worker that could not be
 * reached, may succeed on another worker; another 4xx answer, a protocol error or a stream that
 * broke after the worker answered will not. `code`: `DISAGG_UPSTREAM_STATUS`,
 * `DISAGG_UPSTREAM_CONNECTION` or `DISAGG_UPSTREAM_PROTOCOL`, by kind.
 *
 * @example
 * if (UpstreamError.is(error) && error.status === 400) reply(400, error.body);
 */
export class UpstreamError extends DisaggError {
  static override readonly is = branded<UpstreamError>('UpstreamError');
  declare readonly code: (typeof CODES)[UpstreamErrorKind];
  readonly kind: UpstreamErrorKind;
  /** The worker's URL that was called. */
  readonly url: string;
  /** The HTTP status the worker answered with (kind `status`). */
  readonly status: number | undefined;
  /** The body the worker answered with, as text (kind `status`). */
  readonly body: string | undefined;
  /** The network error code (`ECONNREFUSED`, `UND_ERR_SOCKET`, ...), for kind `connection`. */
  readonly networkCode: string | undefined;
  /**
   * The worker had answered (its status and headers came) before this: a stream that broke
   * off, not a worker that could not be reached. A router keeps such a worker in rotation.
   */
  readonly afterResponse: boolean;

  constructor(
    kind: UpstreamErrorKind,
    message: string,
    options: {
      url: string;
      status?: number;
      body?: string;
      networkCode?: string;
      cause?: unknown;
      afterResponse?: boolean;
      /** The worker's own words in `message`; for kind `status`, all after its first `: ` by default. */
      workerText?: string;
    },
  ) {
    super(CODES[kind], message, options);
    const said = message.indexOf(': ');
    markWorkerText(this, options.workerText ?? (kind === 'status' && said >= 0 ? message.slice(said + 2) : ''));
    this.kind = kind;
    this.url = options.url;
    this.status = options.status;
    this.body = options.body;
    this.networkCode = options.networkCode;
    this.afterResponse = options.afterResponse ?? false;
  }

  /**
   * Whether the same request may be sent to another worker, as the failure rules say
   * (`FAILURE_RULES`): a 5xx, a 429, or a worker that could not be reached; not another 4xx, a
   * protocol error, or a connection that broke after the worker answered.
   */
  get retryable(): boolean {
    return FAILURE_RULES[workerFailureClass(this)].retry;
  }

  /** An error status, with the worker's own text taken from its body. */
  static fromStatus(url: string, status: number, body: string): UpstreamError {
    return new UpstreamError('status', `${url} answered ${status}: ${workerText(body)}`, { url, status, body });
  }

  /**
   * A failed call or a broken stream: a connection failure when the error says so (its code),
   * otherwise a protocol error. An `UpstreamError` is returned as it is.
   */
  static fromFailure(url: string, error: unknown, options: { afterResponse?: boolean } = {}): UpstreamError {
    if (UpstreamError.is(error)) return error;
    const code = errorCode(error);
    const text = error instanceof Error ? error.message || error.name : describeValue(error);
    const afterResponse = options.afterResponse ?? false;
    if (code !== undefined && CONNECTION_ERROR_CODES.has(code)) {
      const what = afterResponse ? 'broke off its answer' : 'could not be reached or broke off';
      return new UpstreamError('connection', `${url} ${what}: ${text} (${code})`, {
        url,
        networkCode: code,
        cause: error,
        afterResponse,
      });
    }
    return new UpstreamError('protocol', `${url} answered something unexpected: ${text}`, {
      url,
      cause: error,
      afterResponse,
      // A worker's answer that is not JSON: the parser's words quote it.
      ...(error instanceof SyntaxError ? { workerText: text } : {}),
    });
  }
}

const MAX_TEXT = 500;

/** The worker's own words: an OpenAI-style `{error: {message}}` or `{message}`, else the body. */
function workerText(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: unknown; message?: unknown; detail?: unknown };
    const error = parsed?.error;
    if (typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string') {
      return (error as { message: string }).message;
    }
    if (typeof error === 'string') return error;
    if (typeof parsed?.message === 'string') return parsed.message;
    if (typeof parsed?.detail === 'string') return parsed.detail;
  } catch {
    // Not JSON: the body itself is the worker's text.
  }
  const text = body.trim();
  if (text === '') return '(empty body)';
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}...` : text;
}
