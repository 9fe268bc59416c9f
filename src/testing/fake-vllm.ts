import { randomUUID } from 'node:crypto';
import { oneTokenAnswer } from './fake-formats.js';
import { type FakeProtocol, kvKey } from './fake-protocol.js';

/**
 * vLLM with the NIXL connector: a prefill call (`kv_transfer_params.do_remote_decode`)
 * computes one token, commits KV and answers JSON with top-level `kv_transfer_params` naming
 * this worker; a decode call with those parameters pulls the KV from it (over HTTP here, as
 * NIXL would); KV nobody pulls is freed as stranded after the worker's KV timeout.
 */
export const fakeVllm: FakeProtocol = {
  name: 'vllm',
  routes: ['/v1/completions', '/v1/chat/completions'],
  isPrefillCall: (body) =>
    (body.kv_transfer_params as { do_remote_decode?: unknown } | undefined)?.do_remote_decode === true,

  async prefill(worker, res, record, fault) {
    const requestId = record.requestId ?? randomUUID();
    const cached = await worker.computePrompt(record);
    if (fault?.type === 'late-failure') {
      return worker.answerError(res, 500, fault.message ?? 'prefill failed after computing');
    }
    const answer = worker.answerFor(record);
    if (answer?.finishReason === 'abort' || answer?.finishReason === 'stop') {
      // Dropped, or finished at its first token: as vLLM's NIXL connector does, the KV is freed
      // at once (it is held for a decode only when the request stopped at its length).
      record.completed = true;
      const body = oneTokenAnswer(record, worker.options.model, answer, cached);
      const finished = answer.finishReason === 'stop' ? { kv_transfer_params: { do_remote_prefill: false } } : {};
      return worker.answerJson(res, 200, { ...body, ...finished });
    }
    const blocks = worker.nextBlocks();
    const params = {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: worker.engineId,
      remote_block_ids: blocks,
      remote_host: worker.host,
      remote_port: worker.port,
      remote_request_id: requestId,
      tp_size: 1,
    };
    worker.ledger.commit(kvKey(worker.engineId, blocks), requestId);
    worker.strandLater(kvKey(worker.engineId, blocks));
    record.completed = true;
    worker.answerJson(res, 200, {
      ...oneTokenAnswer(record, worker.options.model, worker.answerFor(record), cached),
      kv_transfer_params: params,
    });
  },

  kvSources(body) {
    const params = body.kv_transfer_params as Record<string, unknown> | undefined;
    if (params?.do_remote_prefill !== true) return []; // an aggregated request: nothing to take
    return [
      {
        url: `http://${String(params.remote_host)}:${String(params.remote_port)}/fake/kv/claim`,
        payload: { key: kvKey(String(params.remote_engine_id), params.remote_block_ids) },
      },
    ];
  },

  endpoints: {
    '/fake/kv/claim': (worker, res, body) => {
      const key = String(body.key);
      if (worker.ledger.claim(key)) worker.answerJson(res, 200, { claimed: key });
      else worker.answerError(res, 404, `no KV held for ${key}`);
    },
  },
};
