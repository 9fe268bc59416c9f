import { UnsupportedRequestError } from '../../flow/request-shaping.js';
import { headerValue } from '../../http/node-server.js';
import { type ErrorAnswer, errorAnswer, ShutdownError } from './error-answers.js';
import { parseRequestBody } from './request-body.js';
import type { RequestContext } from './request-context.js';
import { validateRequest } from './request-schemas.js';
import { type RequestStage, refusalOf } from './stage.js';

/** A router that is shutting down takes no new request: a 503 before anything is read. */
export const openStage: RequestStage = {
  name: 'open',
  run: (request) =>
    request.proxy.closing ? { refused: errorAnswer(new ShutdownError('The router is shutting down')) } : undefined,
};

/**
 * The body, read within `--max-body-bytes` (exact integers) and checked against the endpoint
 * (`validateRequest`) before any worker: a 400 naming the field, a 413 past the size.
 */
export const parseStage: RequestStage = {
  name: 'parse',
  run: async (request) => {
    const { proxy, endpoint } = request;
    try {
      request.body = parseRequestBody(await request.exchange.bodyText(proxy.options.maxBodyBytes));
      validateRequest(endpoint, request.body, proxy.models);
      request.requestedModel = request.body.model;
      return undefined;
    } catch (error) {
      return refusalOf(request, error);
    }
  },
};

/**
 * The model the request is served as (a rewrite rule's target: `rewrites`), then the pool that
 * serves it, before any worker: a model no pool serves is a 404 `model_not_found` naming the
 * models served.
 */
export const resolveStage: RequestStage = {
  name: 'resolve',
  run: (request) => {
    try {
      rewriteModel(request);
      if (request.pool === undefined) {
        return { refused: modelNotFound(request.body.model, request.proxy.pools.named()) };
      }
      return undefined;
    } catch (error) {
      return refusalOf(request, error);
    }
  },
};

/**
 * A rewrite rule's model sent as one of its targets (the body's `model` rewritten, nothing
 * else): the one a trusted caller picked ({@link MODEL_REWRITE_HEADER}), else the session's own
 * where the request names its session, else a draw; counted.
 */
function rewriteModel(request: RequestContext): void {
  const { proxy, body } = request;
  if (!proxy.rewrites.any) return;
  const target = chosenTarget(request) ?? proxy.rewrites.targetFor(body.model, request.sessionKey);
  if (target === undefined) return;
  proxy.metrics.modelRewritten(body.model as string, target);
  if (target !== body.model) request.body = { ...body, model: target };
}

/**
 * The header by which a trusted caller (a gateway, a test harness) picks a rewrite's target
 * itself: honored from callers that may name a tenant (`--tenant-header-keys`; every caller
 * without it), and only for one of the rule's targets.
 */
export const MODEL_REWRITE_HEADER = 'x-disagg-model-rewrite';

/**
 * The target the request's trusted caller picked, if it picked one.
 *
 * @throws {UnsupportedRequestError} for a target the rule of the body's model does not have.
 */
function chosenTarget(request: RequestContext): string | undefined {
  const { proxy, body, headers } = request;
  const asked = headerValue(headers[MODEL_REWRITE_HEADER]);
  if (asked === undefined || asked === '' || !proxy.tenants.trusts(headers)) return undefined;
  const targets = proxy.rewrites.targetsOf(body.model);
  if (targets === undefined) return undefined;
  if (!targets.includes(asked)) {
    throw new UnsupportedRequestError(
      MODEL_REWRITE_HEADER,
      `${MODEL_REWRITE_HEADER} names ${JSON.stringify(asked)}, which is no target of ${String(body.model)}: ${targets.join(', ')}`,
    );
  }
  return asked;
}

/**
 * The 404 of a model no pool serves, in OpenAI's shape (its `model_not_found`), naming the
 * models served when given. Only possible once every pool names its model: a pool that serves
 * any model answers the rest.
 *
 * @internal
 */
export function modelNotFound(model: unknown, served: readonly string[] = []): ErrorAnswer {
  const which = typeof model === 'string' ? `The model '${model}' does not exist` : 'The request names no model';
  return {
    status: 404,
    body: {
      error: {
        message: served.length === 0 ? which : `${which}: this router serves ${served.join(', ')}`,
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    },
  };
}
