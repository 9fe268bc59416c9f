// The options of `disaggregate`, apart from the flow that reads them: what a caller gives for
// one request (the body and its endpoint, the engines, the pools or a scheduler, retries,
// budgets, migration).

import type { Endpoint } from '../endpoints/endpoint.js';
import type { endpointOf } from '../endpoints/registry.js';
import type { RoutingInput } from '../routing/routing-input.js';
import type { Decision, Scheduler } from '../routing/scheduler.js';
import type { WorkerPool } from '../routing/worker-pool.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import type { Engine } from '../runtime/engine.js';
import type { Logger } from '../runtime/logger.js';
import type { failedLeg } from './client-stream.js';
import type { Connector } from './connectors.js';
import type { DEFAULT_DEADLINES, Deadlines } from './deadlines.js';
import type { FlowEvent, FlowEventListener } from './events.js';
import type { MigrationOptions } from './migration.js';
import type { RequestBody } from './request-shaping.js';

/**
 * What the flow reads from a prefill worker for the concurrent family: where decode meets
 * prefill (`bootstrapHost`, `bootstrapPort`) and its data-parallel rank and size, which the
 * room must agree with. Other fields (a URL, an id) are yours.
 */
export interface PrefillWorker {
  /** The host of the worker's bootstrap server; the host of `url` when omitted. */
  bootstrapHost?: string | undefined;
  /** The worker's base URL (for HTTP engines). */
  url?: string | undefined;
  bootstrapPort?: number | undefined;
  dpRank?: number | undefined;
  dpSize?: number | undefined;
}

