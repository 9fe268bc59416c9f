// The option types after resolution: every default applied (what the proxy reads), and what
// `disagg serve` reads (the proxy's settings and its own); and the types of the parts of your
// own a program gives (policies, an engine hook, a tracer), which the server's modules and the
// package's entry import from ../custom-parts.ts and ../observability/tracing.ts.

import type { Dispatcher } from 'undici';
import type { Lookup } from '../../discovery/dns-discovery.js';
import type { GenerationName } from '../../endpoints/registry.js';
import type { EngineName } from '../../engines/registry.js';
import type { Deadlines } from '../../flow/deadlines.js';
import type { Engine } from '../../flow/disaggregate.js';
import type { PolicyName, RoutingServices } from '../../routing/registry.js';
import type { RoutingPolicy } from '../../routing/routing-policy.js';
import type { Logger } from '../../runtime/logger.js';
import type { ResolvedPool } from './pool-entries.js';
import type { ProxyOptions } from './proxy-options.js';
import type { ProxyRewriteOption } from './rewrite-entries.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './worker-entries.js';

/** {@link ProxyOptions} checked, with every default applied. */
export interface ResolvedProxyOptions
  extends Required<
    Omit<
      ProxyOptions,
      | 'cleanupBudgetMs'
      | 'logger'
      | 'onEvent'
      | 'dispatcher'
      | 'bootstrapPort'
      | 'apiKey'
      | 'adminKey'
      | 'tenantsFile'
      | 'tenantHeader'
      | 'tenantHeaderKeys'
      | 'redisUrl'
      | 'selection'
      | 'maxExtProcStreams'
      | 'metricsPort'
      | 'discovery'
      | 'dnsLookup'
      | 'kubeConfig'
      | 'metricsRegistry'
      | 'tracer'
      | 'workerApiKey'
      | 'retry'
      | 'breaker'
      | 'prefillPolicy'
      | 'decodePolicy'
      | 'routing'
      | 'kvEvents'
      | 'tokenizer'
      | 'migration'
      | 'sidecar'
      | 'responses'
      | 'scaling'
      | 'engine'
      | 'prefill'
      | 'decode'
      | 'pools'
      | 'rewrites'
    >
  > {
  /** As given: the policies below are resolved from it (`scored` without it). */
  selection: ProxyOptions['selection'];
  /** Models served as weighted targets (see `ProxyOptions.rewrites`). */
  rewrites: readonly ProxyRewriteOption[];
  prefill: readonly ProxyPrefillWorker[];
  decode: readonly ProxyDecodeWorker[];
  /** More pools, one per model, as read (see `ProxyOptions.pools`). */
  pools: readonly ResolvedPool[];
  /** As given, else `selection`, else `scored` (the name in force when a policy of your own replaces it). */
  prefillPolicy: PolicyName;
  decodePolicy: PolicyName;
  /** The policies of your own, per pool: they replace the names above. */
  customPolicies: {
    prefill: PolicyFactory<ProxyPrefillWorker> | undefined;
    decode: PolicyFactory<ProxyDecodeWorker> | undefined;
  };
  engine: EngineHook | undefined;
  routing: Required<NonNullable<ProxyOptions['routing']>>;
  retry: Required<NonNullable<ProxyOptions['retry']>>;
  breaker: Required<NonNullable<ProxyOptions['breaker']>>;
  cleanupBudgetMs: number;
  apiKey: string | undefined;
  adminKey: string | undefined;
  tenantsFile: string | undefined;
  tenantHeader: string | undefined;
  tenantHeaderKeys: string[] | undefined;
  redisUrl: string | undefined;
  metricsPort: number | undefined;
  discovery: {
    prefillDns: string | undefined;
    decodeDns: string | undefined;
    dnsIntervalMs: number;
    prefillSelector: string | undefined;
    decodeSelector: string | undefined;
    inferencePool: string | undefined;
    namespace: string | undefined;
    port: number;
    prefillPort: number | undefined;
    decodePort: number | undefined;
    bootstrapPortAnnotation: string;
    workerPortsAnnotation: string;
  };
  dnsLookup: Lookup | undefined;
  kubeConfig: unknown;
  metricsRegistry: unknown;
  tracer: TracerLike | undefined;
  /** SGLang: the bootstrap port given to prefill workers that name none (added ones too). */
  bootstrapPort: number;
  workerApiKey: string | undefined;
  /** As given; `disagg epp` derives it from admission when undefined. */
  maxExtProcStreams: number | undefined;
  logger: Logger | undefined;
  onEvent: ProxyOptions['onEvent'];
  dispatcher: Dispatcher | undefined;
  kvEvents: { port: number | undefined; replayPort: number | undefined; topic: string | undefined; silenceMs: number };
  tokenizer: { dir: string | undefined; threads: number };
  migration: { limit: number; via: 'decode' | 'prefill'; maxSeqLen: number | undefined };
  sidecar: { prefillFrom: 'pool' | 'header'; prefillAllow: string[]; prefillMaxRetries: number };
  responses: { store: string; ttlHours: number; maxObjects: number; maxBytes: number; memoryBytes: number };
  scaling: {
    saturationSource: 'auto' | 'engine' | 'in-flight';
    queueDepth: number;
    kvUsage: number;
    prefillRequests: number;
    decodeRequests: number;
  };
}

