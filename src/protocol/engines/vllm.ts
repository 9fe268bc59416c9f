// vLLM's wire facts, as data: where its handoff travels and where its `/metrics` says how
// loaded it is. Below the transport and the flow, which read them; `engines/vllm/` holds its adapters.
import { engineHandoff } from './engine-handoff.js';
import { engineWire } from './engine-wire.js';
import type { EngineLoadMetrics } from './load-metrics.js';

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

/** Where vLLM's `/metrics` says how loaded it is (`vllm/v1/metrics/loggers.py`). */
export const VLLM_LOAD_METRICS: EngineLoadMetrics = Object.freeze({
  waiting: 'vllm:num_requests_waiting',
  running: 'vllm:num_requests_running',
  kvUsage: 'vllm:kv_cache_usage_perc',
  loraInfo: 'vllm:lora_requests_info',
});

/** vLLM on the wire: its name (what `--connector` takes), handoff and load metrics. */
export const vllmWire = engineWire({ name: 'vllm', handoff: vllmHandoff, loadMetrics: VLLM_LOAD_METRICS });
