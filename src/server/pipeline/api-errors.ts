// A failure in the error shape of the API the request came in on: OpenAI's
// `{error: {message, type, param, code}}` for its APIs (Responses included), Anthropic's
// `{type: 'error', error: {type, message}}` for Messages, whose SDK reads nothing else; the
// status is the same either way. The one table of errors (`error-answers.ts`) decides what a
// failure is; this only says it in the client's words.

import type { Endpoint } from '../../endpoints/endpoint.js';
import { answerJson } from '../../http/node-server.js';
import type { ErrorAnswer } from './error-answers.js';

/** Anthropic's error type of an HTTP status (its documented ones; `api_error` for any other failure of ours). */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    case 504:
      return 'timeout_error';
    default:
      return status < 500 ? 'invalid_request_error' : 'api_error';
  }
}

/** What says which error shape an API answers in: its endpoint. */
type ErrorShaped = Pick<Endpoint, 'errorShape'>;

/**
 * The body of `answer` for a client of `endpoint`'s API: OpenAI's as it is, or Anthropic's.
 *
 * @example
 * apiErrorBody(endpointNamed('messages'), { status: 429, body: { error: { message: 'Slow down', type: 'rate_limit_exceeded', code: 429, param: null } } });
 * // { type: 'error', error: { type: 'rate_limit_error', message: 'Slow down' } }
 */
export function apiErrorBody(endpoint: ErrorShaped, answer: ErrorAnswer): unknown {
  if (endpoint.errorShape !== 'anthropic') return answer.body;
  return { type: 'error', error: { type: anthropicErrorType(answer.status), message: answer.body.error.message } };
}

/** Answers `answer` on `res` in the error shape of `endpoint`'s API (nothing once an answer has begun). */
export function answerApiError(
  res: Parameters<typeof answerJson>[0],
  endpoint: ErrorShaped,
  answer: ErrorAnswer,
): void {
  answerJson(res, answer.status, apiErrorBody(endpoint, answer));
}
