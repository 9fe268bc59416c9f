import { UnsupportedRequestError } from '../flow/request-shaping.js';
import { briefly } from '../util/worker-text.js';
import { errorAnswer } from './error-answers.js';
import type { RequestContext } from './request-context.js';
import type { RequestStage } from './request-stages.js';
import { newResponseId } from './response-homes.js';

/**
 * For an API whose answers a client asks for again by id (the endpoint's `answerIdField`:
 * Responses' `request_id`), the id is settled before any worker: the client's own, unless the
 * router knows it already (another tenant's, or one under way: a 400, since taking it would
 * point its owner's later GET at this request's worker), else one of the router's, random, set
 * in the body both legs get. Claimed for the request's tenant; once the request is over, the
 * id the answer carried is remembered with its decode worker, or the claim let go.
 *
 * @internal
 */
export const answerIdStage: RequestStage = {
  name: 'answer-id',
  run: (request) => {
    const field = request.endpoint.answerIdField;
    if (field === undefined) return undefined;
    const { proxy, body } = request;
    const given = body[field];
    // The schema let through only a short id of safe characters, or none.
    const id = typeof given === 'string' ? given : newResponseId();
    const owner = proxy.tenants.tenantOf(request.req.headers).name;
    if (!proxy.responseHomes.claim(id, owner)) return { refused: refusal(request, field, id) };
    if (given !== id) request.body = { ...body, [field]: id };
    return {
      after: () => {
        const answered = request.answerId;
        proxy.responseHomes.settle(
          id,
          answered,
          answered === undefined ? undefined : request.events?.routed?.decodeWorker,
        );
      },
    };
  },
};

function refusal(request: RequestContext, field: string, id: string) {
  const error = new UnsupportedRequestError(
    field,
    `${field} '${id}' names an answer this router has served or is serving: send another, or none (the router then makes one)`,
  );
  const answer = errorAnswer(error);
  request.proxy.logger.info(
    {
      requestId: request.requestId,
      route: request.endpoint.name,
      status: answer.status,
      ...briefly(error),
    },
    'request rejected',
  );
  return answer;
}
