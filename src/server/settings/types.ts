// The option types after resolution: every default applied (what the proxy reads), and what
// `disagg serve` reads (the proxy's settings and its own).

import type { Dispatcher } from 'undici';
import type { Lookup } from '../../discovery/dns-discovery.js';
import type { EngineName } from '../../engines/registry.js';
import type { Deadlines } from '../../flow/deadlines.js';
import type { PolicyName } from '../../routing/registry.js';
import type { Logger } from '../../runtime/logger.js';
import type { EngineHook, PolicyFactory } from '../custom-parts.js';
import type { TracerLike } from '../observability/tracing.js';
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
      | 'scaling'
      | 'engine'
      | 'prefill'
      | 'decode'
      | 'pools'
      | 'rewrites'
    >
  > {
  /** Models served as weighted targets (see `ProxyOptions.rewrites`). */
  rewrites: readonly ProxyRewriteOption[];
  prefill: readonly ProxyPrefillWorker[];
  decode: readonly ProxyDecodeWorker[];
  /** More pools, one per model, as read (see `ProxyOptions.pools`). */
  pools: readonly ResolvedPool[];
  /** As given, else `selection` (the name in force when a policy of your own replaces it). */
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
  selection: 'round-robin' | 'least-in-flight';
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
  scaling: ResolvedProxyOptions['scaling'];
  workerApiKey: string | undefined;
  /** `disagg serve`'s OTLP export of the proxy's spans (a library brings its own tracer). */
  tracing: { otlpEndpoint?: string | undefined; sampleRatio: number; serviceName: string };
}