/** Options of `disaggregate`. */
export interface DisaggregateOptions<P = PrefillWorker, D = unknown> {
  /** The client's request body (OpenAI-style JSON). */
  request: RequestBody;
  /**
   * The API the request came in on (`endpointNamed('chat')`, say): where its prompt, output cap
   * and answer shape are. By the body's shape when omitted ({@link endpointOf}).
   */
  endpoint?: Endpoint | undefined;
  /**
   * The request as routing policies see it, when the caller built it already (a router that
   * tokenized the prompt for a tenant's limit, say): built here from the request, `sessionKey`
   * and `promptTokenIds` when omitted. One build per request, however many pools ask.
   */
  input?: RoutingInput | undefined;
  /** The client's request context: a client stop reaches decode, never prefill. */
  context: AsyncEngineContext;
  prefill: Engine<P>;
  decode: Engine<D>;
  connector: Connector;
  /** The one prefill worker (the concurrent family needs its rendezvous); or use `prefillWorkers`. */
  prefillWorker?: P | undefined;
  /**
   * Prefill workers to choose from, one per request; the chosen one is the engine's third
   * argument. When none is in rotation the request is served aggregated (straight to decode).
   */
  prefillWorkers?: WorkerPool<P> | undefined;
  /**
   * Decode workers to choose from, one per request; the chosen one is the engine's third
   * argument. When none is in rotation the call rejects with a `NoWorkerError`.
   */
  decodeWorkers?: WorkerPool<D> | undefined;
  /**
   * Who serves the request: the P/D decision and the workers, per attempt (see
   * {@link Scheduler}). By default one made of `prefillWorkers` (or `prefillWorker`),
   * `decodeWorkers` and `noPrefillWorker`; given, those four are the scheduler's business,
   * and so is the P/D decision where it has deciders and no `skipPrefill` is given: its
   * `verdict` is asked once per request.
   */
  scheduler?: Scheduler<P, D> | undefined;
  /**
   * Workers of the pools to pass over while another is in rotation: those an earlier attempt
   * of the same request failed on (a router retrying before the first byte).
   */
  avoid?: { prefill?: readonly P[] | undefined; decode?: readonly D[] | undefined } | undefined;
  /**
   * Sequential families with `decodeWorkers`: a decode leg that failed before answering (its
   * dispatch rejected) where the same handoff may go to another decode worker (see
   * `reuseHandoff`: by default only when the failed worker cannot have received the request).
   * Return the milliseconds to wait before the same handoff is sent to another decode worker
   * of the pool (passing over those that failed), or undefined to fail the request with the
   * error. `attempt` counts from 0. Not asked after a request deadline; the wait counts against
   * the request's deadlines. What it throws is logged and means no retry. Default: no retries.
   * A decode failure it is not asked about fails the call with that error (its leg is
   * `decode`): a router retries it by calling `disaggregate` again, which runs a fresh prefill.
   *
   * @example
   * // Twice after a refused connection or a 5xx (`defaultRetries()`, disagg/server: the proxy's rules).
   * const retryDecode = (error: unknown, attempt: number) =>
   *   attempt < 2 && UpstreamError.is(error) && error.retryable ? 100 * 2 ** attempt : undefined;
   */
  retryDecode?: ((error: unknown, attempt: number) => number | undefined) | undefined;
  /**
   * A request that failed before its client stream exists, where another attempt from the
   * start may get past the failure: prefill's failures (sent again to another prefill worker),
   * and decode's where its handoff cannot be given to another decode worker (`retryDecode`,
   * `reuseHandoff`), or any failure of a rendezvous pair (a fresh room), or of a request served
   * aggregated. Return the milliseconds to wait before the request runs again, with a fresh
   * prefill, passing over the worker that failed (by its leg: {@link failedLeg}), or undefined
   * to fail with the error. `attempt` counts from 0. Each attempt has the request's budgets
   * from its own start, on a context of its own that the client's stops; a client that leaves
   * during the wait ends the request (cancelled, the call rejecting with the failure). Each
   * retry is a `prefillRetried` event. What it throws is logged and means no retry. Default:
   * no retries.
   *
   * @example
   * disaggregate({ ...options, retryPrefill: (error, attempt) => (attempt < 2 && PrefillError.is(error) && error.retryable ? 50 : undefined) });
   */
  retryPrefill?: ((error: unknown, attempt: number) => number | undefined) | undefined;
  /**
   * When a failed sequential decode may be given the same handoff again (`retryDecode`):
   * - `'unreached'` (the default): only when the decode worker cannot have received the
   *   request (the connection was refused, the name did not resolve, the connect timed out).
   *   vLLM 0.21 and later frees the prefill's KV as soon as a decode worker refuses a request
   *   (an error answer: a 503, a 429, a 400) or aborts one it received (a reset), so a second
   *   decode given the same `kv_transfer_params` would read freed blocks, which may already
   *   hold another request's KV, and answer 200 with output computed on them;
   * - `'always'`: after any failure before decode answered, for engines that keep the KV until
   *   a decode takes it (vLLM before 0.21, whose prefill waits for
   *   `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`).
   */
  reuseHandoff?: 'unreached' | 'always' | undefined;
  /**
   * The request's session (a header such as `x-session-id`), for the `session` routing
   * policy; the body's `user` when omitted.
   */
  sessionKey?: string | undefined;
  /**
   * The prompt's token ids, when the caller's tokenizer made them (a chat or text prompt), for
   * policies that route on the engines' KV blocks (`precisePrefix`); a token-id prompt needs none.
   */
  promptTokenIds?: readonly number[] | undefined;
  /**
   * Without a prefill worker in rotation: serve the request on decode alone (`'aggregate'`,
   * the default, as the reference router does) or fail it with a `NoWorkerError` (`'fail'`:
   * a deployment that must not put prompts on its decode GPUs).
   */
  noPrefillWorker?: 'aggregate' | 'fail' | undefined;
  /** Client-sent handoff fields: stripped (default) or refused. */
  clientHandoffFields?: 'strip' | 'reject' | undefined;
  /**
   * Whether the workers report token usage for every request (`'always'`), or only when the
   * client asked (`'as-asked'`, the default). A whole answer always carries it; a streamed
   * OpenAI request (completions, chat) without `stream_options.include_usage` is sent to
   * decode with it, and the worker's usage chunk is taken off what the client reads, so the
   * client gets the stream it asked for while the items' `completion_usage` (and the relay's
   * `RelayResult`) says what the request used: metering, limits, traces.
   */
  usage?: 'as-asked' | 'always' | undefined;
  /**
   * Conditional disaggregation, the caller's own (a verdict it has asked already, or a rule
   * of its own), over the scheduler's deciders: answer true, or the reason as a string (`'short-prompt'`), to
   * send this request straight to decode (aggregated), for example for a short or cache-hot
   * prompt; the `routed` event carries the reason (`'skipPrefill'` for true). If it throws,
   * the request is disaggregated anyway (and the error logged at warn), unless it was a
   * cancellation (`AbortError`), which fails the request. `input` is the request as routing
   * policies see it (its text, session and token ids, the caller's tokenizer's included).
   */
  skipPrefill?:
    | ((
        request: RequestBody,
        input: RoutingInput,
      ) => boolean | string | undefined | PromiseLike<boolean | string | undefined>)
    | undefined;
  /**
   * A look at the request's first decision before either leg is called: return an error to
   * refuse the request with it (the call rejects with it, the decision's leases given back
   * untouched), or undefined to let it on. Not asked of a retry's decision (a worker was called
   * by then) nor of a migration's continuation. `disagg serve` sheds with it a sheddable request
   * no worker was predicted to meet the service levels of (`input.unmeetable`). None by default.
   *
   * @example
   * disaggregate({ ...options, refuseDecision: (_decision, input) => (input.unmeetable.length > 0 && input.priority < 0 ? new Error('shed') : undefined) });
   */
  refuseDecision?: ((decision: Decision<P, D>, input: RoutingInput) => Error | undefined) | undefined;
  /**
   * Budgets per phase; each overrun is a `DeadlineError` naming its phase. By default
   * {@link DEFAULT_DEADLINES} (every phase but the total, so that every hang ends); given
   * budgets replace those one by one, `0` turns one off.
   */
  deadlines?: Deadlines | undefined;
  /**
   * How long decode may take to claim the KV once the client has gone (default 120,000 ms);
   * past it the decode leg is killed and the handoff counted as orphaned (`CleanupError`).
   */
  cleanupBudgetMs?: number | undefined;
  /** Receives the request's lifecycle events (see {@link FlowEvent}), synchronously. */
  onEvent?: FlowEventListener<P, D> | undefined;
  logger?: Logger | undefined;
  /**
   * Decode migration (off by default): a streamed request whose decode stream breaks after its
   * first token is continued on another worker of `decodeWorkers` (see {@link MigrationOptions});
   * each break is a `migration` event. A continuation is a request of its own through this
   * flow (its events are not reported; its legs hold `settled` back until they are over).
   */
  migration?: MigrationOptions | undefined;
}
