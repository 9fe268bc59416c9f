import { UnsupportedRequestError } from '../../flow/request-shaping.js';
import { newResponseId } from './response-homes.js';
import { type RequestStage, refusalOf } from './stage.js';

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
    const owner = proxy.tenants.tenantOf(request.headers).name;
    if (!proxy.responseHomes.claim(id, owner)) {
      const error = new UnsupportedRequestError(
        field,
        `${field} '${id}' names an answer this router has served or is serving: send another, or none (the router then makes one)`,
      );
      return refusalOf(request, error);
    }
    if (given !== id) request.body = { ...body, [field]: id };
    request.answerId = { id, given: given === id };
    return {
      after: ({ answer }) => {
        const answered = answer?.id;
        proxy.responseHomes.settle(id, answered, answered === undefined ? undefined : answer?.decodeWorker);
      },
    };
  },
};
