import { lookUpBindings } from '../fleet/peer-load.js';
import type { ModelPool } from '../fleet/pool-set.js';
import { verdictOf } from './decide.js';
import { checkPromptTokens } from './request-schemas.js';
import { type RequestStage, refusalOf } from './stage.js';

/**
 * What the decision reads, produced once before it: the prompt's tokens where a policy routes
 * on the engines' KV blocks (the tenant's count may have made them already), the prompt held to
 * the model's context where it was tokenized anyway (a 400 before any worker), the session's
 * bound workers the replicas share, and the P/D decider's verdict. Only for a generation: a
 * passthrough goes to a decode worker by load.
 */
export const prepareStage: RequestStage = {
  name: 'prepare',
  run: async (request) => {
    if (request.endpoint.serving !== 'disaggregated') return undefined;
    const { proxy, body, endpoint } = request;
    try {
      if (proxy.routesOnTokens) await request.promptTokenIds();
      // Not tokenized for this alone: every request would pay the tokenizer for what the
      // engine refuses in its first step.
      const counted = await request.countedTokenIds();
      if (counted !== undefined) checkPromptTokens(endpoint, body, proxy.models, counted.length);
      await lookUpBindings(proxy.sessionBindings, request.input);
      request.verdict = await verdictOf(request, request.pool as ModelPool);
      return undefined;
    } catch (error) {
      return refusalOf(request, error);
    }
  },
};
