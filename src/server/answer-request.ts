import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerJson } from '../http/node-server.js';
import { Controller } from '../runtime/controller.js';
import type { Route } from './openai-format.js';
import { errorToResponse } from './pipeline/error-answers.js';
import { bodyReadAlready, DEFAULT_MAX_BODY_BYTES, readFetchBody, readRequestBody } from './pipeline/request-body.js';
import { type ModelLimits, validateRequest } from './pipeline/request-schemas.js';
import {
  jsonResponse,
  type RelayedResponse,
  type RelayOptions,
  type RelayResult,
  type RelaySource,
  sseResponse,
  writeSse,
} from './relay.js';

/**
 * The request's flow, given its body (read, parsed with exact integers, and checked for its
 * route) and its context (stopped when the client leaves: a stop reaches decode, never
 * prefill): `disaggregate` with your pools and engines, as a rule.
 */
export type RunRequest = (body: Record<string, unknown>, context: Controller) => RelaySource;

/** Options of {@link answerNode} and {@link answerFetch}: the relay's, and the body's limits. */
export interface AnswerOptions extends Omit<RelayOptions, 'request' | 'route' | 'context'> {
  /** The largest body taken (a 413 past it, the rest not read); 8 MiB by default, as `disagg serve`. */
  maxBodyBytes?: number | undefined;
  /** The served models' context lengths, for a budget past the context to be a 400 (`validateRequest`). */
  limits?: ModelLimits | undefined;
}

/**
 * One generation request on a Node request and response, as `disagg serve` answers it:
 * - the body is read (within `maxBodyBytes`; or taken from `req.body` when a body parser such
 *   as `express.json()` read it already), parsed with exact 64-bit integers and checked for
 *   `route` (`validateRequest`): a bad one is a 400 (413 past the size) before any worker;
 * - `run(body, context)` starts the request's flow; the context is stopped when the client
 *   leaves;
 * - its answer goes out as SSE for a request that asked to stream, else whole
 *   ({@link writeSse}, {@link writeJson}); every failure before the first byte is its status
 *   and OpenAI body, after it one SSE `error` event, worker addresses replaced (`answer`).
 *
 * Resolves when the answer is over, with the usage the workers reported; never rejects for
 * the request's failure.
 *
 * @example
 * expressApp.post('/v1/chat/completions', (req, res) =>
 *   answerNode(req, res, 'chat', (body, context) => disaggregate({ request: body, context, ...flow })),
 * );
 */
export async function answerNode(
  req: IncomingMessage,
  res: ServerResponse,
  route: Route,
  run: RunRequest,
  options: AnswerOptions = {},
): Promise<RelayResult> {
  const context = new Controller();
  // The client left before its answer was over: decode stops (once it took the KV).
  res.once('close', () => {
    if (!res.writableFinished) context.stopGenerating();
  });
  let body: Record<string, unknown>;
  try {
    body = checked(
      await readRequestBody(req, options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, bodyReadAlready(req)),
      route,
      options,
    );
  } catch (error) {
    const { status, body: answer } = (options.answer ?? errorToResponse)(error);
    answerJson(res, status, answer);
    return { usage: undefined };
  }
  return writeSse(started(run, body, context), res, { ...options, request: body, route, context });
}

/**
 * {@link answerNode} for the WHATWG fetch API (Hono, Next.js route handlers, Bun, Deno): the
 * `Request`'s body read, checked and run through `run`, its answer a `Response` (SSE for a
 * request that asked to stream, else whole), whose `result` resolves with the usage once the
 * body is over. The request's `signal` aborting, or the body cancelled, is the client leaving.
 *
 * @example
 * app.post('/v1/chat/completions', (c) =>
 *   answerFetch(c.req.raw, 'chat', (body, context) => disaggregate({ request: body, context, ...flow })),
 * );
 */
export async function answerFetch(
  request: Request,
  route: Route,
  run: RunRequest,
  options: AnswerOptions = {},
): Promise<RelayedResponse> {
  const context = new Controller();
  const { signal } = request;
  const left = () => context.stopGenerating();
  if (signal.aborted) left();
  else signal.addEventListener('abort', left, { once: true });
  let body: Record<string, unknown>;
  try {
    body = checked(await readFetchBody(request, options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES), route, options);
  } catch (error) {
    signal.removeEventListener('abort', left);
    return jsonResponse(Promise.reject(error), options);
  }
  const response = await sseResponse(started(run, body, context), { ...options, request: body, route, context });
  void response.result.then(() => signal.removeEventListener('abort', left));
  return response;
}

/** The body, once it fits `route` (`validateRequest`: a 400 naming `param` otherwise). */
function checked(body: Record<string, unknown>, route: Route, options: AnswerOptions): Record<string, unknown> {
  validateRequest(route, body, options.limits);
  return body;
}

/** `run`'s flow, a throw of its own taken as its failure (answered like any other). */
function started(run: RunRequest, body: Record<string, unknown>, context: Controller): Promise<Awaited<RelaySource>> {
  return (async () => run(body, context))();
}
