import type { Endpoint } from '../../endpoints/endpoint.js';
import { endpointOf } from '../../endpoints/registry.js';
import { type Connector, type Handoff, oneSequence, paramsOf } from '../../flow/connectors.js';
import { type PromptParts, promptSideWith, refuseEchoOfIds } from '../../flow/prompt-side.js';
import { decodeRequest, prefillRequest, type RequestBody } from '../../flow/request-shaping.js';

/**
 * The model a release call names (see {@link vllmNixl}): no worker serves it, so a decode
 * worker's request handler refuses it with a 404 without computing anything, and the name
 * says in the worker's log what the call was for.
 */
export const RELEASE_MODEL = 'disagg-release-kv';

/**
 * What vLLM computes of a prompt on prefill only: its `prompt_logprobs` (in each completion
 * choice, at the top of a chat answer) and chat's `echo` of the last message.
 */
export const VLLM_PROMPT_PARTS: PromptParts = Object.freeze({ promptLogprobs: true, chatEcho: true });

/**
 * Why vLLM cannot serve `request`'s prompt side disaggregated, if it cannot: prompt logprobs on
 * a stream (the refusal its decode would have made, had it got them), or an echo with logprobs
 * of a prompt of token ids ({@link refuseEchoOfIds}).
 *
 * @internal
 */
export function refuseVllmPromptSide(
  request: RequestBody,
  endpoint: Endpoint,
): { param: string; message: string } | undefined {
  const value = request.prompt_logprobs;
  if (request.stream === true && typeof value === 'number' && (value > 0 || value === -1)) {
    return { param: 'prompt_logprobs', message: '`prompt_logprobs` are not available when `stream=True`.' };
  }
  return refuseEchoOfIds(request, endpoint);
}

/**
 * vLLM with the NIXL connector (pull): prefill is asked to keep its KV for a remote decode;
 * the `kv_transfer_params` it answers with go into the decode body unchanged.
 */
export const vllmNixl: Connector = Object.freeze({
  name: 'vllm-nixl',
  family: 'sequential',
  prefillBody: (request: RequestBody, _bootstrap?: unknown, endpoint?: Endpoint) => ({
    ...prefillRequest(request, endpoint),
    kv_transfer_params: {
      do_remote_decode: true,
      do_remote_prefill: false,
      remote_engine_id: null,
      remote_block_ids: null,
      remote_host: null,
      remote_port: null,
    },
  }),
  decodeBody: (request: RequestBody, handoff: Handoff) =>
    decodeRequest(request, { kv_transfer_params: paramsOf(handoff, 'vllm-nixl') }),
  // The flow names the endpoint; a caller of the connector that does not gets the body's.
  refuse: (request: RequestBody, endpoint?: Endpoint) =>
    oneSequence('vLLM NIXL')(request) ?? refuseVllmPromptSide(request, endpoint ?? endpointOf(request)),
  promptSide: (request: RequestBody, endpoint?: Endpoint) =>
    promptSideWith(VLLM_PROMPT_PARTS, request, endpoint ?? endpointOf(request)),
  // vLLM keeps the blocks of a prefill that stopped at its first token as it does for a length
  // cap (request_finished in nixl/pull_scheduler.py), and offers no call to free them: they
  // wait for the lease (kv_lease_duration, 30 s) unless a decode worker says it will not take
  // them. A request its handler refuses does (vLLM 0.21 and later: the rejection clean-up,
  // notify_kv_transfer_request_rejected), so the release is the client's request naming a
  // model no worker serves: a 404 that computes nothing and frees the blocks at once. A decode
  // that served it anyway would take the KV and compute one token: freed either way.
  release: (request: RequestBody, params: unknown) => {
    if ((params as { do_remote_prefill?: unknown } | null)?.do_remote_prefill !== true) return undefined;
    const { stream_options: _options, ...rest } = decodeRequest(request, { kv_transfer_params: params });
    return { ...rest, model: RELEASE_MODEL, max_tokens: 1, max_completion_tokens: 1, stream: false };
  },
});
