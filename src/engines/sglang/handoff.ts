import { engineHandoff } from '../engine-handoff.js';

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
