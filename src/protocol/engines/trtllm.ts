// TensorRT-LLM's wire facts, as data: where its handoff travels and where its `/metrics` says how
// loaded it is. Below the transport and the flow, which read them; `engines/trtllm/` holds its adapters.
import { engineHandoff } from './engine-handoff.js';
import { engineWire } from './engine-wire.js';

/**
 * TensorRT-LLM: `disaggregated_params` in the request (`context_only`, `generation_only`) and
 * in the context response, at the top or (as its OpenAI server answers) on the choice.
 */
export const trtllmHandoff = engineHandoff({
  requestFields: ['disaggregated_params'],
  answerFields: ['disaggregated_params'],
  choiceFields: ['disaggregated_params'],
});

/** TensorRT-LLM on the wire: its name (what `--connector` takes), handoff and load metrics. */
export const trtllmWire = engineWire({ name: 'trtllm', handoff: trtllmHandoff, loadMetrics: undefined });
