// The endpoint picker's decision, over the proxy's own parts (the pools and their schedulers,
// discovery, KV events and load, tenants and admission): which decode pod serves a request,
// and which prefill pod computes its prompt first. No flow and no proxy: the gateway sends the
// request, the decode pod's sidecar runs the handoff.

import type { Endpoint } from '../endpoints/endpoint.js';
import { ENDPOINTS } from '../endpoints/registry.js';
import { stringifyJson } from '../http/json.js';
import { RequestError } from '../http/node-server.js';
import { RoutingInput } from '../routing/routing-input.js';
import type { Decision } from '../routing/scheduler.js';
import { type Lease, NoWorkerError, type WorkerPool } from '../routing/worker-pool.js';
import { PD_HEADERS, PREFILLER_HEADER } from '../server/fleet/prefill-targets.js';
import { poolLabel } from '../server/observability/scaling-metrics.js';
import { OverloadedError } from '../server/pipeline/admission.js';
import { apiErrorBody } from '../server/pipeline/api-errors.js';
import { decide } from '../server/pipeline/decide.js';
import { type ErrorAnswer, errorAnswer, ShutdownError } from '../server/pipeline/error-answers.js';
import type { Exchange, RequestHeaders } from '../server/pipeline/exchange.js';
import { pipelineStages } from '../server/pipeline/pipeline.js';
import { RequestContext, sessionKeyOf } from '../server/pipeline/request-context.js';
import { enterStages } from '../server/pipeline/stage.js';
import type { ProxyCore } from '../server/proxy-core.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../server/settings/worker-entries.js';

/** A request as Envoy handed it over: its headers (pseudo-headers included), whole body and the gateway's subset hint. */
export interface PickRequest {
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** The body went past `maxBodyBytes` (its bytes were let go: `body` is empty): a 413. */
  readonly oversized?: boolean | undefined;
  /** The pods the gateway allows (`ip:port`); undefined: any. */
  readonly subset: readonly string[] | undefined;
  /** Settles when Envoy gives the request up (its stream ended): a request waiting for admission leaves the queue. */
  readonly gaveUp: Promise<unknown>;
}

/** Why a request was not routed, as llm-d's `x-llm-d-request-dropped-reason` says it. */
export type DroppedReason = 'rejected-no-endpoints' | 'rejected-saturated' | 'rejected-shutting-down';

/**
 * What the picker made of a request: routed (the decode pod, the headers for its sidecar, and
 * the request's lease on both pods until its answer ends), or answered by the picker itself.
 */
export type Pick =
  | {
      readonly kind: 'routed';
      /** The decode pod, `ip:port`: Envoy's destination. */
      readonly destination: string;
      readonly strategy: 'disaggregated' | 'aggregated';
      /** Headers to set on the request (`x-prefiller-host-port` when disaggregated). */
      readonly set: Readonly<Record<string, string>>;
      /** Headers to remove: the P/D headers a client sent, which only the picker may set. */
      readonly remove: readonly string[];
      /** The body to send in place of the client's, when the picker changed it (a rewrite rule's model). */
      readonly body?: Buffer | undefined;
      readonly answer: PickedAnswer;
    }
  | {
      readonly kind: 'refused';
      readonly status: number;
      readonly reason: DroppedReason | undefined;
      /** The error body, in the API's own shape (OpenAI's, or Anthropic's for Messages). */
      readonly body: unknown;
      /** Headers of the refusal (its request id, a 429's Retry-After), as the proxy sends them. */
      readonly headers?: Readonly<Record<string, string>> | undefined;
    };

/** The routed request's answer, as Envoy shows it to the picker: what it counts, and until when. */
export interface PickedAnswer {
  /** Envoy's report of the pod that served (it went down its fallback list, or elsewhere). */
  served(endpoint: string): void;
  /** The answer's headers came: the prefill is over (a sidecar decodes only after it). */
  responded(status: number): void;
  /** The answer ended (`complete`), or its stream broke first: every lease and the admission slot are given back. */
  finished(end: 'complete' | 'broken', usage?: { promptTokens: number; completionTokens: number }): void;
}

/** The `ip:port` of a worker's URL (how Envoy's original-destination cluster names a pod). */
export function endpointOf(url: string): string {
  return new URL(url).host;
}

/** The endpoint of a request path (its query dropped), if the router serves it. */
function endpointAt(path: string): Endpoint | undefined {
  const bare = path.split('?')[0] ?? path;
  return (ENDPOINTS as readonly Endpoint[]).find((each) => each.path === bare || (each.aliases ?? []).includes(bare));
}

