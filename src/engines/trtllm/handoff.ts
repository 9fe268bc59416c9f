import { engineHandoff } from '../engine-handoff.js';

/**
 * TensorRT-LLM: `disaggregated_params` in the request (`context_only`, `generation_only`) and
 * in the context response, at the top or (as its OpenAI server answers) on the choice.
 */
export const trtllmHandoff = engineHandoff({
  requestFields: ['disaggregated_params'],
  answerFields: ['disaggregated_params'],
  choiceFields: ['disaggregated_params'],
});
