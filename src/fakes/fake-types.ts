// The types a fake worker and its protocols share: what can go wrong, what a fake received,
// and how one is started. Their own module, so that the protocols need not import the worker
// that imports them.
import type { IncomingHttpHeaders } from 'node:http';
import type { EngineName } from '../protocol/engines/wires.js';
import type { FakeKvCacheOptions } from './fake-kv-cache.js';
import type { FakeAnswer } from './fake-plan.js';
import type { FakePrefixCacheOptions } from './fake-prefix-cache.js';
import type { FakeSimulationOptions } from './fake-simulation.js';

/**
 * What can go wrong, per request or for every request of a worker:
 * - `status`: answer with this HTTP status (and an OpenAI-style error body) before anything
 *   else. `stage` says who answers: the engine's request handler (`handler`, the default: a
 *   vLLM decode then frees the handoff's KV on the prefill worker at once, its rejection
 *   clean-up), or something in front of it (`front`: body validation, auth, a middleware or a
 *   proxy; the KV waits for the lease);
 * - `hang`: never answer (a vLLM decode call aborted meanwhile frees the KV it would have
 *   pulled, as a request still waiting in vLLM's queue does);
 * - `error-event`: stream `afterTokens` tokens, then an SSE `error` event, then end;
 * - `reset`: stream `afterTokens` tokens, then break the connection;
 * - `stall`: stream `afterTokens` tokens, then say nothing more, the connection kept open (a
 *   wedged engine) until the caller leaves;
 * - `slow`: stream with `tokenIntervalMs` between tokens;
 * - `never-bootstrap`: SGLang decode never connects to prefill, a prefill never answers
 *   after committing its KV; vLLM decode never pulls the KV (and never answers);
 * - `late-failure`: a prefill fails after its KV was taken (SGLang; `afterMs` later) or after
 *   computing (vLLM);
 * - `no-claim`: decode streams without taking the KV, which stays on the prefill worker;
 * - `empty`: decode takes the KV, then answers an event stream holding only `data: [DONE]`
 *   (whether or not the request asked for a stream), as a broken engine might.
 */
export type Fault =
  | { type: 'status'; status: number; message?: string | undefined; stage?: 'handler' | 'front' | undefined }
  | { type: 'hang' }
  | { type: 'error-event'; afterTokens?: number | undefined; message?: string | undefined }
  | { type: 'reset'; afterTokens?: number | undefined }
  | { type: 'stall'; afterTokens?: number | undefined }
  | { type: 'slow'; tokenIntervalMs: number }
  | { type: 'never-bootstrap' }
  | { type: 'late-failure'; message?: string | undefined; afterMs?: number | undefined }
  | { type: 'no-claim' }
  | { type: 'empty' };

/** A request a fake worker received. */
export interface FakeRequest {
  path: string;
  headers: IncomingHttpHeaders;
  /** The JSON body, with integers above 2^53 - 1 as `bigint`s. */
  body: Record<string, unknown>;
  /** The `x-request-id` header. */
  requestId: string | undefined;
  /** The client went away before the answer was complete. */
  aborted: boolean;
  /** The answer was sent to its end. */
  completed: boolean;
  /**
   * What became of the KV a decode call named (none when it named none): `taken`; `stale`, read
   * after the prefill worker had freed it (the answer was computed on blocks that were not
   * its own); `recomputed`, the transfer failed and decode computed the prompt itself; `failed`,
   * the transfer failed and so did the request.
   */
  kv?: 'taken' | 'stale' | 'recomputed' | 'failed' | undefined;
}