/**
 * A request Envoy handed over, as the pipeline sees it: the headers it sent (pseudo-headers
 * included), the body it buffered (a 413 past the limit), the stream's end as the client gone;
 * the headers the stages put on the answer are kept for a refusal.
 */
class PickExchange implements Exchange {
  readonly answerHeaders: Record<string, string> = {};

  constructor(readonly request: PickRequest) {}

  get headers(): RequestHeaders {
    return this.request.headers;
  }

  get gone(): Promise<unknown> {
    return this.request.gaveUp;
  }

  async bodyText(limit: number): Promise<string> {
    if (this.request.oversized === true || this.request.body.length > limit) {
      throw new RequestError(413, `The request body is larger than ${limit} bytes`);
    }
    return this.request.body.toString('utf8');
  }

  setHeader(name: string, value: string): void {
    this.answerHeaders[name] = value;
  }
}

/**
 * The endpoint picker's decisions, over a {@link ProxyCore}: each request runs the stages the
 * proxy runs (its body, its model's rewrite and pool, its tenant's limits and admission, the
 * stages added, what the decision reads: 4xx before any pod, refused as the proxy refuses it),
 * then the pool's scheduler picks the decode pod (within the gateway's subset) and, when it
 * disaggregates, the prefill pod. A rewritten model goes on in the body the pod gets. The leases
 * it takes, the admission slot and the stages' `after` hooks are given back when the answer ends.
 *
 * @example
 * const picker = new EndpointPicker(core);
 * const pick = await picker.pick({ headers: { ':path': '/v1/completions' }, body, subset: undefined, gaveUp });
 * if (pick.kind === 'routed') pick.destination; // '10.0.0.7:8000'
 */
export class EndpointPicker {
  readonly #core: ProxyCore;

  constructor(core: ProxyCore) {
    this.#core = core;
  }