/** Everything `disagg serve` needs: the proxy's options, and where and how it runs. */
export interface ServeConfig {
  connector: EngineName;
  prefill: ProxyPrefillWorker[];
  decode: ProxyDecodeWorker[];
  /** More pools, one per model (see `ProxyOptions.pools`). */
  pools: ResolvedPool[];
  /** Models served as weighted targets (see `ProxyOptions.rewrites`). */
  rewrites: ProxyRewriteOption[];
  bootstrapPort: number;
  host: string;
  port: number;
  selection: 'round-robin' | 'least-in-flight' | undefined;
  requireDisaggregation: boolean;
  /** As given; `selection` applies when undefined. */
  prefillPolicy: PolicyName | undefined;
  decodePolicy: PolicyName | undefined;
  routing: Required<NonNullable<ProxyOptions['routing']>>;
  deadlines: Deadlines;
  /** As given; the flow's default (120,000 ms) applies when undefined. */
  cleanupBudgetMs: number | undefined;
  healthIntervalMs: number;
  healthTimeoutMs: number;
  healthFailureThreshold: number;
  healthSuccessThreshold: number;
  slowClientTimeoutMs: number;
  retry: Required<NonNullable<ProxyOptions['retry']>>;
  breaker: Required<NonNullable<ProxyOptions['breaker']>>;
  maxConcurrentRequests: number;
  tenantsFile: string | undefined;
  tenantHeader: string | undefined;
  tenantHeaderKeys: string[] | undefined;
  redisUrl: string | undefined;
  redisFailure: 'open' | 'closed';
  replicaSyncMs: number;
  queueSize: number;
  queueTimeoutMs: number;
  preempt: boolean;
  gracePeriodMs: number;
  drainDelayMs: number;
  keepAliveTimeoutMs: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  maxBodyBytes: number;
  /** As given; `disagg epp` derives it from admission when undefined. */
  maxExtProcStreams: number | undefined;
  logLevel: string;
  logFormat: 'json' | 'pretty';
  apiKey: string | undefined;
  adminKey: string | undefined;
  metricsPort: number | undefined;
  discovery: ResolvedProxyOptions['discovery'];
  kvEvents: ResolvedProxyOptions['kvEvents'];
  tokenizer: ResolvedProxyOptions['tokenizer'];
  migration: ResolvedProxyOptions['migration'];
  sidecar: ResolvedProxyOptions['sidecar'];
  responses: ResolvedProxyOptions['responses'];
  scaling: ResolvedProxyOptions['scaling'];
  workerApiKey: string | undefined;
  /** `disagg serve`'s OTLP export of the proxy's spans (a library brings its own tracer). */
  tracing: { otlpEndpoint?: string | undefined; sampleRatio: number; serviceName: string };
}

/**
 * How a pool of the proxy chooses its worker: a built-in policy by name (`--prefill-policy`),
 * or your own, as a {@link RoutingPolicy} (one pool's: a policy keeps state per pool) or a
 * function of the proxy's routing services that makes one (the KV block index the proxy
 * follows, the engines' load it scrapes), for a scorer of your own beside the proxy's.
 */
export type PolicyOption<W> = PolicyName | RoutingPolicy<W> | ((services: RoutingServices<W>) => RoutingPolicy<W>);

/** A policy of your own, made for its pool when the proxy is created. */
export type PolicyFactory<W> = (services: RoutingServices<W>) => RoutingPolicy<W>;

/**
 * An engine of your own for a leg, in place of the proxy's HTTP one or around it: called for
 * each request with the leg, the engine the proxy would call (its route's API, the worker key
 * or the client's `Authorization`, the trace headers) and the route; returns the engine to
 * call. Whatever it returns answers by the engine contract (a stream of `Annotated` items);
 * the flow's rules, deadlines, retries and clean-up apply to it as to the proxy's own. The
 * flow calls it with the endpoint each call is for (the request's; completions for a migrated
 * stream's continuation): pass it on to the proxy's engine, which then calls that endpoint.
 *
 * @example
 * // Every decode call with a field of yours, the rest as the proxy does it.
 * const engine: EngineHook = (leg, proxyEngine) =>
 *   leg === 'decode'
 *     ? (body, context, worker, endpoint) => proxyEngine({ ...body, priority: 1 }, context, worker, endpoint)
 *     : proxyEngine;
 * createHandler({ connector: 'vllm', prefill: [{ url: 'http://p0:8100' }], decode: [{ url: 'http://d0:8200' }], engine });
 */
export type EngineHook = (
  leg: 'prefill' | 'decode',
  proxyEngine: Engine<{ url: string }>,
  route: GenerationName,
) => Engine<{ url: string }>;

/**
 * What the proxy needs of an OpenTelemetry tracer (`trace.getTracer(...)` of
 * `@opentelemetry/api`): typed here so that the package's types do not require the API.
 */
export interface TracerLike {
  startSpan(name: string, options?: object, context?: unknown): unknown;
}