/** Options of `startFakeWorker`. */
export interface FakeWorkerOptions {
  role: 'prefill' | 'decode';
  protocol: EngineName;
  /**
   * Decode requests it runs at once, as vLLM's `--max-num-seqs` (SGLang's
   * `--max-running-requests`): the rest wait in its queue (`num_requests_waiting` in `/metrics`)
   * and answer nothing, taking no KV, until a running one ends. Unlimited by default.
   */
  maxRunning?: number | undefined;
  /** Tokens a decode answers at most (fewer if the request's max_tokens says so); 8 by default. */
  tokens?: number | undefined;
  /** Milliseconds between streamed tokens; 0 by default. */
  tokenIntervalMs?: number | undefined;
  /** A fault for every request, or a function choosing one per request. */
  fault?: Fault | ((request: FakeRequest) => Fault | undefined) | undefined;
  /**
   * How long a prefill holds committed KV before freeing it as stranded: vLLM's lease
   * (`kv_lease_duration`, 30,000 ms by default, as vLLM's), TensorRT-LLM's timeout (60,000 ms).
   */
  kvTimeoutMs?: number | undefined;
  /**
   * vLLM decode: what a failed KV transfer does, as vLLM's `kv_load_failure_policy`: `fail` (the
   * default, as vLLM's since 0.20: the request ends with an error) or `recompute` (decode
   * computes the prompt itself and answers).
   */
  kvLoadFailurePolicy?: 'fail' | 'recompute' | undefined;
  /**
   * SGLang prefill: how long the KV transfer takes once decode has connected, before prefill
   * answers (meanwhile decode streams); 0 by default.
   */
  transferMs?: number | undefined;
  /** How long a rendezvous waits for its peer (SGLang); 30,000 ms by default. */
  bootstrapTimeoutMs?: number | undefined;
  /**
   * The context length it serves (`max_model_len` in `/v1/models`); a request whose prompt and
   * length budget do not fit is refused with a 400, as vLLM does. 4,096 by default.
   */
  maxModelLen?: number | undefined;
  /** The port to listen on; a free one by default. Given, a worker can be restarted where it was. */
  port?: number | undefined;
  /**
   * The loopback address to listen on, 127.0.0.1 by default. Others of 127.0.0.0/8 let several
   * workers share a port, as pods behind one headless Service do (each address a worker).
   */
  host?: string | undefined;
  /**
   * The model id it serves (`/v1/models`); `fake-model` by default. Given, a vLLM worker answers
   * a request naming another model with a 404, as vLLM does; not given, it serves any name.
   */
  model?: string | undefined;
  /**
   * What a decode answers (reasoning, tool calls, an abort, an error chunk, ...), for every
   * request or per request; `tok0 tok1 ...` up to the token budget by default. Several
   * choices (`n`, a list prompt) each answer the same; logprobs come when the request asks.
   */
  answer?: FakeAnswer | ((request: FakeRequest) => FakeAnswer | undefined) | undefined;
  /** The key it requires (`Authorization: Bearer <key>`) on everything but `/health`, as `vllm serve --api-key`. */
  apiKey?: string | undefined;
  /**
   * A prefix cache, as vLLM's and SGLang's: a prefill reuses the leading blocks of its prompt
   * it computed before, takes longer the more it must compute (prefills are computed one at a
   * time, so a busy worker makes the next one wait), and says what it reused in
   * `usage.prompt_tokens_details.cached_tokens`. Without it prefill counts half its prompt as
   * cached and takes `tokenIntervalMs`.
   */
  prefixCache?: FakePrefixCacheOptions | undefined;
  /**
   * A KV cache in token blocks that publishes its KV events over ZMQ as vLLM does (see
   * `FakeKvCache`): what a router that follows the engines' events routes on. Wins over
   * `prefixCache`. Needs the optional dependency `zeromq`.
   */
  kvCache?: FakeKvCacheOptions | undefined;
  /**
   * A simulated engine that times its answers (see `FakeSimulation`): a prefill computes its
   * prompt in the profile's time and holds the KV until the decode side has it; a decode
   * receives the KV over the profile's link and streams each token as the engine's step makes
   * it; a plain call does both. Its `/metrics` report the engine's queues and KV usage, and
   * with `kvCache` it publishes the engine's cache (512-token blocks) as KV events. Wins over
   * `tokenIntervalMs`, `prefixCache` and `kvCache`'s block size, capacity and timing;
   * `maxModelLen` is the profile's context unless given. Unless `tokens` says otherwise, an
   * answer is as long as the request's budget, or what the context leaves.
   */
  simulated?: FakeSimulationOptions | undefined;
  /**
   * The LoRA adapters its `/metrics` reports, as vLLM with `--enable-lora` does
   * (`vllm:lora_requests_info`): at most `max` in a batch, those `running` and `waiting`. Any
   * adapter named in `model` is served all the same (a fake has no weights to load).
   */
  lora?: { max: number; running?: readonly string[]; waiting?: readonly string[] } | undefined;
}
