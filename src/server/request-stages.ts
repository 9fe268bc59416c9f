import { UnsupportedRequestError } from '../flow/request-shaping.js';
import { headerValue, RequestError } from '../http/node-server.js';
import { Controller } from '../runtime/controller.js';
import type { OverLimit } from '../tenancy/rate-window.js';
import { LimitsUnavailableError } from '../tenancy/redis-windows.js';
import { briefly } from '../util/worker-text.js';
import { OverloadedError } from './admission.js';
import { answerIdStage } from './answer-id-stage.js';
import { answerApiError } from './api-errors.js';
import { type ErrorAnswer, errorAnswer, ShutdownError } from './error-answers.js';
import { readRequestBody } from './request-body.js';
import type { RequestContext } from './request-context.js';
import { requestEvents } from './request-events.js';
import { logRequest } from './request-log.js';
import { validateRequest } from './request-schemas.js';
import { poolLabel } from './scaling-metrics.js';
import { incomingTrace, RequestTrace } from './tracing.js';

// The stages a request goes through before and after its handler, as fastify's route hooks:
// each either refuses the request (its answer, the handler never runs) or lets it on, leaving
// what must happen once the request is over. A route lists its stages (see `routes.ts`); a
// passthrough endpoint gets admission, tenant limits, tracing and the request log by listing
// them, as the generation routes do.

/** What a stage made of the request: a refusal answered at once, or on with an optional clean-up. */
export type StageOutcome = { refused: ErrorAnswer } | { after?: (() => void) | undefined } | undefined;

/** One stage of a request: named for the logs and the docs, run in the order its route lists it. */
export interface RequestStage {
  readonly name: 'open' | 'body' | 'admission' | 'answer-id' | 'tracking';
  run(request: RequestContext): StageOutcome | Promise<StageOutcome>;
}

/**
 * Runs `stages` in order, then `handler`; once it is over (or a stage refused), each stage's
 * clean-up, last stage first. A refusal is answered with its status and the API's error body
 * (OpenAI's, or Anthropic's for Messages).
 *
 * @internal
 */
export async function runStages(
  request: RequestContext,
  stages: readonly RequestStage[],
  handler: (request: RequestContext) => Promise<void>,
): Promise<void> {
  const afters: Array<() => void> = [];
  try {
    for (const stage of stages) {
      const outcome = await stage.run(request);
      if (outcome !== undefined && 'refused' in outcome) {
        return answerApiError(request.res, request.endpoint, outcome.refused);
      }
      if (outcome?.after !== undefined) afters.push(outcome.after);
    }
    await handler(request);
  } finally {
    for (let i = afters.length - 1; i >= 0; i--) afters[i]?.();
  }
}

/** A proxy that is shutting down takes no new request: a 503 before anything is read. */
export const openStage: RequestStage = {
  name: 'open',
  run: (request) =>
    request.proxy.closing ? { refused: errorAnswer(new ShutdownError('The proxy is shutting down')) } : undefined,
};

/**
 * The body, read within `--max-body-bytes` (exact integers) and checked against the endpoint
 * (`validateRequest`) before any worker: a 400 naming the field, a 413 past the size (the
 * connection then closes: the rest of the body is not read).
 */
