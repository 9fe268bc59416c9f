import type { Dispatcher } from 'undici';
import type { AgentState } from '../../agent-state/agent-state.js';
import type { Endpoint } from '../../endpoints/endpoint.js';
import type { GenerationName } from '../../endpoints/registry.js';
import type { Engine } from '../../flow/disaggregate.js';
import type { SessionBindingStore } from '../../routing/session-bindings.js';
import type { LatencyPredictor } from '../../routing/slo/latency-predictor.js';
import type { Logger } from '../../runtime/logger.js';
import type { MinuteWindows, TenantLimits } from '../../tenancy/rate-window.js';
import type { TenantDirectory } from '../../tenancy/tenants.js';
import type { TokenizerPool } from '../../tokenize/tokenizer-pool.js';
import type { HealthChecker } from '../fleet/health.js';
import type { KvFollower } from '../fleet/kv-following.js';
import type { Membership } from '../fleet/membership.js';
import type { ModelRewrites } from '../fleet/model-rewrites.js';
import type { PoolSet } from '../fleet/pool-set.js';
import type { PrefillTargets } from '../fleet/prefill-targets.js';
import type { ProxyMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { ResolvedProxyOptions } from '../settings/types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { Admission } from './admission.js';
import type { InFlightRequests } from './in-flight.js';
import type { ModelLimits } from './request-schemas.js';
import type { ResponseHomes } from './response-homes.js';
import type { Stage } from './stage.js';

/**
 * What the proxy's request handlers share: its checked options, the pools, the engine that
 * calls the workers, health feedback, metrics and the requests under way.
 *
 * @internal
 */
export interface ProxyState {
  readonly options: ResolvedProxyOptions;
  /**
   * The engine that calls the workers' own `route` for one request: with the worker key, or
   * else the client's `Authorization` passed on, and `perCall`'s headers (trace context).
   */
  engineFor(
    route: GenerationName,
    authorization: string | undefined,
    perCall?: (worker: { url: string } | undefined) => Record<string, string>,
  ): Engine<{ url: string }>;
  /** OpenTelemetry, when `@opentelemetry/api` is installed. */
  readonly tracing: Tracing | undefined;
  /** How clients are told a worker's name: its configured `name`, or its role and place. */
  nameOf(worker: { url: string }): string;
  /** `text` with every known worker's address replaced by its name, then any other address by `worker` (for what clients see). */
  redact(text: string): string;
  /** What every call to a worker goes through (the options' dispatcher, or the proxy's own). */
  readonly dispatcher: Dispatcher;
  /** The headers of the proxy's own calls to workers (probes, `/v1/models`). */
  readonly workerHeaders: Record<string, string>;
  /**
   * The fleet: each model's pool (its engine, prefill and decode workers, scheduler). A request
   * takes its pool by its body's `model` once (`RequestContext.pool`).
   */
  readonly pools: PoolSet;
  /** Who is in the pools, under which names; every change at run time goes through it. */
  readonly membership: Membership;
  readonly health: HealthChecker;
  readonly metrics: ProxyMetrics;
  readonly inFlight: InFlightRequests;
  /**
   * The workers' predicted latency, where a configured plugin reads it (`slo-headroom`,
   * `slo-feasible`): each generation request's timings teach it (`latencyFeed`).
   */
  readonly latency?: LatencyPredictor<ProxyPrefillWorker | ProxyDecodeWorker> | undefined;
  /** The engines' KV events, followed per worker: told which worker computed each prompt (its silence clock). */
  readonly kv: KvFollower<ProxyPrefillWorker | ProxyDecodeWorker>;
  /** What the decode workers say of their models (the context length requests are checked against). */
  readonly models: ModelLimits;
  /** Bounded admission of generation requests (slots and a queue, by priority, fair between tenants). */
  readonly admission: Admission;
  /** Whose each request is. */
  readonly tenants: TenantDirectory;
  /** The tenants' requests and tokens in the last minute, counted in this process. */
  readonly minuteWindows: MinuteWindows;
  /** Where the tenants' limits are counted: `minuteWindows`, or Redis for every replica. */
  readonly limits: TenantLimits;
  /** The metrics' label of a tenant (bounded: `other` for names the file does not list). */
  tenantLabel(tenant: string): string;
  /**
   * The metrics' label of a request's model (bounded: `other` for a name no pool, rewrite rule
   * or worker's `/v1/models` names).
   */
  modelLabel(model: unknown): string;
  readonly logger: Logger;
  /**
   * The prompt's token ids by the router's tokenizer (`--tokenizer`); undefined without one,
   * for an endpoint with nothing to tokenize, and when tokenizing fails (logged: the request
   * then goes by load, and a tenant's tokens are estimated). Ask through the request's
   * context (`RequestContext.promptTokenIds`), which tokenizes once per request.
   */
  tokenize(body: Record<string, unknown>, endpoint: Endpoint): Promise<readonly number[] | undefined>;
  /** The router's tokenizer (`--tokenizer`), once started (`/tokenize`, `/detokenize` answered with it); undefined without one. */
  readonly tokenizer: TokenizerPool | undefined;
  /** Whether a routing policy reads the prompt's tokens (the engines' KV blocks): then every request is tokenized. */
  readonly routesOnTokens: boolean;
  /**
   * A sidecar's prefill targets (`--prefill-from header`): each request's prefill worker is the
   * one its endpoint picker named, checked against the allow-list; undefined for a proxy.
   */
  readonly prefillTargets: PrefillTargets | undefined;
  /** Sessions' bound workers shared by the replicas (`--redis-url` with the session policy); undefined otherwise. */
  readonly sessionBindings: SessionBindingStore | undefined;
  /** Models served as weighted targets (`rewrites`): applied in the body stage, before the pool is chosen. */
  readonly rewrites: ModelRewrites;
  /** Which Responses answer ids are taken on this replica (the answer-id stage claims each). */
  readonly responseHomes: ResponseHomes<{ url: string }>;
  /** Stored Responses and Conversations: the store, opened on first use. */
  readonly agents: AgentState;
  /** The stages a library user added (`addStage`): every API request runs them once admitted. */
  readonly stages: readonly Stage[];
  /** True once shutdown has begun: new requests are refused. */
  readonly closing: boolean;
  /** True from the start of shutdown, before requests are refused: `/ready` fails first. */
  readonly draining: boolean;
}
