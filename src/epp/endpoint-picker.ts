// The endpoint picker's decision, over the proxy's own parts (the pools and their schedulers,
// discovery, KV events and load, tenants and admission): which decode pod serves a request,
// and which prefill pod computes its prompt first. No flow and no proxy: the gateway sends the
// request, the decode pod's sidecar runs the handoff.

import type { Endpoint } from '../endpoints/endpoint.js';
import { ENDPOINTS } from '../endpoints/registry.js';
import { RequestError } from '../http/node-server.js';
import { RoutingInput } from '../routing/routing-input.js';
import type { Decision } from '../routing/scheduler.js';
import { type Lease, NoWorkerError, type WorkerPool } from '../routing/worker-pool.js';
import { OverloadedError } from '../server/admission.js';
import { apiErrorBody } from '../server/api-errors.js';
import { errorAnswer, ShutdownError } from '../server/error-answers.js';
import { lookUpBindings } from '../server/peer-load.js';
import type { ModelPool } from '../server/pool-set.js';
import { PD_HEADERS, PREFILLER_HEADER } from '../server/prefill-targets.js';
import type { ProxyCore } from '../server/proxy-core.js';
import { parseRequestBody } from '../server/request-body.js';
import { sessionKeyOf } from '../server/request-context.js';
import { validateRequest } from '../server/request-schemas.js';
import { modelNotFound } from '../server/request-stages.js';
import { poolLabel } from '../server/scaling-metrics.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../server/settings/worker-entries.js';
import { briefly } from '../util/worker-text.js';

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
      readonly answer: PickedAnswer;
    }
  | {
      readonly kind: 'refused';
      readonly status: number;
      readonly reason: DroppedReason | undefined;
      /** The error body, in the API's own shape (OpenAI's, or Anthropic's for Messages). */
      readonly body: unknown;
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

/** A request admitted (its slot and tokens given back by `release`), or refused. */
type Admitted = { refused: Pick } | { release: (used: number | undefined) => void };

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
 * The endpoint picker's decisions, over a {@link ProxyCore}: each request checked as the proxy
 * checks it (its body, its model's pool, its tenant's limits and admission: 4xx before any pod),
 * then the pool's scheduler picks the decode pod (within the gateway's subset) and, when it
 * disaggregates, the prefill pod. The leases it takes are given back when the answer ends.
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
    const path = request.headers[':path'] ?? '/';
    const endpoint = endpointAt(path);
    if (core.closing)
      return refusal(
        endpoint,
        errorAnswer(new ShutdownError('The endpoint picker is shutting down')),
        'rejected-shutting-down',
      );
    if (request.oversized === true || request.body.length > core.options.maxBodyBytes) {
      const tooLarge = new RequestError(413, `The request body is larger than ${core.options.maxBodyBytes} bytes`);
      return refusal(endpoint, errorAnswer(tooLarge), undefined);
    }
    let body: Record<string, unknown> = {};
    if (endpoint !== undefined && request.body.length > 0) {
      try {
        body = parseRequestBody(request.body.toString('utf8'));
        validateRequest(endpoint, body, core.models);
      } catch (error) {
        return refusal(endpoint, errorAnswer(error), undefined);
      }
    }
    const { model } = body;
    // A path no endpoint has (GET /v1/models, a probe) names no model: any pool's decode pod serves it.
    const pool =
      core.pools.namedFor(model) ??
      core.pools.namedFor(core.models.baseOf?.(model)) ??
      core.pools.poolFor(model) ??
      (endpoint === undefined ? core.pools.all()[0] : undefined);
    if (pool === undefined) return refusal(endpoint, modelNotFound(model, core.pools.named()), undefined);
    // Decode pods the gateway did not list are passed over; none listed in rotation: a 503.
    const decodeAvoid =
      request.subset === undefined
        ? []
        : pool.decode.workers.filter((worker) => !request.subset?.includes(endpointOf(worker.url)));
    if (request.subset !== undefined && pool.decode.available.every((worker) => decodeAvoid.includes(worker))) {
      return noEndpoint(
        endpoint,
        `None of the gateway's ${request.subset.length} endpoint(s) is a decode pod in rotation`,
      );
    }
    // Admission and tenants' limits are the API's, as in the proxy: not a probe's or a listing's.
    const admitted: Admitted =
      endpoint === undefined ? { release: () => {} } : await this.#admit(request, endpoint, body, poolLabel(pool));
    if ('refused' in admitted) return admitted.refused;
    let decision: Decision<ProxyPrefillWorker, ProxyDecodeWorker>;
    try {
      decision = await this.#decide(pool, endpoint, body, request.headers, decodeAvoid);
    } catch (error) {
      admitted.release(undefined);
      if (NoWorkerError.is(error)) {
        core.metrics.refused(poolLabel(pool), 'no-worker');
        return noEndpoint(endpoint, error.message);
      }
      return refusal(endpoint, errorAnswer(error), undefined);
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
    return {
      kind: 'routed',
      destination: endpointOf(decode.worker.url),
      strategy: decision.strategy,
      set,
      remove: PD_HEADERS.filter((name) => set[name] === undefined),
      answer: this.#answer(pool.decode, decode, prefill, admitted.release),
    };
  }

  /**
   * The tenant's per-minute limits and a slot of admission (by its priority, fair between
   * tenants; a wait while slots are full): the proxy's own admission stage, for a request the
   * gateway will send. Gives back a release that corrects the tenant's tokens by the answer's.
   */
  async #admit(
    request: PickRequest,
    endpoint: Endpoint,
    body: Record<string, unknown>,
    pool: string,
  ): Promise<Admitted> {
    const core = this.#core;
    const tenant = core.tenants.tenantOf(request.headers);
    const label = core.tenantLabel(tenant.name);
    const estimate = new RoutingInput(body, undefined, undefined, endpoint).promptTokens;
    try {
      const over = await core.limits.take(tenant, estimate);
      if (over !== undefined) {
        throw new OverloadedError(
          `Tenant ${tenant.name} is over its limit of ${over.allowed} per minute; try again in ${over.retryAfterS} s`,
          over.retryAfterS,
          over.limit === 'requestsPerMinute' ? 'requests_per_minute' : 'tokens_per_minute',
        );
      }
      const ticket = await core.admission.enter(request.gaveUp, {
        tenant: tenant.name,
        priority: tenant.priority,
        maxConcurrent: tenant.maxConcurrent,
      });
      core.metrics.tenantRequest(label, 'admitted');
      return {
        release: (used) => {
          ticket.release();
          const spent = used ?? estimate;
          void Promise.resolve(core.limits.correct(tenant, spent - estimate));
          core.metrics.tenantTokens(label, spent);
        },
      };
    } catch (error) {
      if (OverloadedError.is(error)) {
        core.metrics.tenantRequest(label, error.limit);
        core.metrics.refused(pool, error.limit);
      }
      core.logger.info({ tenant: tenant.name, ...briefly(error), path: request.headers[':path'] }, 'request rejected');
      return {
        refused: refusal(endpoint, errorAnswer(error), OverloadedError.is(error) ? 'rejected-saturated' : undefined),
      };
    }
  }

  /** The pool's scheduler's decision: a generation request as the proxy would route it, anything else to a decode pod. */
  async #decide(
    pool: ModelPool,
    endpoint: Endpoint | undefined,
    body: Record<string, unknown>,
    headers: Readonly<Record<string, string>>,
    decodeAvoid: readonly ProxyDecodeWorker[],
  ): Promise<Decision<ProxyPrefillWorker, ProxyDecodeWorker>> {
    const core = this.#core;
    const { sessionHeader, prefixKeyHeader } = core.options.routing;
    const input = new RoutingInput(
      body,
      sessionKeyOf(headers, sessionHeader),
      undefined,
      endpoint,
      headers[prefixKeyHeader],
    );
    if (endpoint?.serving !== 'disaggregated') {
      return { strategy: 'aggregated', reason: 'passthrough', decode: pool.decode.acquire(decodeAvoid, input) };
    }
    if (core.routesOnTokens) {
      const ids = await core.tokenize(body, endpoint);
      if (ids !== undefined) input.tokenized(ids);
    }
    await lookUpBindings(core.sessionBindings, input);
    const skipped = pool.skipPrefill?.(body, input);
    return pool.scheduler.decide(input, { decode: decodeAvoid }, skipped);
  }

  #answer(
    decodePool: WorkerPool<ProxyDecodeWorker>,
    picked: Lease<ProxyDecodeWorker>,
    prefill: Lease<ProxyPrefillWorker> | undefined,
    admitted: (used: number | undefined) => void,
  ): PickedAnswer {
    let decode = picked;
    let prefillLease = prefill;
    let failed = false;
    let over = false;
    return {
      served: (endpoint) => {
        if (over || endpoint === endpointOf(decode.worker.url)) return;
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
        if (over) return;
        over = true;
        // A stream that broke (a client that left, a cut connection) says nothing of the pods.
        const outcome = end === 'broken' ? undefined : failed ? 'failure' : 'success';
        prefillLease?.release(outcome);
        decode.release(outcome);
        admitted(usage === undefined ? undefined : usage.promptTokens + usage.completionTokens);
      },
    };
  }
}

/** A refusal in the API's own error shape. */
function refusal(
  endpoint: Endpoint | undefined,
  answer: ReturnType<typeof errorAnswer>,
  reason: DroppedReason | undefined,
): Pick {
  return {
    kind: 'refused',
    status: answer.status,
    reason,
    body: endpoint === undefined ? answer.body : apiErrorBody(endpoint, answer),
  };
}

/** The 503 of no eligible pod. */
function noEndpoint(endpoint: Endpoint | undefined, message: string): Pick {
  return refusal(
    endpoint,
    { status: 503, body: { error: { message, type: 'service_unavailable', code: 503, param: null } } },
    'rejected-no-endpoints',
  );
}