export const bodyStage: RequestStage = {
  name: 'body',
  run: async (request) => {
    const { proxy, req, res, endpoint } = request;
    try {
      request.body = await readRequestBody(req, proxy.options.maxBodyBytes, request.bodyText);
      validateRequest(endpoint, request.body, proxy.models);
      rewriteModel(request);
      // The pool of the body's model, before any worker: a model no pool serves is a 404.
      if (request.pool === undefined) return { refused: modelNotFound(request.body.model, proxy.pools.named()) };
      return undefined;
    } catch (error) {
      if (RequestError.is(error) && error.status === 413) res.setHeader('connection', 'close');
      const refusal = errorAnswer(error);
      proxy.logger.info(
        {
          requestId: request.requestId,
          ...(request.clientRequestId === undefined ? {} : { clientRequestId: request.clientRequestId }),
          route: endpoint.name,
          status: refusal.status,
          ...briefly(error),
        },
        'request rejected',
      );
      return { refused: refusal };
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
  if (target === undefined || target === body.model) {
    if (target !== undefined) proxy.metrics.modelRewritten(body.model as string, target);
    return;
  }
  proxy.metrics.modelRewritten(body.model as string, target);
  request.body = { ...body, model: target };
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
  const { proxy, body, req } = request;
  const asked = headerValue(req.headers[MODEL_REWRITE_HEADER]);
  if (asked === undefined || asked === '' || !proxy.tenants.trusts(req.headers)) return undefined;
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

const LIMIT_WORDS = { requestsPerMinute: 'requests', tokensPerMinute: 'tokens' } as const;

/** The 429 of a tenant over a per-minute limit: which one, how much of it is used, when to try again. */
function overLimit(tenant: string, over: OverLimit): OverloadedError {
  return new OverloadedError(
    `Tenant ${tenant} is over its limit of ${over.allowed} ${LIMIT_WORDS[over.limit]} per minute (${Math.round(over.used)} in the last minute); try again in ${over.retryAfterS} s`,
    over.retryAfterS,
    over.limit === 'requestsPerMinute' ? 'requests_per_minute' : 'tokens_per_minute',
  );
}

/**
 * The tenant's per-minute limits, then a slot of the proxy's admission (by the tenant's
 * priority, fair between tenants), or a wait for one; a client that leaves meanwhile leaves the
 * queue. Over a limit: a 429 with Retry-After naming it, before any worker is called. Once the
 * request is over, the slot is freed and the tokens counted before are corrected by what the
 * answer said it used.
 */
export const admissionStage: RequestStage = {
  name: 'admission',
  run: async (request) => {
    const { proxy, req, res } = request;
    const tenant = proxy.tenants.tenantOf(req.headers);
    const label = proxy.tenantLabel(tenant.name);
    request.tenant = tenant.name;
    // A tokens-per-minute limit is held to what answers used: every answer must say it.
    request.usageNeeded = tenant.tokensPerMinute !== undefined;
    // Tokens per minute: the prompt's by the router's tokenizer where there is one (only for a
    // tenant so limited), else a quarter of its text.
    const estimate = tenant.tokensPerMinute === undefined ? estimateOf(request) : await request.estimatedTokens();
    let release: () => void;
    try {
      const over = await proxy.limits.take(tenant, estimate);
      if (over !== undefined) throw overLimit(tenant.name, over);
      const ticket = await proxy.admission.enter(new Promise((resolve) => res.once('close', resolve)), {
        tenant: tenant.name,
        priority: tenant.priority,
        maxConcurrent: tenant.maxConcurrent,
      });
      release = () => ticket.release();
    } catch (error) {
      const pool = poolLabel(request.pool);
      if (OverloadedError.is(error)) {
        res.setHeader('retry-after', String(error.retryAfterS));
        proxy.metrics.tenantRequest(label, error.limit);
        proxy.metrics.refused(pool, error.limit);
      } else if (LimitsUnavailableError.is(error)) {
        proxy.metrics.tenantRequest(label, 'limits_unavailable');
        proxy.metrics.refused(pool, 'limits_unavailable');
      }
      const refusal = errorAnswer(error);
      proxy.logger.info(
        {
          requestId: request.requestId,
          route: request.endpoint.name,
          tenant: tenant.name,
          status: refusal.status,
          ...briefly(error),
        },
        'request rejected',
      );
      return { refused: refusal };
    }
    proxy.metrics.tenantRequest(label, 'admitted');
    return {
      after: () => {
        release();
        // What the answer said it used, against what was counted for it before.
        const { usage } = request;
        const used = usage === undefined ? estimate : usage.prompt_tokens + usage.completion_tokens;
        // A correction Redis does not take is logged there; nothing waits for it.
        void Promise.resolve(proxy.limits.correct(tenant, used - estimate));
        proxy.metrics.tenantTokens(label, used);
      },
    };
  },
};

/** A request's tokens without the tokenizer: its prompt's token ids, or a quarter of its text. */
function estimateOf(request: RequestContext): number {
  return request.input.promptTokens;
}

/**
 * The request as shutdown, the metrics, health, the trace and the log see it: a context a
 * client that leaves stops, an in-flight entry (shutdown answers a 503 until the relay takes
 * over), its events (fed to the metrics, health and the `onEvent` tap), its trace (with
 * OpenTelemetry recording, or a client's `traceparent` to pass on). Once it is over: out of
 * the in-flight set, one log line, the trace ended with its outcome and usage.
 */
export const trackingStage: RequestStage = {
  name: 'tracking',
  run: (request) => {
    const { proxy, res } = request;
    const context = new Controller(request.requestId);
    request.context = context;
    const entry = {
      context,
      res,
      shutdown: () => {
        context.stopGenerating();
        answerApiError(res, request.endpoint, errorAnswer(new ShutdownError()));
      },
    };
    request.entry = entry;
    proxy.inFlight.add(entry);
    // A client that goes away stops the request (the flow still lets decode take the KV).
    res.on('close', () => {
      if (!res.writableFinished) context.stopGenerating();
    });
    const events = requestEvents(proxy, poolLabel(request.pool), () => request.input.promptTokens);
    request.events = events;
    request.trace = traceOf(request);
    events.trace = request.trace;
    return {
      after: () => {
        proxy.inFlight.delete(entry);
        logRequest(proxy, {
          requestId: request.requestId,
          clientRequestId: request.clientRequestId,
          route: request.endpoint.name,
          res,
          events,
          started: request.started,
          failure: request.failure,
          ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
        });
        request.trace?.end(
          res.statusCode,
          events.finished?.outcome ?? (request.failure === undefined ? 'success' : 'error'),
          request.usage,
          request.failure,
        );
      },
    };
  },
};

/**
 * The request's trace: with OpenTelemetry recording, or a client's `traceparent` to pass on;
 * otherwise none (the untraced path stays as cheap as it was).
 */
function traceOf(request: RequestContext): RequestTrace | undefined {
  const { proxy, req } = request;
  const incoming = incomingTrace(req.headers);
  if (proxy.tracing === undefined && incoming === undefined) return undefined;
  const trace = new RequestTrace(proxy.tracing, incoming, (worker) => proxy.nameOf(worker), {
    'http.route': request.endpoint.name,
    'disagg.request_id': request.requestId,
    'disagg.tenant': request.tenant ?? '',
    'disagg.connector': proxy.options.connector,
  });
  return trace.recording || incoming !== undefined ? trace : undefined;
}

/**
 * The stages of an API request, in order: the proxy is open, the body fits, the answer's id is
 * settled (for an API that has one), the tenant is admitted, the request is tracked.
 * Every endpoint of `ENDPOINTS` lists these.
 */
export const API_STAGES: readonly RequestStage[] = [openStage, bodyStage, answerIdStage, admissionStage, trackingStage];
