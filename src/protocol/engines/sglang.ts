// SGLang's wire facts, as data: where its handoff travels and where its `/metrics` says how
// loaded it is. Below the transport and the flow, which read them; `engines/sglang/` holds its adapters.
import { engineHandoff } from './engine-handoff.js';
import { engineWire } from './engine-wire.js';
import type { EngineLoadMetrics } from './load-metrics.js';

/**
 * SGLang: the rendezvous both legs carry, and the routing it does for a router (DP ranks,
 * admission); a client's own would collide rooms or steer ranks. Its prefill answer carries
 * nothing for decode: the router made the rendezvous.
 */
export const sglangHandoff = engineHandoff({
  requestFields: [
    'bootstrap_host',
    'bootstrap_port',
    'bootstrap_room',
    'bootstrap_pair_key',
    'decode_tp_size',
    'data_parallel_rank',
    'routed_dp_rank',
    'disagg_prefill_dp_rank',
    'pd_prefill_admission_ack',
    'decode_token_reservation_id',
  ],
  answerFields: [],
  choiceFields: [],
});

/** Where SGLang's `/metrics` says how loaded it is (`sglang/srt/metrics/collector.py`). */
export const SGLANG_LOAD_METRICS: EngineLoadMetrics = Object.freeze({
  waiting: 'sglang:num_queue_reqs',
  running: 'sglang:num_running_reqs',
  kvUsage: 'sglang:token_usage',
});

/** SGLang on the wire: its name (what `--connector` takes), handoff and load metrics. */
export const sglangWire = engineWire({ name: 'sglang', handoff: sglangHandoff, loadMetrics: SGLANG_LOAD_METRICS });
