import { randomUUID } from 'node:crypto';
import { answerHandlerError, oneTokenAnswer } from '../../fakes/fake-formats.js';
import { type FakeProtocol, kvKey } from '../../fakes/fake-protocol.js';
import { request } from '../../http/undici-parts.js';

/**
 * vLLM (0.22 and later) with the NIXL connector, as a router meets it:
 * - a prefill call (`kv_transfer_params.do_remote_decode`) computes one token and answers JSON
 *   with top-level `kv_transfer_params` naming this worker; it holds the blocks for a remote
 *   decode under a lease (`kvTimeoutMs`, vLLM's `kv_lease_duration`, 30 s) whether it stopped at
 *   its length or at its first token (`request_finished` in `nixl/pull_scheduler.py` treats
 *   `FINISHED_STOPPED` as `FINISHED_LENGTH_CAPPED`); a prefill the engine aborted frees them at
 *   once and names none;
 * - a decode call with those parameters pulls the blocks from it (over HTTP here, as NIXL
 *   would). Blocks already freed are read all the same, as a NIXL read of registered memory is
 *   (prefill only logs "Potentially invalid KV blocks for unrecognized request",
 *   `nixl/pull_worker.py`): the decode answers 200 with output computed on them (`stale0
 *   stale1 ...` here). A transfer that fails follows `kvLoadFailurePolicy` (vLLM's
 *   `kv_load_failure_policy`, `fail` by default);
 * - a decode call its request handler refuses (an error answer, not a body that fails
 *   validation), or one aborted before it pulled, tells the prefill worker to free the blocks
 *   at once: `_with_kv_transfer_rejection_cleanup` in `vllm/entrypoints/generate/base/serving.py`
 *   and `notify_kv_transfer_request_rejected` (vLLM 0.21 and later);
 * - a request naming a model other than the worker's `model` (when it was given one) is a 404
 *   from the handler, as vLLM's `_check_model`;
 * - OpenAI's Responses (`/v1/responses`) and Anthropic's Messages (`/v1/messages`, with
 *   `/v1/messages/count_tokens`) take `kv_transfer_params` at the top of the body as chat
 *   does, and a prefill answers its whole body (one token: an `incomplete` response, a message
 *   stopped at `max_tokens`) with them at its top.
 *
 * Decode's lease heartbeats are not modelled: a fake decode pulls as soon as it is called, and
 * a wedged one (`never-bootstrap`) would send none.
 */
export const fakeVllm: FakeProtocol = {
  name: 'vllm',
  unsupported: {
    generate: "SGLang's native API: vLLM's OpenAI server has no /generate route",
  },
  // The default of vLLM's `kv_connector_extra_config.kv_lease_duration` (30 s).
  kvTimeoutMs: 30_000,
  recomputesPrompt: true,

  refuse(_path, body) {
    const value = body.prompt_logprobs;
    if (body.stream === true && typeof value === 'number' && (value > 0 || value === -1)) {
      return '`prompt_logprobs` are not available when `stream=True`.';
    }
    return undefined;
  },
  isPrefillCall: (body) =>
    (body.kv_transfer_params as { do_remote_decode?: unknown } | undefined)?.do_remote_decode === true,

  async prefill(worker, res, record, fault) {
    const requestId = record.requestId ?? randomUUID();
    const cached = await worker.computePrompt(record);
    if (fault?.type === 'late-failure') {
      return answerHandlerError(worker, res, record.path, 500, fault.message ?? 'prefill failed after computing');
    }
    const answer = worker.answerFor(record);
    const body = oneTokenAnswer(record, worker.options.model, answer, cached, { name: 'vllm' });
    if (answer?.finishReason === 'abort') {
      // Neither stopped nor capped: the connector frees the blocks at once and names none.
      record.completed = true;
      return worker.answerJson(res, 200, body);
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
    worker.ledger.commit(kvKey(worker.engineId, blocks), requestId, record);
    worker.strandLater(kvKey(worker.engineId, blocks));
    record.completed = true;
    worker.answerJson(res, 200, { ...body, kv_transfer_params: params });
  },

  kvSources(body) {
    const params = remotePrefill(body);
    if (params === undefined) return []; // an aggregated request: nothing to take
    return [{ url: `${prefillUrl(params)}/fake/kv/claim`, payload: { key: keyOf(params) } }];
  },

  async gaveUp(_worker, body) {
    const params = remotePrefill(body);
    if (params === undefined) return;
    try {
      const answer = await request(`${prefillUrl(params)}/fake/kv/release`, {
        method: 'POST',
        body: JSON.stringify({ key: keyOf(params) }),
      });
      await answer.body.dump();
    } catch {
      // As vLLM: a notification that cannot be sent is logged there, and the lease frees the KV.
    }
  },

  kvLoadFailed(worker, failure) {
    if (worker.options.kvLoadFailurePolicy === 'recompute') return 'recompute';
    // `fail`: the request finishes with an error; the serving layer hides the cause.
    return { status: 500, message: `Internal server error (${failure})`, inStream: true };
  },

  handlerRefusal(worker, body) {
    const served = worker.options.model;
    if (served === undefined || body.model === undefined || body.model === served) return undefined;
    // A LoRA adapter it lists is served too (vLLM's --lora-modules, or one loaded at run time).
    if ((worker.options.lora?.running ?? []).includes(body.model as string)) return undefined;
    return { status: 404, message: `The model \`${String(body.model)}\` does not exist.` };
  },

  endpoints: {
    '/fake/kv/claim': (worker, res, body) => {
      const key = String(body.key);
      const read = worker.ledger.read(key);
      if (read === 'unknown') worker.answerError(res, 404, `no KV was ever held for ${key}`);
      else worker.answerJson(res, 200, { read });
    },
    '/fake/kv/release': (worker, res, body) => {
      worker.ledger.release(String(body.key));
      worker.answerJson(res, 200, { released: String(body.key) });
    },
  },
};

/** The handoff parameters of a decode call, when it takes its prompt's KV from a prefill worker. */
function remotePrefill(body: Record<string, unknown>): Record<string, unknown> | undefined {
  const params = body.kv_transfer_params as Record<string, unknown> | undefined;
  return params?.do_remote_prefill === true ? params : undefined;
}

function prefillUrl(params: Record<string, unknown>): string {
  return `http://${String(params.remote_host)}:${String(params.remote_port)}`;
}

function keyOf(params: Record<string, unknown>): string {
  return kvKey(String(params.remote_engine_id), params.remote_block_ids);
}
