import { statefulMisfit } from '../../endpoints/responses.js';
import { UnsupportedRequestError } from '../../flow/request-shaping.js';
import { type RequestStage, refusalOf } from './stage.js';

/**
 * A Responses turn on a host that keeps no state (the endpoint picker, which never reads an
 * answer): one that needs a stored response, a conversation, a background run or its answer
 * stored is refused with a 400 naming the field, never served without the context the client
 * meant it to have. `disagg serve` keeps that state itself (its stored-turn stage).
 *
 * @internal
 */
export const statelessTurnStage: RequestStage = {
  name: 'stateless-turn',
  run: (request) => {
    const misfit = statefulMisfit(request.body);
    return misfit === undefined
      ? undefined
      : refusalOf(request, new UnsupportedRequestError(misfit.param, misfit.message));
  },
};
