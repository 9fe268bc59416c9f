import { briefly } from '../../util/worker-text.js';
import { type ErrorAnswer, errorAnswer } from '../error-answers.js';
import type { Exchange } from './exchange.js';
import type { RequestContext } from './request-context.js';

// The stages a request goes through before its host serves it (the proxy's flow) or answers it
// (the endpoint picker's headers), as fastify's route hooks and llm-d's Director: each either
// refuses the request (its answer; nothing after it runs) or lets it on, leaving what must
// happen once the request is over. Every host runs the same stages: a refusal reads the same
// whether the proxy or the picker gives it.

/**
 * What a stage made of the request: a refusal answered at once, or on, with a hook to run once
 * the request is over (its answer, if any, on `request.answer`).
 */
export type StageOutcome<X extends Exchange = Exchange> =
  | { readonly refused: ErrorAnswer }
  | { readonly after?: ((request: RequestContext<X>) => void) | undefined }
  | undefined;

/**
 * One stage of a request: named for the logs and the docs, run in the order its host lists it.
 *
 * @example
 * // A stage of your own: refuses requests without a region header, before any worker.
 * const regionStage: RequestStage = {
 *   name: 'region',
 *   run: (request) =>
 *     request.headers['x-region'] === undefined
 *       ? { refused: { status: 400, body: { error: { message: 'Name a region', type: 'invalid_request_error', param: null, code: null } } } }
 *       : undefined,
 * };
 */
export interface RequestStage<X extends Exchange = Exchange> {
  readonly name: string;
  run(request: RequestContext<X>): StageOutcome<X> | Promise<StageOutcome<X>>;
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
export function refusalOf(request: RequestContext, error: unknown): { refused: ErrorAnswer } {
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