  /** Decides for one request; never throws (a failure is a `refused` pick). */
  async pick(request: PickRequest): Promise<Pick> {
    const core = this.#core;
    const endpoint = endpointAt(request.headers[':path'] ?? '/');
    if (endpoint === undefined) return this.#pickBare(request);
    const exchange = new PickExchange(request);
    const context = new RequestContext(core, endpoint, exchange);
    const entered = await enterStages(context, pipelineStages(endpoint, 'picker', { added: core.stages }));
    if (entered.refused !== undefined) {
      entered.done();
      return refusal(endpoint, entered.refused, reasonOf(context.failure, entered.refused), exchange.answerHeaders);
    }
    // The resolve stage refused a model no pool serves.
    const pool = context.pool as NonNullable<typeof context.pool>;
    const decodeAvoid = outsideSubset(pool.decode, request.subset);
    let decision: Decision<ProxyPrefillWorker, ProxyDecodeWorker>;
    try {
      if (request.subset !== undefined && pool.decode.available.every((worker) => decodeAvoid.includes(worker))) {
        core.metrics.refused(poolLabel(pool), 'no-worker');
        throw new NoWorkerError(0, 'decode', pool.model);
      }
      decision = decide(context, { decode: decodeAvoid });
    } catch (error) {
      entered.done();
      const answer = NoWorkerError.is(error) && request.subset !== undefined ? noneOfSubset(request.subset) : undefined;
      return refusal(endpoint, answer ?? errorAnswer(error), reasonOf(error, answer), exchange.answerHeaders);
    }
    core.metrics.decided(
      poolLabel(pool),
      decision.strategy,
      decision.strategy === 'aggregated' ? decision.reason : undefined,
    );
    const decode = decision.decode as Lease<ProxyDecodeWorker>;
    const prefill = decision.strategy === 'disaggregated' ? decision.prefill : undefined;
    const set: Record<string, string> = {};
    if (prefill !== undefined) set[PREFILLER_HEADER] = endpointOf(prefill.worker.url);
    // A rewrite rule sent the request as another model: the pod gets the body that names it.
    const rewritten = context.requestedModel !== context.body.model;
    return {
      kind: 'routed',
      destination: endpointOf(decode.worker.url),
      strategy: decision.strategy,
      set,
      remove: PD_HEADERS.filter((name) => set[name] === undefined),
      ...(rewritten ? { body: Buffer.from(stringifyJson(context.body), 'utf8') } : {}),
      answer: this.#answer(pool.decode, decode, prefill, (usage) => {
        if (usage !== undefined) {
          const { promptTokens, completionTokens } = usage;
          context.usage = {
            prompt_tokens: promptTokens,
            completion_tokens: completionTokens,
            total_tokens: promptTokens + completionTokens,
          };
        }
        entered.done();
      }),
    };
  }

  /**
   * A path no endpoint has (GET /v1/models, a probe): it names no model and is no API request
   * (no tenant, no admission); any pool's decode pod serves it.
   */
  #pickBare(request: PickRequest): Pick {
    const core = this.#core;
    if (core.closing) {
      return refusal(
        undefined,
        errorAnswer(new ShutdownError('The router is shutting down')),
        'rejected-shutting-down',
      );
    }
    const pool = core.pools.all()[0];
    if (pool === undefined)
      return refusal(undefined, errorAnswer(new NoWorkerError(0, 'decode')), 'rejected-no-endpoints');
    try {
      const decodeAvoid = outsideSubset(pool.decode, request.subset);
      const decode = pool.decode.acquire(
        decodeAvoid,
        new RoutingInput({}, sessionKeyOf(request.headers, core.options.routing.sessionHeader)),
      );
      return {
        kind: 'routed',
        destination: endpointOf(decode.worker.url),
        strategy: 'aggregated',
        set: {},
        remove: [...PD_HEADERS],
        answer: this.#answer(pool.decode, decode, undefined, () => {}),
      };
    } catch (error) {
      return refusal(undefined, errorAnswer(error), reasonOf(error, undefined));
    }
  }

  #answer(
    decodePool: WorkerPool<ProxyDecodeWorker>,
    picked: Lease<ProxyDecodeWorker>,
    prefill: Lease<ProxyPrefillWorker> | undefined,
    over: (usage: { promptTokens: number; completionTokens: number } | undefined) => void,
  ): PickedAnswer {
    let decode = picked;
    let prefillLease = prefill;
    let failed = false;
    let ended = false;
    return {
      served: (endpoint) => {
        if (ended || endpoint === endpointOf(decode.worker.url)) return;
        // Envoy sent it elsewhere (down the fallback list): the count moves with it.
        const served = decodePool.workers.find((worker) => endpointOf(worker.url) === endpoint);
        decode.release();
        decode = served === undefined ? { worker: decode.worker, release: () => {} } : decodePool.lease(served);
        this.#core.logger.info(
          { picked: this.#core.nameOf(picked.worker), served: endpoint },
          'The gateway served a request on another pod than the one picked',
        );
      },
      responded: (status) => {
        failed = status >= 500;
        prefillLease?.release(failed ? 'failure' : 'success');
        prefillLease = undefined;
      },
      finished: (end, usage) => {
        if (ended) return;
        ended = true;
        // A stream that broke (a client that left, a cut connection) says nothing of the pods.
        const outcome = end === 'broken' ? undefined : failed ? 'failure' : 'success';
        prefillLease?.release(outcome);
        decode.release(outcome);
        over(usage);
      },
    };
  }
}

/** A refusal in the API's own error shape, with the headers the stages gave it. */
function refusal(
  endpoint: Endpoint | undefined,
  answer: ErrorAnswer,
  reason: DroppedReason | undefined,
  headers: Readonly<Record<string, string>> = {},
): Pick {
  return {
    kind: 'refused',
    status: answer.status,
    reason,
    body: endpoint === undefined ? answer.body : apiErrorBody(endpoint, answer),
    headers,
  };
}

/** Why a refusal dropped the request, as llm-d names it: no pod, saturated, shutting down; else none (a client's mistake). */
function reasonOf(failure: unknown, answer: ErrorAnswer | undefined): DroppedReason | undefined {
  if (NoWorkerError.is(failure)) return 'rejected-no-endpoints';
  if (OverloadedError.is(failure)) return 'rejected-saturated';
  if (ShutdownError.is(failure) || (failure === undefined && answer?.status === 503)) return 'rejected-shutting-down';
  return undefined;
}

/** The decode pods of `pool` the gateway did not list (passed over); none without a subset. */
function outsideSubset(
  pool: WorkerPool<ProxyDecodeWorker>,
  subset: readonly string[] | undefined,
): ProxyDecodeWorker[] {
  return subset === undefined ? [] : pool.workers.filter((worker) => !subset.includes(endpointOf(worker.url)));
}

/** The 503 of a gateway's subset with no decode pod in rotation. */
function noneOfSubset(subset: readonly string[]): ErrorAnswer {
  return {
    status: 503,
    body: {
      error: {
        message: `None of the gateway's ${subset.length} endpoint(s) is a decode pod in rotation`,
        type: 'service_unavailable',
        code: 503,
        param: null,
      },
    },
  };
}
