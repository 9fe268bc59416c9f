import { elementsOf, samplesOf } from '../protocol/request-counts.js';
import { workerRendezvous } from './bootstrap-room.js';
import type { BootstrapInfo } from './prefill-stream.js';
import { type PromptSide, promptSideOf, refusePromptSide } from './prompt-side.js';
import { decodeRequest, prefillRequest, type RequestBody } from './request-shaping.js';

// Where they lived before: the counts are the protocol's, read by the transport and the fakes too.
export { elementsOf, samplesOf } from '../protocol/request-counts.js';

/** What decode needs from prefill: its handoff parameters, or the rendezvous both legs share. */
export type Handoff =
  | { kind: 'params'; params: unknown; promptTokensDetails?: Record<string, unknown> }
  | { kind: 'bootstrap'; bootstrap: BootstrapInfo };

/**
 * How one engine family hands KV from prefill to decode, as pure functions over request
 * bodies. `family` says how the flow runs the two legs:
 * - `sequential`: prefill runs to completion, its parameters go into the decode body;
 * - `concurrent`: the router mints the rendezvous and sends both legs at once;
 * - `early`: prefill's first output carries the rendezvous; decode starts then.
 */
export interface Connector {
  readonly name: string;
  readonly family: 'sequential' | 'concurrent' | 'early';
  /** The prefill leg's body (given the rendezvous in the concurrent family). */
  prefillBody(request: RequestBody, bootstrap?: BootstrapInfo): RequestBody;
  /** The decode leg's body. */
  decodeBody(request: RequestBody, handoff: Handoff): RequestBody;
  /**
   * What of `request` the engine cannot serve disaggregated (the field, and why), if anything:
   * the request is refused before any worker is called.
   */
  refuse?(request: RequestBody): { param: string; message: string } | undefined;
  /**
   * The body of a call to a decode worker that frees the KV `params` name, for a prefill that
   * finished the request itself (its first token was the end) while its worker still holds
   * that KV for a decode; undefined when there is nothing to free. Sent by the flow in the
   * background, on the request's decode worker.
   */
  release?(request: RequestBody, params: unknown): RequestBody | undefined;
  /**
   * What `request` asks of its prompt that only prefill computes (prompt logprobs, an echo with
   * them): the fields decode must not get, and how prefill's answer is merged into decode's
   * (see {@link PromptSide}); undefined when it asks for none.
   */
  promptSide?(request: RequestBody): PromptSide | undefined;
  /**
   * Concurrent family: the rendezvous both legs share, from the fields the engine's prefill
   * workers carry (SGLang: `bootstrapHost`, `bootstrapPort`, `dpRank`, `dpSize`), one room per
   * element of a batch. Without one, the SGLang-shaped reading of `flow/bootstrap-room`.
   */
  rendezvous?(worker: unknown, elements: number): BootstrapInfo;
}

/**
 * The model a release call names (see {@link vllmNixl}): no worker serves it, so a decode
 * worker's request handler refuses it with a 404 without computing anything, and the name
 * says in the worker's log what the call was for.
 */
export const RELEASE_MODEL = 'disagg-release-kv';

/**
 * For engines whose handoff carries the KV of one sequence: one prompt, one choice. Several
 * choices or prompts would each need their own handoff, which the engine's one set of
 * parameters cannot name.
 */
function oneSequence(engine: string): (request: RequestBody) => { param: string; message: string } | undefined {
  return (request) => {
    const n = request.n ?? 1;
    if (typeof n === 'number' && n > 1) {
      return {
        param: 'n',
        message: `n > 1 is not supported by the ${engine} handoff: each choice would need KV of its own`,
      };
    }
    const bestOf = request.best_of ?? 1;
    if (typeof bestOf === 'number' && bestOf > 1) {
      return { param: 'best_of', message: `best_of > 1 is not supported by the ${engine} handoff` };
    }
    if (elementsOf({ prompt: request.prompt }) > 1) {
      return {
        param: 'prompt',
        message: `a batch of prompts is not supported by the ${engine} handoff: send one prompt per request`,
      };
    }
    return undefined;
  };
}

function paramsOf(handoff: Handoff, connector: string): unknown {
  if (handoff.kind !== 'params')
    throw new TypeError(`The ${connector} connector hands off by parameters, not by a rendezvous`);
  return handoff.params;
}

function bootstrapOf(handoff: Handoff, connector: string): BootstrapInfo {
  if (handoff.kind !== 'bootstrap')
    throw new TypeError(`The ${connector} connector hands off by a rendezvous, not by parameters`);
  return handoff.bootstrap;
}

/**
 * vLLM with the NIXL connector (pull): prefill is asked to keep its KV for a remote decode;
 * the `kv_transfer_params` it answers with go into the decode body unchanged.
 */
export const vllmNixl: Connector = Object.freeze({
  name: 'vllm-nixl',
  family: 'sequential',
  prefillBody: (request: RequestBody) => ({
    ...prefillRequest(request),
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
  refuse: (request: RequestBody) => oneSequence('vLLM NIXL')(request) ?? refusePromptSide('vllm', request),
  promptSide: (request: RequestBody) => promptSideOf('vllm', request),
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
  prefillBody: (request: RequestBody, bootstrap?: BootstrapInfo) => {
    if (bootstrap === undefined) throw new TypeError('The sglang-bootstrap connector needs the rendezvous for prefill');
    return { ...prefillRequest(request), ...bootstrap };
  },
  decodeBody: (request: RequestBody, handoff: Handoff) =>
    decodeRequest(request, { ...bootstrapOf(handoff, 'sglang-bootstrap') }),
  refuse: (request: RequestBody) => {
    const { n, param } = samplesOf(request);
    if (n <= 1) return refusePromptSide('sglang', request);
    return {
      param,
      message: `${param} > 1 is not supported by SGLang's disaggregation: SGLang sends every sample of a prompt with the prompt's one bootstrap room, so their KV transfers collide; send ${n} requests of one sample each`,
    };
  },
  promptSide: (request: RequestBody) => promptSideOf('sglang', request),
  rendezvous: (worker: unknown, elements: number) => workerRendezvous(worker, 'sglang-bootstrap', elements),
});

/**
 * Early handoff: prefill's first streamed output names the rendezvous; decode is sent with it
 * while prefill keeps streaming.
 */
export const earlyBootstrap: Connector = Object.freeze({
  name: 'early-bootstrap',
  family: 'early',
  // Streamed, so that its first output (the rendezvous) arrives while it still runs.
  prefillBody: (request: RequestBody) => ({ ...prefillRequest(request), stream: true }),
  // A prefill that finished without naming a rendezvous hands off its parameters instead.
  decodeBody: (request: RequestBody, handoff: Handoff) =>
    handoff.kind === 'bootstrap'
      ? decodeRequest(request, { ...handoff.bootstrap })
      : decodeRequest(request, { disaggregated_params: handoff.params }),
});
