import type { Endpoint } from '../endpoints/endpoint.js';
import type { EndpointName } from '../endpoints/registry.js';
import { elementsOf } from '../protocol/request-counts.js';
import type { BootstrapInfo } from './prefill-stream.js';
import type { PromptSide } from './prompt-side.js';
import { decodeRequest, prefillRequest, type RequestBody } from './request-shaping.js';

// Where they lived before: the counts are the protocol's, read by the transport and the fakes too.
export { elementsOf, samplesOf } from '../protocol/request-counts.js';

/** What decode needs from prefill: its handoff parameters, or the rendezvous both legs share. */
export type Handoff =
  | { kind: 'params'; params: unknown; promptTokensDetails?: Record<string, unknown> | undefined }
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
  /**
   * The routes whose streams return each chunk's token ids when asked (`return_token_ids`),
   * from which decode migration resumes a broken stream; on other routes it replays the
   * request instead. Both by default (vLLM from 0.10.2).
   */
  readonly tokenIds?: readonly EndpointName[] | undefined;
  /**
   * The prefill leg's body (given the rendezvous in the concurrent family); `endpoint` is the
   * API the request came in on (where its output cap is: see `prefillRequest`).
   */
  prefillBody(request: RequestBody, bootstrap?: BootstrapInfo, endpoint?: Endpoint): RequestBody;
  /** The decode leg's body. */
  decodeBody(request: RequestBody, handoff: Handoff): RequestBody;
  /**
   * What of `request` the engine cannot serve disaggregated (the field, and why), if anything:
   * the request is refused before any worker is called.
   */
  refuse?(request: RequestBody, endpoint?: Endpoint): { param: string; message: string } | undefined;
  /**
   * The APIs the engine cannot serve disaggregated, each with why (and what to do instead):
   * a request of one is refused before any worker (`UnsupportedRouteError`, a 501).
   */
  readonly unsupported?: Readonly<Partial<Record<EndpointName, string>>> | undefined;
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
  promptSide?(request: RequestBody, endpoint?: Endpoint): PromptSide | undefined;
  /**
   * Concurrent family: the rendezvous both legs share, from the fields the engine's prefill
   * workers carry (SGLang: `bootstrapHost`, `bootstrapPort`, `dpRank`, `dpSize`), one room per
   * element of a batch. Without one, the SGLang-shaped reading of `flow/bootstrap-room`.
   */
  rendezvous?(worker: unknown, elements: number): BootstrapInfo;
}

/**
 * For engines whose handoff carries the KV of one sequence: one prompt, one choice. Several
 * choices or prompts would each need their own handoff, which the engine's one set of
 * parameters cannot name.
 */
export function oneSequence(engine: string): (request: RequestBody) => { param: string; message: string } | undefined {
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

/** The parameters of a by-parameters handoff. @throws {TypeError} for a rendezvous. */
export function paramsOf(handoff: Handoff, connector: string): unknown {
  if (handoff.kind !== 'params')
    throw new TypeError(`The ${connector} connector hands off by parameters, not by a rendezvous`);
  return handoff.params;
}

/** The rendezvous of a by-rendezvous handoff. @throws {TypeError} for parameters. */
export function bootstrapOf(handoff: Handoff, connector: string): BootstrapInfo {
  if (handoff.kind !== 'bootstrap')
    throw new TypeError(`The ${connector} connector hands off by a rendezvous, not by parameters`);
  return handoff.bootstrap;
}

/**
 * Early handoff: prefill's first streamed output names the rendezvous; decode is sent with it
 * while prefill keeps streaming.
 */
export const earlyBootstrap: Connector = Object.freeze({
  name: 'early-bootstrap',
  family: 'early',
  // Streamed, so that its first output (the rendezvous) arrives while it still runs.
  prefillBody: (request: RequestBody, _bootstrap?: BootstrapInfo, endpoint?: Endpoint) => ({
    ...prefillRequest(request, endpoint),
    stream: true,
  }),
  // A prefill that finished without naming a rendezvous hands off its parameters instead.
  decodeBody: (request: RequestBody, handoff: Handoff) =>
    handoff.kind === 'bootstrap'
      ? decodeRequest(request, { ...handoff.bootstrap })
      : decodeRequest(request, { disaggregated_params: handoff.params }),
});
