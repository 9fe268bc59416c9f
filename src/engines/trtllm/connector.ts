import { type Connector, type Handoff, oneSequence, paramsOf } from '../../flow/connectors.js';
import { decodeRequest, type RequestBody } from '../../flow/request-shaping.js';

/**
 * TensorRT-LLM, context first: the context (prefill) request is `context_only`; the
 * generation request carries the context response's parameters (`ctx_request_id` and
 * friends, found on its choice) as `generation_only`. TensorRT-LLM's server refuses fields it
 * does not know, so both bodies carry only what the client sent plus the handoff: the context
 * request is not streamed, and computes its one token whatever `max_tokens` says.
 */
export const trtllmContextFirst: Connector = Object.freeze({
  name: 'trtllm-context-first',
  family: 'sequential',
  // trtllm-serve's streams are not relied on for token ids: a broken stream is replayed.
  tokenIds: [],
  // Its workers translate these APIs to chat from their named fields only, so the
  // `disaggregated_params` of a context or generation request would be dropped (TRT-LLM #18289).
  unsupported: {
    messages:
      "TensorRT-LLM's /v1/messages drops disaggregated_params on its workers: use trtllm-serve's own disaggregated server for Anthropic clients, or /v1/chat/completions",
    responses:
      "TensorRT-LLM's /v1/responses does not take disaggregated_params on its workers: use trtllm-serve's own disaggregated server for it, or /v1/chat/completions",
  },
  prefillBody: (request: RequestBody) => {
    const { stream_options: _options, ...rest } = request;
    return {
      ...rest,
      ...(request.stream === undefined ? {} : { stream: false }),
      disaggregated_params: { request_type: 'context_only' },
    };
  },
  refuse: oneSequence('TensorRT-LLM'),
  decodeBody: (request: RequestBody, handoff: Handoff) => {
    const params = paramsOf(handoff, 'trtllm-context-first');
    return decodeRequest(request, {
      disaggregated_params: { ...(params as Record<string, unknown>), request_type: 'generation_only' },
    });
  },
});
