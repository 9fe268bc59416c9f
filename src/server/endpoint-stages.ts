import { storedTurnStage } from './agents/stored-turn-stage.js';
import { answerIdStage } from './pipeline/answer-id-stage.js';
import type { EndpointStageTable } from './pipeline/pipeline.js';

/**
 * The proxy's endpoint stages, one line per endpoint: Responses settles its answer's id, then
 * its stored turn (the chain or conversation expanded into the input, the answer kept before
 * its end reaches the client).
 *
 * @internal
 */
export const PROXY_ENDPOINT_STAGES: EndpointStageTable = {
  responses: [answerIdStage, storedTurnStage],
};
