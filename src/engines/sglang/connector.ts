import type { Endpoint } from '../../endpoints/endpoint.js';
import { endpointOf } from '../../endpoints/registry.js';
import { workerRendezvous } from '../../flow/bootstrap-room.js';
import { bootstrapOf, type Connector, type Handoff } from '../../flow/connectors.js';
import type { BootstrapInfo } from '../../flow/prefill-stream.js';
import { type PromptParts, promptSideWith, refuseEchoOfIds } from '../../flow/prompt-side.js';
import { decodeRequest, prefillRequest, type RequestBody } from '../../flow/request-shaping.js';
import { samplesOf } from '../../protocol/request-counts.js';

/** What SGLang computes of a prompt on prefill only: `/generate`'s input logprobs (`return_logprob`). */
export const SGLANG_PROMPT_PARTS: PromptParts = Object.freeze({ inputLogprobs: true });

/**
 * SGLang prefill/decode with a router-made rendezvous: both legs carry the same
 * `bootstrap_host`, `bootstrap_port` and `bootstrap_room` (a list, one per prompt, for a
 * batch) and are sent at once. More than one sample per prompt (`n`, or `sampling_params.n`
 * on `/generate`) is refused: SGLang's tokenizer manager sends every sample of a prompt, and a
 * prefix-caching request before them, with that prompt's one room
 * (`TokenizerManager._handle_batch_request`, the parallel-sampling branch), so their KV
 * transfers meet at one rendezvous and collide.
 */
export const sglangBootstrap: Connector = Object.freeze({
  name: 'sglang-bootstrap',
  family: 'concurrent',
  // SGLang's streamed chat refuses return_token_ids (serving_chat.py); its completions take it.
  tokenIds: ['completions'] as const,
  // Its /v1/responses carries the bootstrap fields since sglang#35503 (2026-08); its Anthropic
  // route converts to chat keeping only Anthropic's fields, so a decode worker refuses it
  // ("Disaggregated request received without bootstrap room id") while prefill waits.
  unsupported: {
    messages:
      "SGLang's /v1/messages drops the bootstrap fields disaggregation needs (sglang#35229, not fixed in any release yet): serve Anthropic clients from an aggregated pool, or send them to /v1/chat/completions",
  },
  prefillBody: (request: RequestBody, bootstrap?: BootstrapInfo, endpoint?: Endpoint) => {
    if (bootstrap === undefined) throw new TypeError('The sglang-bootstrap connector needs the rendezvous for prefill');
    return { ...prefillRequest(request, endpoint), ...bootstrap };
  },
  decodeBody: (request: RequestBody, handoff: Handoff) =>
    decodeRequest(request, { ...bootstrapOf(handoff, 'sglang-bootstrap') }),
  refuse: (request: RequestBody, endpoint?: Endpoint) => {
    const { n, param } = samplesOf(request);
    // The flow names the endpoint; a caller of the connector that does not gets the body's.
    if (n <= 1) return refuseEchoOfIds(request, endpoint ?? endpointOf(request));
    return {
      param,
      message: `${param} > 1 is not supported by SGLang's disaggregation: SGLang sends every sample of a prompt with the prompt's one bootstrap room, so their KV transfers collide; send ${n} requests of one sample each`,
    };
  },
  promptSide: (request: RequestBody, endpoint?: Endpoint) =>
    promptSideWith(SGLANG_PROMPT_PARTS, request, endpoint ?? endpointOf(request)),
  rendezvous: (worker: unknown, elements: number) => workerRendezvous(worker, 'sglang-bootstrap', elements),
});
