/**
 * The two request bodies of a disaggregated request, made from the client's OpenAI-style
 * body: a prefill copy with a one-token budget, and a decode body that keeps the client's own
 * values exactly.
 */

import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf } from '../endpoints/registry.js';
import { branded, DisaggError } from '../util/disagg-error.js';

/** An OpenAI-compatible request body (completions or chat completions), as JSON. */
export type RequestBody = Record<string, unknown>;

/**
 * A request the engines cannot serve disaggregated, or that does not fit its route: `param`
 * names the field (as OpenAI's error bodies do). Raised before any worker is called.
 * `code`: `DISAGG_UNSUPPORTED_REQUEST`.
 */
export class UnsupportedRequestError extends DisaggError {
  static override readonly is = branded<UnsupportedRequestError>('UnsupportedRequestError');
  declare readonly code: 'DISAGG_UNSUPPORTED_REQUEST';
  /** The request field at fault. */
  readonly param: string;

  constructor(param: string, message: string) {
    super('DISAGG_UNSUPPORTED_REQUEST', message);
    this.param = param;
  }
}

/**
 * An API the fleet's engine cannot serve disaggregated (SGLang's `/v1/messages`, which drops
 * the bootstrap fields; TensorRT-LLM's agents' APIs, which drop `disaggregated_params`):
 * refused before any worker is called rather than sent where it would hang or recompute.
 * `code`: `DISAGG_ROUTE_UNSUPPORTED` (the proxy answers 501).
 */
export class UnsupportedRouteError extends DisaggError {
  static override readonly is = branded<UnsupportedRouteError>('UnsupportedRouteError');
  declare readonly code: 'DISAGG_ROUTE_UNSUPPORTED';
  /** The route refused. */
  readonly path: string;

  constructor(path: string, message: string) {
    super('DISAGG_ROUTE_UNSUPPORTED', message);
    this.path = path;
  }
}

/**
 * The prefill leg's body: a copy of `request` that can produce exactly one token and answers
 * in one piece.
 *
 * - the endpoint's output cap becomes 1 under its own name (OpenAI's: `max_tokens` and
 *   `max_completion_tokens`, both, as servers differ in which they read; Responses'
 *   `max_output_tokens`; Anthropic's `max_tokens`), and its other one-token fields are set
 *   (see `Endpoint.oneToken`; `endpoint` is the body's by its shape when omitted);
 * - `min_tokens` is removed: with a budget of one token, a minimum above one is a contradiction
 *   that some engines reject and others honour by ignoring the budget;
 * - `stream` becomes false and `stream_options` is removed;
 * - `n` becomes 1 where the API has it (and `best_of` is removed): prefill computes the prompt once.
 *
 * The client's object is not changed.
 *
 * @example
 * prefillRequest({ model: 'm', prompt: 'Hi', max_tokens: 200, stream: true, min_tokens: 5 });
 * // { model: 'm', prompt: 'Hi', max_tokens: 1, max_completion_tokens: 1, stream: false, n: 1 }
 */
export function prefillRequest(request: RequestBody, endpoint?: Endpoint): RequestBody {
  const { min_tokens: _min, stream_options: _options, best_of: _bestOf, ...rest } = checkBody(request);
  return { ...rest, ...(endpoint ?? endpointOf(request)).oneToken, stream: false };
}

/**
 * The decode leg's body: the client's request with the handoff fields added. Every value the
 * client sent stays as it was (an absent `max_tokens` stays absent); a handoff field set to
 * `undefined` is left out.
 *
 * @example
 * decodeRequest(client, { kv_transfer_params: prefillAnswer.kv_transfer_params });
 */
export function decodeRequest(request: RequestBody, handoff: RequestBody = {}): RequestBody {
  const body: RequestBody = { ...checkBody(request) };
  for (const [field, value] of Object.entries(handoff)) if (value !== undefined) body[field] = value;
  return body;
}

function checkBody(request: RequestBody): RequestBody {
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    throw new TypeError(
      `A request body must be a JSON object, got ${Array.isArray(request) ? 'an array' : String(request)}`,
    );
  }
  return request;
}
