import type { CompletionUsage } from '../../protocol/llm-engine-output.js';
import { briefly } from '../../util/worker-text.js';
import { type ErrorAnswer, errorAnswer } from './error-answers.js';
import type { Exchange, RequestHeaders } from './exchange.js';
import type { RequestAnswer, RequestContext, RequestVariables, ResolvedModel } from './request-context.js';

// The stages a request goes through before its host serves it (the proxy's flow) or answers it
// (the endpoint picker's headers), as fastify's route hooks and llm-d's Director: each either
// refuses the request (its answer; nothing after it runs) or lets it on, leaving what must
// happen once the request is over. Every host runs the same stages: a refusal reads the same
// whether the proxy or the picker gives it.

/**
 * What a stage made of the request: a refusal answered at once (in the API's own error shape),
 * or on, with a hook to run once the request is over (its answer, if any, on `request.answer`).
 */
export type StageOutcome<R = StageRequest> =
  | { readonly refused: ErrorAnswer }
  | { readonly after?: ((request: R) => void) | undefined }
  | undefined;

/**
 * One stage of a request, as the router's own are: named for the logs and the docs, run in the
 * order its host lists it.
 *
 * @internal
 */
export interface RequestStage<X extends Exchange = Exchange> {
  readonly name: string;
  run(request: RequestContext<X>): StageOutcome<RequestContext<X>> | Promise<StageOutcome<RequestContext<X>>>;
}

/**
 * A request as a stage of your own sees it (`addStage`), whichever host runs it (the proxy, the
 * endpoint picker): its ids, headers and endpoint, its body (yours to change before the
 * decision: the workers get what it holds then), the model it resolved to, whose it is, the
 * variables stages set, and, in an `after` hook, what its answer said.
 */
export interface StageRequest {
  /** The router's id of the request (the workers get it as `x-request-id`). */
  readonly requestId: string;
  /** The client's own `x-request-id`, when it sent a short one. */
  readonly clientRequestId: string | undefined;
  readonly headers: RequestHeaders;
  /** The endpoint: its name (`completions`, `chat`, `responses`, `messages`, ...) and path. */
  readonly endpoint: { readonly name: string; readonly path: string };
  /** The body, parsed (exact integers) and checked against the endpoint. */
  body: Record<string, unknown>;
  /** The model asked for, the one served (a rewrite's target), and its base model. */
  readonly model: ResolvedModel;
  /** The tenant (`--tenants-file`), once admitted. */
  readonly tenant: string | undefined;
  /** What the workers said the request used, once answered (in an `after` hook). */
  readonly usage: CompletionUsage | undefined;
  /** What the answer said, once the host has it (in an `after` hook). */
  readonly answer: RequestAnswer | undefined;
  /** The failure the request was answered with, if any (in an `after` hook). */
  readonly failure: unknown;
  get<K extends keyof RequestVariables>(name: K): RequestVariables[K] | undefined;
  set<K extends keyof RequestVariables>(name: K, value: RequestVariables[K]): void;
}

/**
 * A stage of your own, added with `addStage` to the proxy (`createProxy`) or the endpoint picker
 * (`startEndpointPicker`): it runs for every API request once admitted, before the decision. It
 * may refuse the request (`{ refused: { status, body } }`, answered in the API's error shape),
 * change its body, set a variable, or leave an `after` hook, run once the request is over.
 * A stage that throws refuses its request with a 500 (logged).
 *
 * @example
 * const generated = new Map<string, number>();
 * const teams: Stage = {
 *   name: 'teams',
 *   run: (request) => {
 *     const team = request.headers['x-team'];
 *     if (typeof team !== 'string') {
 *       return { refused: { status: 400, body: { error: { message: 'Send x-team', type: 'invalid_request_error', param: null, code: null } } } };
 *     }
 *     return { after: (done) => generated.set(team, (generated.get(team) ?? 0) + (done.usage?.completion_tokens ?? 0)) };
 *   },
 * };
 */
export interface Stage {
  readonly name: string;
  run(request: StageRequest): StageOutcome<StageRequest> | Promise<StageOutcome<StageRequest>>;
}

/** Where a request stands once its stages ran: refused (with its answer) or let on; either way, `done` once it is over. */
export type Entered = {
  /** The refusal to answer, when a stage refused the request. */
  readonly refused: ErrorAnswer | undefined;
  /** Runs every `after` hook of the stages that let the request on, last stage first. Call once, when the request is over. */
  readonly done: () => void;
};

/**
 * Runs `stages` in order until one refuses. The host then serves the request (or answers the
 * refusal) and calls `done` once it is over, which runs the hooks of the stages that ran, last
 * first: a refusal at admission still ends the trace the tracking stage opened before it.
 *
 * @internal
 */
export async function enterStages<X extends Exchange>(
  request: RequestContext<X>,
  stages: readonly RequestStage<X>[],
): Promise<Entered> {
  const afters: Array<(request: RequestContext<X>) => void> = [];
  const done = () => {
    for (let i = afters.length - 1; i >= 0; i--) afters[i]?.(request);
    afters.length = 0;
  };
  try {
    for (const stage of stages) {
      const outcome = await stage.run(request);
      if (outcome !== undefined && 'refused' in outcome) return { refused: outcome.refused, done };
      if (outcome?.after !== undefined) afters.push(outcome.after);
    }
  } catch (error) {
    // A stage that throws (a bug of its own, or a library user's) refuses the request as a 500, logged.
    return { refused: refusalOf(request, error).refused, done };
  }
  return { refused: undefined, done };
}

/**
 * The refusal of `error`, in the answer every API takes (`errorAnswer`: its status, its words
 * without a worker's address), logged as one line with the request's id, route and tenant, and
 * kept as the request's failure (its request log line says it).
 *
 * @internal
 */
export function refusalOf<X extends Exchange>(request: RequestContext<X>, error: unknown): { refused: ErrorAnswer } {
  const refused = errorAnswer(error);
  request.failure = error;
  request.proxy.logger.info(
    {
      requestId: request.requestId,
      ...(request.clientRequestId === undefined ? {} : { clientRequestId: request.clientRequestId }),
      route: request.endpoint.name,
      ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
      status: refused.status,
      ...briefly(error),
    },
    'request rejected',
  );
  return { refused };
}
