// The prompt side by engine name, as the package exported it before each connector declared its
// own (`vllmNixl.promptSide`, `sglangBootstrap.promptSide`): kept for library users who call it.
import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf } from '../endpoints/registry.js';
import { type PromptSide, promptSideWith, refuseEchoOfIds } from '../flow/prompt-side.js';
import type { RequestBody } from '../flow/request-shaping.js';
import { SGLANG_PROMPT_PARTS } from './sglang/connector.js';
import { refuseVllmPromptSide, VLLM_PROMPT_PARTS } from './vllm/connector.js';

/** The engine whose answers are merged: where it puts each part (vLLM's `prompt_logprobs`, SGLang's `meta_info`). */
export type PromptSideEngine = 'vllm' | 'sglang';

/**
 * The prompt side of `request` on `engine`'s disaggregated path (what its connector's
 * `promptSide` answers), or undefined when it asks for nothing of the kind. `endpoint`: the API
 * the request came in on; by the body's shape when omitted ({@link endpointOf}).
 *
 * @example
 * promptSideOf('vllm', { prompt: 'Hi', prompt_logprobs: 1 }); // strip ['prompt_logprobs'], merge choices[i].prompt_logprobs
 */
export function promptSideOf(
  engine: PromptSideEngine,
  request: RequestBody,
  endpoint: Endpoint = endpointOf(request),
): PromptSide | undefined {
  return promptSideWith(engine === 'vllm' ? VLLM_PROMPT_PARTS : SGLANG_PROMPT_PARTS, request, endpoint);
}

/**
 * Why `request` cannot have its prompt side on `engine`'s disaggregated path, if it cannot: vLLM
 * refuses prompt logprobs on a stream; an echo with logprobs needs the prompt as text, which a
 * prompt of token ids is not. `endpoint`: by the body's shape when omitted.
 *
 * @example
 * refusePromptSide('vllm', { prompt: 'Hi', prompt_logprobs: 1, stream: true }); // { param: 'prompt_logprobs', ... }
 */
export function refusePromptSide(
  engine: PromptSideEngine,
  request: RequestBody,
  endpoint: Endpoint = endpointOf(request),
): { param: string; message: string } | undefined {
  return engine === 'vllm' ? refuseVllmPromptSide(request, endpoint) : refuseEchoOfIds(request, endpoint);
}
