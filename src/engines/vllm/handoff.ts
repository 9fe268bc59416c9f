import { engineHandoff } from '../engine-handoff.js';

/**
 * vLLM's connectors: `kv_transfer_params` in the request (a client-chosen `remote_host` in it
 * would make the decode worker connect where the client says) and at the top of the prefill
 * answer; `transfer_id` names a transfer (a reused one reads another request's KV).
 */
export const vllmHandoff = engineHandoff({
  requestFields: ['kv_transfer_params', 'transfer_id'],
  answerFields: ['kv_transfer_params'],
  choiceFields: [],
});
