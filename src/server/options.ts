import type { Registry } from 'prom-client';
import type { Dispatcher } from 'undici';
import { DNS_INTERVAL_MS, type Lookup } from '../discovery/dns-discovery.js';
import {
  DECODE_WORKER_FIELDS,
  ENGINE_NAMES,
  ENGINES,
  type EngineName,
  engineOf,
  PREFILL_WORKER_FIELDS,
} from '../engines/registry.js';
import type { SglangPrefillWorkerFields, WorkerFieldKind } from '../engines/sglang/worker-fields.js';
import { DEFAULT_DEADLINES, type Deadlines } from '../flow/deadlines.js';
import { DEFAULT_CLEANUP_BUDGET_MS } from '../flow/decode-leg.js';
import type { FlowEvent } from '../flow/events.js';
import { CACHE_AWARE_DEFAULTS } from '../routing/cache-aware.js';
import { POLICY_NAMES, type PolicyName } from '../routing/registry.js';
import type { Logger } from '../runtime/logger.js';
import { closest } from '../util/closest.js';
import { describeValue } from '../util/describe-value.js';
import { ConfigError } from './config-error.js';
import { customPolicy, type EngineHook, engineHook, type PolicyFactory, type PolicyOption } from './custom-parts.js';
import { RETRY_DEFAULTS } from './failure-rules.js';
import { BREAKER_DEFAULTS, HEALTH_DEFAULTS } from './health.js';
import { DEFAULT_MAX_BODY_BYTES } from './request-body.js';
import type { TracerLike } from './tracing.js';

/**
 * A prefill worker of the proxy: its base URL and, for SGLang, its bootstrap server and DP
 * rank ({@link SglangPrefillWorkerFields}).
 */
export interface ProxyPrefillWorker extends SglangPrefillWorkerFields, KvEventEndpoints {
  url: string;
  /** How clients and metrics name it (`prefill-0`, ... by its place in the list when omitted): never its address. */
  name?: string | undefined;
}

/**
 * Where a worker publishes its KV cache events, when not at `--kv-events-port` on its host
 * (`tcp://10.0.0.5:5557`); a worker of another host's publisher, say.
 */
export interface KvEventEndpoints {
  kvEvents?: string | undefined;
  kvEventsReplay?: string | undefined;
}

/** A decode worker of the proxy. */
export interface ProxyDecodeWorker extends KvEventEndpoints {
  url: string;
  /** How clients and metrics name it (`decode-0`, ... by its place in the list when omitted): never its address. */
  name?: string | undefined;
}

// The ways a pool can choose its worker (`--prefill-policy`, `--decode-policy`): the routing
// registry's names, re-exported where the settings' types were.
export { POLICY_NAMES, type PolicyName } from '../routing/registry.js';

/**
 * Options of `createProxy`. Every setting is described, with its default, its command-line
 * flag and its environment variable, in one table (`SETTINGS` in `options.ts`), which `createProxy`,
 * `disagg serve` and its `--help` all read, so they cannot disagree.
 */
export interface ProxyOptions {
  /**
   * The engines behind: vLLM with NIXL (sequential), SGLang with its bootstrap (concurrent), or
   * TensorRT-LLM context first (sequential).
   */
  connector: EngineName;
  /** The prefill workers at start; may be empty when `discovery` finds them. */
  prefill: readonly ProxyPrefillWorker[];
  /** The decode workers at start; may be empty when `discovery` finds them. */
  decode: readonly ProxyDecodeWorker[];
  /**
   * Workers found at run time. `prefillDns`/`decodeDns`: a URL whose host name (a Kubernetes
   * headless Service, say) is resolved every `dnsIntervalMs` (10,000 by default); each address
   * is a worker on the URL's port; an address that vanishes drains.
   */
  discovery?:
    | {
        prefillDns?: string | undefined;
        decodeDns?: string | undefined;
        dnsIntervalMs?: number | undefined;
        /** Kubernetes: the label selector of prefill pods (`app=sglang,role=prefill`). */
        prefillSelector?: string | undefined;
        /** Kubernetes: the label selector of decode pods. */
        decodeSelector?: string | undefined;
        /** Kubernetes: the namespace watched; every namespace when omitted. */
        namespace?: string | undefined;
        /** Kubernetes: the workers' HTTP port on each pod; 8000 by default. */
        port?: number | undefined;
        /** Kubernetes: the prefill pods' HTTP port, when it is not `port` (SGLang's guide: 30000). */
        prefillPort?: number | undefined;
        /** Kubernetes: the decode pods' HTTP port, when it is not `port` (SGLang's guide: 30001). */
        decodePort?: number | undefined;
        /**
         * Kubernetes: the annotation with a prefill pod's SGLang bootstrap port (one, or one per
         * worker port); `sglang.ai/bootstrap-port` by default.
         */
        bootstrapPortAnnotation?: string | undefined;
        /**
         * Kubernetes: the annotation with the HTTP ports of a pod that serves several workers,
         * comma-separated (each a worker); `smg.ai/worker-ports` by default, as SGLang's model
         * gateway. Without it a pod is one worker on `port`.
         */
        workerPortsAnnotation?: string | undefined;
      }
    | undefined;
  /** How `discovery` names are resolved; the system's resolver by default (a test's stand-in, say). */
  dnsLookup?: Lookup | undefined;
  /**
   * A prom-client `Registry` of the application's that the proxy's metrics join too (its
   * `/metrics` then includes them). The proxy's own registry, with Node's process metrics,
   * serves the proxy's `/metrics` either way.
   */
  metricsRegistry?: Registry | undefined;
  /**
   * The `KubeConfig` (of `@kubernetes/client-node`) of Kubernetes discovery; the pod's service
   * account, `KUBECONFIG` or `~/.kube/config` by default. Typed loosely on purpose: the
   * client is an optional dependency, and its types must not be needed to compile against
   * `disagg/server` without it (checked when discovery starts: a `KubeConfig` is what it needs).
   */
  kubeConfig?: object | undefined;
  /**
   * The OpenTelemetry tracer of the proxy's spans; by default the global one of
   * `@opentelemetry/api` when that is installed (it records once the application registers an
   * SDK). Without the API, the client's `traceparent` still reaches both legs.
   */
  tracer?: TracerLike | undefined;
  /**
   * The bearer token of the admin API (`GET/POST /admin/workers`, drain, remove), which is off
   * (404) without one.
   */
  adminKey?: string | undefined;
  /**
   * Serve `/metrics` on this port of its own (the host `listen` is given), not on the API
   * port: a Service or NetworkPolicy then exposes the API without the fleet's metrics. On the
   * API port by default.
   */
  metricsPort?: number | undefined;
  /** SGLang: the bootstrap port of prefill workers that do not name their own; 8998 by default. */
  bootstrapPort?: number | undefined;
  /** How a worker is chosen for each leg; `least-in-flight` by default. */
  selection?: 'round-robin' | 'least-in-flight' | undefined;
  /**
   * Refuse to serve prompts on decode alone: without a prefill worker in rotation `/ready`
   * fails and requests get a 503 saying so (`disagg_routed_requests_total{reason=
   * "no-prefill-worker"}` counts what was served that way otherwise). False by default: decode
   * serves such requests whole, as the reference router does.
   */
  requireDisaggregation?: boolean | undefined;
  /**
   * How the prefill worker of a request is chosen, by more than `selection`: `cache-aware`
   * (to the worker whose cache most likely holds the prompt's prefix), `power-of-two`,
   * `session` (one worker per session key), `precise-prefix` and the rest of the registry; or
   * a policy of your own (a `RoutingPolicy`, or a function of the proxy's routing services
   * making one: see {@link PolicyOption}). `selection` by default.
   */
  prefillPolicy?: PolicyOption<ProxyPrefillWorker> | undefined;
  /** How the decode worker of a request is chosen, as `prefillPolicy`; `selection` by default. */
  decodePolicy?: PolicyOption<ProxyDecodeWorker> | undefined;
  /**
   * The cache-aware and session policies' settings: a match must cover more than
   * `cacheThreshold` of the prompt (0.5); load is imbalanced, and the least loaded worker wins,
   * past `balanceAbsThreshold` more requests (32) and `balanceRelThreshold` times as many
   * (1.1); `maxTreeChars` of prompts remembered per worker (8 Mi); the session key is the
   * `sessionHeader` header (`x-session-id`), or the body's `user`.
   */
  routing?:
    | {
        /** Prompts (routing text) shorter than this many characters are served on decode alone; 0 (never) by default. */
        aggregateBelowChars?: number | undefined;
        /**
         * With `decodePolicy: 'cache-aware'`: a request whose prompt a decode worker is known to
         * hold more than this share of is served on that worker alone; 0 (never) by default.
         */
        aggregateCachedRatio?: number | undefined;
        cacheThreshold?: number | undefined;
        balanceAbsThreshold?: number | undefined;
        balanceRelThreshold?: number | undefined;
        maxTreeChars?: number | undefined;
        sessionHeader?: string | undefined;
        /** precise-prefix: the weight of KV prefix overlap against load (whose weight is 1); 2 by default. */
        prefixWeight?: number | undefined;
        /**
         * precise-prefix: how long a prompt just routed counts as held by its worker before the
         * engine's event confirms it (a speculative entry), in ms; 0 for none; 2,000 by default.
         */
        speculativeTtlMs?: number | undefined;
        /**
         * precise-prefix: read each worker's own load (requests waiting and running, KV cache
         * usage) from its `/metrics` this often, in ms, and score it; 0 (off) by default.
         */
        engineLoadIntervalMs?: number | undefined;
        /** How old a worker's load reading may be before it counts as unknown, in ms; 2,000 by default. */
        engineLoadStaleMs?: number | undefined;
      }
    | undefined;
  /**
   * The engines' KV cache events, which `precise-prefix` routes on (vLLM and SGLang publish them
   * with `--kv-events-config`): each worker's publisher at `port` on its host (a DP rank r at
   * port + r), its replay socket at `replayPort`, messages of `topic` (every topic by default).
   * A worker's own `kvEvents` and `kvEventsReplay` endpoints win. Off by default.
   */
  kvEvents?: { port?: number | undefined; replayPort?: number | undefined; topic?: string | undefined } | undefined;
  /**
   * The router's own tokenizer, for `precise-prefix` on text and chat prompts (the engines'
   * blocks are tokens): `dir` holds the model's Hugging Face `tokenizer.json` and
   * `tokenizer_config.json` (its chat template), tokenized in `threads` worker threads (1).
   * Without one, only token-id prompts are matched to blocks.
   */
  tokenizer?: { dir?: string | undefined; threads?: number | undefined } | undefined;
  /**
   * Budgets per phase in milliseconds, `0` for none; by default every phase but the total:
   * prefill's first output 600,000, the handoff 600,000, decode's first token 300,000, idle
   * 120,000 (`disagg serve --help` lists them).
   */
  deadlines?: Deadlines | undefined;
  /** How long decode may take to take the KV after the client left; 120,000 ms by default. */
  cleanupBudgetMs?: number | undefined;
  /** Between health probes of every worker; 5,000 ms by default. */
  healthIntervalMs?: number | undefined;
  /** How long one health probe may take before it counts as failed; 2,000 ms by default. */
  healthTimeoutMs?: number | undefined;
  /**
   * Failed probes in a row that take a worker out of rotation (one that cannot be connected
   * to is out at once); 3 by default.
   */
  healthFailureThreshold?: number | undefined;
  /** Successful probes in a row that bring a worker back; 2 by default. */
  healthSuccessThreshold?: number | undefined;
  /**
   * How long a client may leave its socket full before the request is given up: the decode
   * leg is stopped (and its KV cleaned up) and the connection closed; 30,000 ms by default.
   * The proxy reads decode only as fast as the client reads, so it never buffers more than one
   * chunk beyond the socket's own buffer.
   */
  slowClientTimeoutMs?: number | undefined;
  /** The largest request body accepted, in bytes; 8 MiB by default. */
  maxBodyBytes?: number | undefined;
  /**
   * How long an idle client connection is kept open; 72,000 ms by default (as fastify does).
   * Node's own default of 5 s makes busy clients reconnect between bursts: measured in
   * `bench:proxy`, it cost a relay about a quarter of its requests per second.
   */
  keepAliveTimeoutMs?: number | undefined;
  /**
   * How long a client may take to send a request's headers (from its first byte, or from the
   * connection for a new one that says nothing); past it the connection is closed. 10,000 ms
   * by default (Node's own is 60 s).
   */
  headersTimeoutMs?: number | undefined;
  /**
   * How long a client may take to send a whole request, headers and body; past it the
   * connection is closed with a 408. 120,000 ms by default (Node's own is 300 s): a body of
   * 8 MiB still arrives within it at 1 Mbit/s.
   */
  requestTimeoutMs?: number | undefined;
  /**
   * Generation requests served at once; beyond it they wait in a queue. 1,024 by default: a
   * bound on what reaches the workers and on the proxy's own memory, not a tuning of them.
   */
  maxConcurrentRequests?: number | undefined;
  /** Requests that may wait for a slot; beyond it a 429 with `Retry-After`. 1,024 by default. */
  queueSize?: number | undefined;
  /** How long a request may wait in the queue before it gets a 429; 30,000 ms by default. */
  queueTimeoutMs?: number | undefined;
  /**
   * Tenants: a YAML or JSON file of `tenants: [{ name, keys, priority, requestsPerMinute,
   * tokensPerMinute, maxConcurrent }]`, `default:` (the limits of requests that name no
   * tenant) and `bands: [{ priority, queueTimeoutMs }]`, read again when it changes. A
   * request is its key's tenant (a tenant's key is an API key too), or the tenant a trusted
   * gateway names in `tenantHeader` (from the keys in `tenantHeaderKeys`, or any request), else
   * the default tenant. None by default: one tenant without limits.
   */
  tenantsFile?: string | undefined;
  tenantHeader?: string | undefined;
  tenantHeaderKeys?: string[] | undefined;
  /**
   * The tenants' per-minute limits in this Redis, shared by every replica (in this process
   * without one). `redisFailure`: while Redis is unreachable, `'open'` (the default) lets
   * requests in without those limits (logged, `disagg_redis_failures_total`), `'closed'`
   * refuses limited tenants' requests with a 503.
   */
  redisUrl?: string | undefined;
  redisFailure?: 'open' | 'closed' | undefined;
  /**
   * Retries of a request that failed before its first byte on a worker failure that another
   * worker may not have (refused or reset before an answer, a 5xx, a 429), on another worker
   * where there is one, after a backoff with full jitter: the request again with a fresh
   * prefill (and with SGLang a fresh room), or, for a sequential decode that could not be
   * reached, that decode alone with the same handoff (`reuseHandoff`). `maxRetries` 2 in all,
   * `initialBackoffMs` 50, `maxBackoffMs` 1,000 by default; `disabled` turns them off.
   * `reuseHandoff`: `'unreached'` (the default; vLLM 0.21 and later free the KV of a request
   * their decode refused or aborted) or `'always'` (vLLM before 0.21, which holds it until a
   * decode takes it).
   */
  retry?:
    | {
        maxRetries?: number | undefined;
        initialBackoffMs?: number | undefined;
        maxBackoffMs?: number | undefined;
        disabled?: boolean | undefined;
        reuseHandoff?: 'unreached' | 'always' | undefined;
      }
    | undefined;
  /**
   * Decode migration: a streamed request whose decode stream breaks after its first token (the
   * worker's connection reset, an error event, silence past the idle deadline) goes on, up to
   * `limit` times (0, off, by default), on another worker: the prompt's token ids and those
   * generated so far as a token-id completion with the rest of the budget (or, for stop
   * strings and routes that return no token ids, the request again with what the client has
   * skipped), computed on a decode worker (`via: 'decode'`, the default) or through a new
   * prefill (`'prefill'`); sequences longer than `maxSeqLen` tokens are not moved. The client
   * reads one stream. What is not continued faithfully (`n > 1`, guided decoding, tools,
   * logprobs) fails as without migration, and the log says why.
   */
  migration?:
    | { limit?: number | undefined; via?: 'decode' | 'prefill' | undefined; maxSeqLen?: number | undefined }
    | undefined;
  /**
   * The circuit breaker of each worker: `failureThreshold` requests in a row that failed on it
   * (5xx, broken stream) take it out of rotation for `openMs`, then it is on trial until
   * `successThreshold` successes in a row. 5, 2 and 10,000 ms by default.
   */
  breaker?:
    | { failureThreshold?: number | undefined; successThreshold?: number | undefined; openMs?: number | undefined }
    | undefined;
  /** On `close()`, how long requests under way may take to finish; 30,000 ms by default. */
  gracePeriodMs?: number | undefined;
  /**
   * On `close()` (SIGTERM), how long `/ready` answers 503 while requests are still accepted,
   * before the listener closes: time for load balancers and Kubernetes to stop sending (a
   * readiness probe's period). 5,000 ms by default; 0 closes at once.
   */
  drainDelayMs?: number | undefined;
  /**
   * The key clients must send (`Authorization: Bearer <key>`) on the `/v1` routes; none by
   * default. Compared in constant time; a wrong or missing key is a 401.
   */
  apiKey?: string | undefined;
  /**
   * The key sent to every worker (`Authorization: Bearer <key>`: both legs, health probes,
   * `/v1/models`), for workers started with `--api-key`. Without one, a client's own
   * `Authorization` is passed on to the workers of its request.
   */
  workerApiKey?: string | undefined;
  logger?: Logger | undefined;
  /** Receives every request's lifecycle events (see `FlowEvent`), for your own logs or traces. */
  onEvent?: ((event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>) => void) | undefined;
  /**
   * The undici dispatcher for every call to a worker (connection pool), yours to close; by
   * default the proxy's own, which shutdown closes so that no call outlives it.
   */
  dispatcher?: Dispatcher | undefined;
  /**
   * An engine of your own for a leg, in place of the proxy's HTTP one or around it (see
   * {@link EngineHook}); the proxy's own by default.
   */
  engine?: EngineHook | undefined;
}

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
      | 'engine'
    >
  > {
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
  logger: Logger | undefined;
  onEvent: ProxyOptions['onEvent'];
  dispatcher: Dispatcher | undefined;
  kvEvents: { port: number | undefined; replayPort: number | undefined; topic: string | undefined };
  tokenizer: { dir: string | undefined; threads: number };
  migration: { limit: number; via: 'decode' | 'prefill'; maxSeqLen: number | undefined };
}

/** Everything `disagg serve` needs: the proxy's options, and where and how it runs. */
export interface ServeConfig {
  connector: EngineName;
  prefill: ProxyPrefillWorker[];
  decode: ProxyDecodeWorker[];
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
  queueSize: number;
  queueTimeoutMs: number;
  gracePeriodMs: number;
  drainDelayMs: number;
  keepAliveTimeoutMs: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  maxBodyBytes: number;
  logLevel: string;
  logFormat: 'json' | 'pretty';
  apiKey: string | undefined;
  adminKey: string | undefined;
  metricsPort: number | undefined;
  discovery: ResolvedProxyOptions['discovery'];
  kvEvents: ResolvedProxyOptions['kvEvents'];
  tokenizer: ResolvedProxyOptions['tokenizer'];
  migration: ResolvedProxyOptions['migration'];
  workerApiKey: string | undefined;
  /** `disagg serve`'s OTLP export of the proxy's spans (a library brings its own tracer). */
  tracing: { otlpEndpoint?: string | undefined; sampleRatio: number; serviceName: string };
}

/** The deadlines the flow gets: the settings, each one given (`0` turns one off there). */
function activeDeadlines(deadlines: Deadlines | undefined): Deadlines {
  return { ...(deadlines ?? {}) };
}

export { ConfigError } from './config-error.js';

/**
 * Gathers the problems of a configuration instead of stopping at the first: an operator who
 * restarts a pod for each misspelt key learns of them one crash loop at a time.
 */
class Problems {
  readonly #found: string[] = [];

  /** Runs `step`; a ConfigError it throws is noted (undefined returned), anything else rethrown. */
  check<T>(step: () => T): T | undefined {
    try {
      return step();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      this.#found.push(...error.problems);
      return undefined;
    }
  }

  add(problem: string): void {
    this.#found.push(problem);
  }

  get count(): number {
    return this.#found.length;
  }

  /** @throws {ConfigError} with every problem noted, if any was. */
  throwIfAny(): void {
    if (this.#found.length > 0) throw ConfigError.of(this.#found);
  }
}

/** Why a value was refused; the caller adds the setting's name. */
class Invalid extends Error {}

/** One setting: its names everywhere, what it takes, its default. */
export interface Setting {
  /** The option of `createProxy` and the key of a config file (`deadlines.idleMs`: nested). */
  key: string;
  /** The command-line flag, without `--`. */
  flag: string;
  /** The environment variable. */
  env: string;
  /** What the flag takes, for the help text. */
  arg: string;
  help: string;
  /** The default, applied when no source gives the setting (undefined: none, or required). */
  default?: unknown | undefined;
  /** The default as the help text shows it, when it is not the value itself. */
  shownDefault?: string | undefined;
  /** Only `disagg serve` has it (where and how the process runs); not an option of `createProxy`. */
  serveOnly?: boolean | undefined;
  /** Given more than once on the command line (worker lists). */
  multiple?: boolean | undefined;
  /** A switch: the flag alone says true (`arg` is empty); variables and files say true or false. */
  boolean?: boolean | undefined;
  /** The value from what a source gave (flags and the environment give strings). */
  parse(value: unknown): unknown;
  /** The concern it belongs to, the heading `--help` lists it under (set by its group). */
  group?: SettingGroup | undefined;
}

/** The concerns the settings are grouped by, in `--help`'s order. */
export type SettingGroup =
  | 'Workers'
  | 'Listening'
  | 'Routing'
  | 'Deadlines'
  | 'Health'
  | 'Retries'
  | 'Admission'
  | 'Shutdown and connections'
  | 'Keys'
  | 'KV events'
  | 'Discovery'
  | 'Logs and traces';

/** A row made by a function (one per role, say), its key kept as a literal. */
function row<const K extends string>(setting: Setting & { key: K }): Setting & { key: K } {
  return setting;
}

/** The rows of one concern, each stamped with it (their keys kept as literals, for the checks below). */
function inGroup<const R extends readonly Setting[]>(group: SettingGroup, rows: R): R {
  return rows.map((row) => ({ ...row, group })) as unknown as R;
}

const PINO_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The rows of {@link SETTINGS}, their keys as literals. */
const SETTING_ROWS = [
  ...inGroup('Workers', [
    {
      key: 'connector',
      flag: 'connector',
      env: 'DISAGG_CONNECTOR',
      arg: ENGINE_NAMES.join('|'),
      help: `the workers' engine (${ENGINES.slice(0, -1)
        .map((each) => each.title)
        .join(', ')}, or ${ENGINES.at(-1)?.title})`,
      parse: oneOf(ENGINE_NAMES),
    },
    {
      key: 'prefill',
      flag: 'prefill',
      env: 'DISAGG_PREFILL',
      arg: 'URL[,URL...]',
      help: 'prefill workers (repeatable)',
      multiple: true,
      parse: (value) => prefillWorkers(workers(value, PREFILL_WORKER_FIELDS)),
    },
    {
      key: 'decode',
      flag: 'decode',
      env: 'DISAGG_DECODE',
      arg: 'URL[,URL...]',
      help: 'decode workers (repeatable)',
      multiple: true,
      parse: (value) => workers(value, DECODE_WORKER_FIELDS),
    },
    {
      key: 'bootstrapPort',
      flag: 'bootstrap-port',
      env: 'DISAGG_BOOTSTRAP_PORT',
      arg: 'N',
      help: "SGLang: the prefill workers' bootstrap port",
      default: 8998,
      parse: port,
    },
  ]),
  ...inGroup('Listening', [
    {
      key: 'host',
      flag: 'host',
      env: 'DISAGG_HOST',
      arg: 'HOST',
      help: 'where to listen',
      default: '0.0.0.0',
      serveOnly: true,
      parse: text,
    },
    {
      key: 'port',
      flag: 'port',
      env: 'DISAGG_PORT',
      arg: 'N',
      help: 'the port to listen on',
      default: 8000,
      serveOnly: true,
      parse: port,
    },
    {
      key: 'metricsPort',
      flag: 'metrics-port',
      env: 'DISAGG_METRICS_PORT',
      arg: 'N',
      help: 'serve /metrics on this port only (not on --port), for a scrape the API port does not expose',
      shownDefault: 'on --port',
      parse: port,
    },
  ]),
  ...inGroup('Routing', [
    {
      key: 'requireDisaggregation',
      flag: 'require-disaggregation',
      env: 'DISAGG_REQUIRE_DISAGGREGATION',
      arg: '',
      help: 'without a prefill worker in rotation, fail /ready and answer 503 instead of serving on decode alone',
      default: false,
      boolean: true,
      parse: switchValue,
    },
    {
      key: 'selection',
      flag: 'selection',
      env: 'DISAGG_SELECTION',
      arg: 'least-in-flight|round-robin',
      help: 'how a worker is chosen for each leg',
      default: 'least-in-flight',
      parse: oneOf(['least-in-flight', 'round-robin']),
    },
    ...(['prefill', 'decode'] as const).map((leg) =>
      row({
        key: `${leg}Policy` as const,
        flag: `${leg}-policy`,
        env: `DISAGG_${leg.toUpperCase()}_POLICY`,
        arg: POLICY_NAMES.join('|'),
        help: `how the ${leg} worker is chosen (cache-aware: where the prompt's prefix most likely is cached; session: one worker per session key)`,
        shownDefault: 'as --selection',
        parse: oneOf(POLICY_NAMES),
      }),
    ),
    {
      key: 'routing.aggregateBelowChars',
      flag: 'aggregate-below-chars',
      env: 'DISAGG_AGGREGATE_BELOW_CHARS',
      arg: 'N',
      help: 'serve prompts shorter than N characters on decode alone (0: never)',
      default: 0,
      parse: nonNegativeInteger,
    },
    {
      key: 'routing.aggregateCachedRatio',
      flag: 'aggregate-cached-ratio',
      env: 'DISAGG_AGGREGATE_CACHED_RATIO',
      arg: 'R',
      help: 'with --decode-policy cache-aware: serve on decode alone when a decode worker holds more than R of the prompt (0: never)',
      default: 0,
      parse: unitRatio,
    },
    {
      key: 'routing.cacheThreshold',
      flag: 'cache-threshold',
      env: 'DISAGG_CACHE_THRESHOLD',
      arg: 'R',
      help: 'cache-aware: the share of the prompt a worker must hold (0 to 1) for a request to go there',
      default: CACHE_AWARE_DEFAULTS.cacheThreshold,
      parse: unitRatio,
    },
    {
      key: 'routing.balanceAbsThreshold',
      flag: 'balance-abs-threshold',
      env: 'DISAGG_BALANCE_ABS_THRESHOLD',
      arg: 'N',
      help: 'cache-aware: requests in flight the busiest worker may have over the idlest before load wins over the cache',
      default: CACHE_AWARE_DEFAULTS.balanceAbsThreshold,
      parse: nonNegativeInteger,
    },
    {
      key: 'routing.balanceRelThreshold',
      flag: 'balance-rel-threshold',
      env: 'DISAGG_BALANCE_REL_THRESHOLD',
      arg: 'R',
      help: 'cache-aware: and how many times as many (1 or more)',
      default: CACHE_AWARE_DEFAULTS.balanceRelThreshold,
      parse: atLeastOne,
    },
    {
      key: 'routing.maxTreeChars',
      flag: 'max-tree-chars',
      env: 'DISAGG_MAX_TREE_CHARS',
      arg: 'N',
      help: 'cache-aware: characters of prompts remembered per worker (least recently used dropped first)',
      default: CACHE_AWARE_DEFAULTS.maxTreeChars,
      parse: positiveInteger,
    },
    {
      key: 'routing.prefixWeight',
      flag: 'prefix-weight',
      env: 'DISAGG_PREFIX_WEIGHT',
      arg: 'W',
      help: 'precise-prefix: the weight of KV prefix overlap against load (whose weight is 1)',
      default: 2,
      parse: positiveNumber,
    },
    {
      key: 'routing.speculativeTtlMs',
      flag: 'speculative-ttl-ms',
      env: 'DISAGG_SPECULATIVE_TTL_MS',
      arg: 'N',
      help: "precise-prefix: how long a prompt just routed counts as held by its worker before the engine's KV event confirms it (0: never)",
      default: 2000,
      parse: nonNegativeMs,
    },
    {
      key: 'routing.engineLoadIntervalMs',
      flag: 'engine-load-interval-ms',
      env: 'DISAGG_ENGINE_LOAD_INTERVAL_MS',
      arg: 'N',
      help: "precise-prefix: read each worker's own load from its /metrics (vLLM's and SGLang's queue and KV usage) this often, and score it (0: off)",
      default: 0,
      parse: nonNegativeMs,
    },
    {
      key: 'routing.engineLoadStaleMs',
      flag: 'engine-load-stale-ms',
      env: 'DISAGG_ENGINE_LOAD_STALE_MS',
      arg: 'N',
      help: "a worker's load reading older than this counts as unknown",
      default: 2000,
      parse: positiveMs,
    },
    {
      key: 'routing.sessionHeader',
      flag: 'session-header',
      env: 'DISAGG_SESSION_HEADER',
      arg: 'NAME',
      help: "session: the request header with the session key (else the body's user)",
      default: 'x-session-id',
      parse: headerName,
    },
  ]),
  ...inGroup('Deadlines', [
    ...(
      [
        ['totalMs', 'total', 'the whole request', undefined],
        [
          'prefillFirstOutputMs',
          'prefill-first-output',
          "prefill's first output",
          DEFAULT_DEADLINES.prefillFirstOutputMs,
        ],
        ['handoffMs', 'handoff', 'until prefill has completed and decode has answered', DEFAULT_DEADLINES.handoffMs],
        [
          'decodeFirstTokenMs',
          'decode-first-token',
          "decode's answer, then its first token",
          DEFAULT_DEADLINES.decodeFirstTokenMs,
        ],
        ['idleMs', 'idle', 'between decode items', DEFAULT_DEADLINES.idleMs],
      ] as const
    ).map(([key, name, what, fallback]) =>
      row({
        key: `deadlines.${key}` as const,
        flag: `deadline-${name}-ms`,
        env: `DISAGG_DEADLINE_${name.toUpperCase().replaceAll('-', '_')}_MS`,
        arg: 'N',
        help: `deadline: ${what}; 0 for none`,
        ...(fallback === undefined ? { shownDefault: 'none' } : { default: fallback }),
        parse: nonNegativeMs,
      }),
    ),
    {
      key: 'cleanupBudgetMs',
      flag: 'cleanup-budget-ms',
      env: 'DISAGG_CLEANUP_BUDGET_MS',
      arg: 'N',
      help: 'time decode has to take the KV after a client left',
      shownDefault: String(DEFAULT_CLEANUP_BUDGET_MS),
      parse: positiveMs,
    },
    {
      key: 'slowClientTimeoutMs',
      flag: 'slow-client-timeout-ms',
      env: 'DISAGG_SLOW_CLIENT_TIMEOUT_MS',
      arg: 'N',
      help: 'how long a client may not read before it is given up',
      default: 30_000,
      parse: positiveMs,
    },
  ]),
  ...inGroup('Health', [
    {
      key: 'healthIntervalMs',
      flag: 'health-interval-ms',
      env: 'DISAGG_HEALTH_INTERVAL_MS',
      arg: 'N',
      help: 'between worker health probes',
      default: HEALTH_DEFAULTS.intervalMs,
      parse: positiveMs,
    },
    {
      key: 'healthTimeoutMs',
      flag: 'health-timeout-ms',
      env: 'DISAGG_HEALTH_TIMEOUT_MS',
      arg: 'N',
      help: 'how long one health probe may take before it counts as failed (a worker busy with long prompts may answer /health late)',
      default: HEALTH_DEFAULTS.timeoutMs,
      parse: positiveMs,
    },
    {
      key: 'healthFailureThreshold',
      flag: 'health-failure-threshold',
      env: 'DISAGG_HEALTH_FAILURE_THRESHOLD',
      arg: 'N',
      help: 'failed probes in a row that take a worker out (unreachable: at once)',
      default: HEALTH_DEFAULTS.failureThreshold,
      parse: positiveInteger,
    },
    {
      key: 'healthSuccessThreshold',
      flag: 'health-success-threshold',
      env: 'DISAGG_HEALTH_SUCCESS_THRESHOLD',
      arg: 'N',
      help: 'successful probes in a row that bring a worker back',
      default: HEALTH_DEFAULTS.successThreshold,
      parse: positiveInteger,
    },
    {
      key: 'breaker.failureThreshold',
      flag: 'breaker-failure-threshold',
      env: 'DISAGG_BREAKER_FAILURE_THRESHOLD',
      arg: 'N',
      help: 'requests in a row failing on a worker that open its circuit (out of rotation)',
      default: BREAKER_DEFAULTS.failureThreshold,
      parse: positiveInteger,
    },
    {
      key: 'breaker.successThreshold',
      flag: 'breaker-success-threshold',
      env: 'DISAGG_BREAKER_SUCCESS_THRESHOLD',
      arg: 'N',
      help: 'successes in a row on trial that close a circuit again',
      default: BREAKER_DEFAULTS.successThreshold,
      parse: positiveInteger,
    },
    {
      key: 'breaker.openMs',
      flag: 'breaker-open-ms',
      env: 'DISAGG_BREAKER_OPEN_MS',
      arg: 'N',
      help: 'how long an open circuit keeps its worker out before a trial',
      default: BREAKER_DEFAULTS.openMs,
      parse: positiveMs,
    },
  ]),
  ...inGroup('Retries', [
    {
      key: 'retry.maxRetries',
      flag: 'retry-max-retries',
      env: 'DISAGG_RETRY_MAX_RETRIES',
      arg: 'N',
      help: 'retries of a request that failed on a worker before its first byte',
      default: RETRY_DEFAULTS.maxRetries,
      parse: nonNegativeInteger,
    },
    {
      key: 'retry.initialBackoffMs',
      flag: 'retry-initial-backoff-ms',
      env: 'DISAGG_RETRY_INITIAL_BACKOFF_MS',
      arg: 'N',
      help: 'the backoff before the first retry (doubling, with full jitter)',
      default: RETRY_DEFAULTS.initialBackoffMs,
      parse: nonNegativeMs,
    },
    {
      key: 'retry.maxBackoffMs',
      flag: 'retry-max-backoff-ms',
      env: 'DISAGG_RETRY_MAX_BACKOFF_MS',
      arg: 'N',
      help: 'the longest backoff between retries',
      default: RETRY_DEFAULTS.maxBackoffMs,
      parse: nonNegativeMs,
    },
    {
      key: 'retry.reuseHandoff',
      flag: 'retry-reuse-handoff',
      env: 'DISAGG_RETRY_REUSE_HANDOFF',
      arg: 'unreached|always',
      help: 'a failed sequential decode gets the same handoff on another decode worker: only if it was never reached (unreached: vLLM >= 0.21 frees the KV of what its decode refused), or always (vLLM < 0.21); else the request runs again from prefill',
      default: 'unreached',
      parse: oneOf(['unreached', 'always']),
    },
    {
      key: 'migration.limit',
      flag: 'migration-limit',
      env: 'DISAGG_MIGRATION_LIMIT',
      arg: 'N',
      help: 'times one streamed request may move to another worker when its decode stream breaks after the first token (a reset, an error event, silence past --idle-ms, its worker taken out of rotation): the prompt and the tokens generated so far go on as one stream; 0 turns it off',
      default: 0,
      parse: nonNegativeInteger,
    },
    {
      key: 'migration.via',
      flag: 'migration-via',
      env: 'DISAGG_MIGRATION_VIA',
      arg: 'decode|prefill',
      help: "where a migrated request's continuation computes its prompt: aggregated on a decode worker, or through a new prefill",
      default: 'decode',
      parse: oneOf(['decode', 'prefill']),
    },
    {
      key: 'migration.maxSeqLen',
      flag: 'migration-max-seq-len',
      env: 'DISAGG_MIGRATION_MAX_SEQ_LEN',
      arg: 'N',
      help: 'the longest sequence (prompt and generated tokens) migrated; longer ones fail as without migration',
      shownDefault: 'no bound',
      parse: positiveInteger,
    },
    {
      key: 'retry.disabled',
      flag: 'disable-retries',
      env: 'DISAGG_DISABLE_RETRIES',
      arg: '',
      help: 'never retry a request on another worker',
      default: false,
      boolean: true,
      parse: switchValue,
    },
  ]),
  ...inGroup('Admission', [
    {
      key: 'maxConcurrentRequests',
      flag: 'max-concurrent-requests',
      env: 'DISAGG_MAX_CONCURRENT_REQUESTS',
      arg: 'N',
      help: 'generation requests served at once (more wait in the queue)',
      default: 1024,
      parse: positiveInteger,
    },
    {
      key: 'queueSize',
      flag: 'queue-size',
      env: 'DISAGG_QUEUE_SIZE',
      arg: 'N',
      help: 'requests that may wait for a slot (more get a 429 with Retry-After)',
      default: 1024,
      parse: nonNegativeInteger,
    },
    {
      key: 'queueTimeoutMs',
      flag: 'queue-timeout-ms',
      env: 'DISAGG_QUEUE_TIMEOUT_MS',
      arg: 'N',
      help: 'how long a request may wait in the queue (then a 429)',
      default: 30_000,
      parse: positiveMs,
    },
    {
      key: 'tenantsFile',
      flag: 'tenants-file',
      env: 'DISAGG_TENANTS_FILE',
      arg: 'FILE',
      help: 'tenants (YAML or JSON: names, API keys, priority, requests and tokens per minute, requests at once; the default tenant; a queue time-to-live per priority band), read again when it changes; a tenant key is an API key too',
      parse: text,
    },
    {
      key: 'tenantHeader',
      flag: 'tenant-header',
      env: 'DISAGG_TENANT_HEADER',
      arg: 'NAME',
      help: 'a header that a trusted gateway in front sets to the tenant of a request',
      parse: headerName,
    },
    {
      key: 'tenantHeaderKeys',
      flag: 'tenant-header-keys',
      env: 'DISAGG_TENANT_HEADER_KEYS',
      arg: 'KEY[,KEY...]',
      help: 'the API keys whose requests may name their tenant in --tenant-header',
      shownDefault: 'any request',
      parse: keyList,
    },
    {
      key: 'redisUrl',
      flag: 'redis-url',
      env: 'DISAGG_REDIS_URL',
      arg: 'URL',
      help: "the tenants' per-minute limits in this Redis (redis://host:port/db), so that every replica of the router enforces one limit",
      shownDefault: 'in this process',
      parse: redisUrl,
    },
    {
      key: 'redisFailure',
      flag: 'redis-failure',
      env: 'DISAGG_REDIS_FAILURE',
      arg: 'open|closed',
      help: "while Redis is unreachable: let requests in without their tenants' limits (open, logged and counted), or refuse limited tenants' requests with a 503 (closed)",
      default: 'open',
      parse: oneOf(['open', 'closed']),
    },
    {
      key: 'maxBodyBytes',
      flag: 'max-body-bytes',
      env: 'DISAGG_MAX_BODY_BYTES',
      arg: 'N',
      help: 'the largest request body accepted',
      default: DEFAULT_MAX_BODY_BYTES,
      parse: positiveInteger,
    },
  ]),
  ...inGroup('Shutdown and connections', [
    {
      key: 'drainDelayMs',
      flag: 'drain-delay-ms',
      env: 'DISAGG_DRAIN_DELAY_MS',
      arg: 'N',
      help: 'on SIGTERM, time /ready fails while requests are still accepted',
      default: 5000,
      parse: nonNegativeMs,
    },
    {
      key: 'gracePeriodMs',
      flag: 'grace-period-ms',
      env: 'DISAGG_GRACE_PERIOD_MS',
      arg: 'N',
      help: 'on SIGTERM, time for requests under way',
      default: 30_000,
      parse: nonNegativeMs,
    },
    {
      key: 'keepAliveTimeoutMs',
      flag: 'keep-alive-timeout-ms',
      env: 'DISAGG_KEEP_ALIVE_TIMEOUT_MS',
      arg: 'N',
      help: 'how long idle client connections stay open',
      default: 72_000,
      parse: positiveMs,
    },
    {
      key: 'headersTimeoutMs',
      flag: 'headers-timeout-ms',
      env: 'DISAGG_HEADERS_TIMEOUT_MS',
      arg: 'N',
      help: "how long a client may take to send a request's headers",
      default: 10_000,
      parse: positiveMs,
    },
    {
      key: 'requestTimeoutMs',
      flag: 'request-timeout-ms',
      env: 'DISAGG_REQUEST_TIMEOUT_MS',
      arg: 'N',
      help: 'how long a client may take to send a whole request',
      default: 120_000,
      parse: positiveMs,
    },
  ]),
  ...inGroup('Keys', [
    {
      key: 'apiKey',
      flag: 'api-key',
      env: 'DISAGG_API_KEY',
      arg: 'KEY',
      help: 'the key clients must send as a bearer token on /v1 routes (none by default)',
      shownDefault: 'none',
      parse: text,
    },
    {
      key: 'adminKey',
      flag: 'admin-key',
      env: 'DISAGG_ADMIN_KEY',
      arg: 'KEY',
      help: 'the bearer token of the admin API (/admin/workers: list, add, drain, remove); off without one',
      shownDefault: 'off',
      parse: text,
    },
    {
      key: 'workerApiKey',
      flag: 'worker-api-key',
      env: 'DISAGG_WORKER_API_KEY',
      arg: 'KEY',
      help: "the bearer token sent to every worker (else the client's own Authorization)",
      shownDefault: 'none',
      parse: text,
    },
  ]),
  ...inGroup('KV events', [
    {
      key: 'kvEvents.port',
      flag: 'kv-events-port',
      env: 'DISAGG_KV_EVENTS_PORT',
      arg: 'N',
      help: "follow each worker's KV cache events at tcp://<worker host>:N (DP rank r at N + r), as vLLM and SGLang publish them with --kv-events-config; what precise-prefix routes on; needs zeromq",
      parse: port,
    },
    {
      key: 'kvEvents.replayPort',
      flag: 'kv-events-replay-port',
      env: 'DISAGG_KV_EVENTS_REPLAY_PORT',
      arg: 'N',
      help: "the workers' KV event replay port (their replay_endpoint): events missed at start or lost on the way are asked for again",
      parse: port,
    },
    {
      key: 'kvEvents.topic',
      flag: 'kv-events-topic',
      env: 'DISAGG_KV_EVENTS_TOPIC',
      arg: 'TOPIC',
      help: 'the KV event topic prefix to follow (the engines\' "topic")',
      shownDefault: 'every topic',
      parse: text,
    },
    {
      key: 'tokenizer.dir',
      flag: 'tokenizer',
      env: 'DISAGG_TOKENIZER',
      arg: 'DIR',
      help: "the model's Hugging Face tokenizer (tokenizer.json and tokenizer_config.json with its chat template): precise-prefix then matches text and chat prompts to the engines' blocks, tokenized off the event loop",
      parse: text,
    },
    {
      key: 'tokenizer.threads',
      flag: 'tokenizer-threads',
      env: 'DISAGG_TOKENIZER_THREADS',
      arg: 'N',
      help: 'worker threads that tokenize',
      default: 1,
      parse: positiveInteger,
    },
  ]),
  ...inGroup('Discovery', [
    ...(['prefill', 'decode'] as const).map((role) =>
      row({
        key: `discovery.${role}Dns` as const,
        flag: `${role}-dns`,
        env: `DISAGG_${role.toUpperCase()}_DNS`,
        arg: 'URL',
        help: `${role} workers from DNS: each address the URL's host resolves to is a worker on its port; re-resolved every --dns-interval-ms, vanished ones drain`,
        parse: dnsUrl,
      }),
    ),
    ...(['prefill', 'decode'] as const).map((role) =>
      row({
        key: `discovery.${role}Selector` as const,
        flag: `${role}-selector`,
        env: `DISAGG_${role.toUpperCase()}_SELECTOR`,
        arg: 'LABELS',
        help: `${role} workers from Kubernetes: the ready pods matching this label selector (app=sglang,role=${role}), watched; needs @kubernetes/client-node`,
        parse: text,
      }),
    ),
    {
      key: 'discovery.namespace',
      flag: 'k8s-namespace',
      env: 'DISAGG_K8S_NAMESPACE',
      arg: 'NAME',
      help: 'the namespace --prefill-selector and --decode-selector watch (every namespace without one: needs a ClusterRole)',
      shownDefault: 'all',
      parse: text,
    },
    {
      key: 'discovery.port',
      flag: 'k8s-port',
      env: 'DISAGG_K8S_PORT',
      arg: 'N',
      help: "the workers' HTTP port on each discovered pod",
      default: 8000,
      parse: port,
    },
    ...(['prefill', 'decode'] as const).map((role) =>
      row({
        key: `discovery.${role}Port` as const,
        flag: `k8s-${role}-port`,
        env: `DISAGG_K8S_${role.toUpperCase()}_PORT`,
        arg: 'N',
        help: `the ${role} pods' HTTP port, when the roles listen on different ports (else --k8s-port)`,
        shownDefault: '--k8s-port',
        parse: port,
      }),
    ),
    {
      key: 'discovery.bootstrapPortAnnotation',
      flag: 'bootstrap-port-annotation',
      env: 'DISAGG_BOOTSTRAP_PORT_ANNOTATION',
      arg: 'KEY',
      help: "SGLang: the pod annotation with a discovered prefill worker's bootstrap port, or one per worker port, comma-separated (else --bootstrap-port)",
      default: 'sglang.ai/bootstrap-port',
      parse: text,
    },
    {
      key: 'discovery.workerPortsAnnotation',
      flag: 'worker-ports-annotation',
      env: 'DISAGG_WORKER_PORTS_ANNOTATION',
      arg: 'KEY',
      help: 'the pod annotation listing the HTTP ports of a pod that serves several workers, comma-separated (else one worker on --k8s-port)',
      default: 'smg.ai/worker-ports',
      parse: text,
    },
    {
      key: 'discovery.dnsIntervalMs',
      flag: 'dns-interval-ms',
      env: 'DISAGG_DNS_INTERVAL_MS',
      arg: 'MS',
      help: 'how often --prefill-dns and --decode-dns are resolved again',
      default: DNS_INTERVAL_MS,
      parse: positiveMs,
    },
  ]),
  ...inGroup('Logs and traces', [
    {
      key: 'logFormat',
      flag: 'log-format',
      env: 'DISAGG_LOG_FORMAT',
      arg: 'json|pretty',
      help: 'JSON lines, or pretty lines for a terminal (needs the optional pino-pretty)',
      default: 'json',
      serveOnly: true,
      parse: oneOf(['json', 'pretty']),
    },
    {
      key: 'logLevel',
      flag: 'log-level',
      env: 'DISAGG_LOG_LEVEL',
      arg: 'LEVEL',
      help: `pino level (${PINO_LEVELS.join(', ')})`,
      default: 'info',
      serveOnly: true,
      parse: oneOf(PINO_LEVELS),
    },
    {
      key: 'tracing.otlpEndpoint',
      flag: 'otlp-endpoint',
      env: 'DISAGG_OTLP_ENDPOINT',
      arg: 'URL',
      help: "export the proxy's spans over OTLP/HTTP to this collector (http://otel-collector:4318; /v1/traces is added unless given); needs the optional OpenTelemetry packages; OTEL_EXPORTER_OTLP_HEADERS is honoured",
      shownDefault: 'off',
      serveOnly: true,
      parse: httpUrl,
    },
    {
      key: 'tracing.sampleRatio',
      flag: 'trace-sample-ratio',
      env: 'DISAGG_TRACE_SAMPLE_RATIO',
      arg: 'R',
      help: "the share of new traces recorded (0 to 1); a request that arrives with a traceparent follows its caller's decision",
      default: 1,
      serveOnly: true,
      parse: unitRatio,
    },
    {
      key: 'tracing.serviceName',
      flag: 'trace-service-name',
      env: 'DISAGG_TRACE_SERVICE_NAME',
      arg: 'NAME',
      help: 'the service.name of the exported spans',
      default: 'disagg',
      serveOnly: true,
      parse: text,
    },
  ]),
] as const;

/**
 * Every setting of the proxy, once. `createProxy` checks its options against it, `disagg
 * serve` reads flags, `DISAGG_*` variables and config files by it, and `--help` is written
 * from it.
 */
export const SETTINGS: readonly Setting[] = SETTING_ROWS;

// The rows and the types they fill are held together by the compiler: a row without its
// option (or its field of `disagg serve`'s config), or an option without its row, does not
// build (an `Expect` below fails).
type RowKey = (typeof SETTING_ROWS)[number]['key'];
type ServeOnlyKey = Extract<(typeof SETTING_ROWS)[number], { serveOnly: true }>['key'];
type Head<K> = K extends `${infer H}.${string}` ? H : K;
type Below<K, G extends string> = K extends `${G}.${infer Rest}` ? Rest : never;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Expect<T extends true> = T;
/** Options of `createProxy` that only a program can give (objects, functions): no row. */
type ProgramOnly =
  | 'logger'
  | 'onEvent'
  | 'dispatcher'
  | 'dnsLookup'
  | 'kubeConfig'
  | 'metricsRegistry'
  | 'tracer'
  | 'engine';
type NestedOf<G extends keyof ProxyOptions & string> = Same<Below<RowKey, G>, keyof NonNullable<ProxyOptions[G]>>;
/** @internal Compile-time only: see above. */
export type SettingRowsMatch = [
  Expect<Same<Head<Exclude<RowKey, ServeOnlyKey>>, Exclude<keyof ProxyOptions, ProgramOnly>>>,
  Expect<Same<Head<RowKey>, keyof ServeConfig>>,
  Expect<NestedOf<'discovery'>>,
  Expect<NestedOf<'routing'>>,
  Expect<NestedOf<'retry'>>,
  Expect<NestedOf<'breaker'>>,
  Expect<NestedOf<'deadlines'>>,
  Expect<NestedOf<'kvEvents'>>,
  Expect<NestedOf<'tokenizer'>>,
  Expect<NestedOf<'migration'>>,
];

/** Where a value came from, for the name an error gives it. */
type Source = { kind: 'option' } | { kind: 'flag' } | { kind: 'env' } | { kind: 'file'; path: string };

/** The name of a setting as the user gave it. */
function nameOf(setting: Setting, source: Source): string {
  switch (source.kind) {
    case 'option':
      return setting.key;
    case 'flag':
      return setting.key.includes('.') ? `--${setting.flag} (${setting.key})` : `--${setting.flag}`;
    case 'env':
      return setting.env;
    case 'file':
      return `${setting.key} in ${source.path}`;
  }
}

/** Parses one setting's value, or throws a ConfigError naming it. */
function parseSetting(setting: Setting, value: unknown, source: Source): unknown {
  try {
    return setting.parse(value);
  } catch (error) {
    if (!(error instanceof Invalid)) throw error;
    throw new ConfigError(`${nameOf(setting, source)} ${error.message}`);
  }
}

/** A value of the nested settings object at `key` (`deadlines.idleMs`). */
function valueAt(values: Record<string, unknown>, key: string): unknown {
  let at: unknown = values;
  for (const part of key.split('.')) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

function setAt(values: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split('.');
  let at = values;
  for (const part of parts.slice(0, -1)) {
    at[part] ??= {};
    at = at[part] as Record<string, unknown>;
  }
  at[parts.at(-1) as string] = value;
}

/**
 * Checks `createProxy`'s options and applies every default.
 *
 * @throws {ConfigError} naming the option that is missing or wrong, or unknown.
 */
export function resolveProxyOptions(options: ProxyOptions): ResolvedProxyOptions {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError(`createProxy expects an options object, got ${describeValue(options)}`);
  }
  const known = [
    ...SETTINGS.filter((setting) => !setting.serveOnly).map((setting) => setting.key),
    'logger',
    'onEvent',
    'dispatcher',
    'dnsLookup',
    'kubeConfig',
    'metricsRegistry',
    'tracer',
    'engine',
  ];
  const problems = new Problems();
  // Policies of your own are programs, not settings: the table reads names only.
  const customPolicies = {
    prefill: problems.check(() => customPolicy<ProxyPrefillWorker>('prefill', options.prefillPolicy)),
    decode: problems.check(() => customPolicy<ProxyDecodeWorker>('decode', options.decodePolicy)),
  };
  const engine = problems.check(() => engineHook(options.engine));
  rejectUnknown(
    options as unknown as Record<string, unknown>,
    known,
    (key) => `option ${key} of createProxy`,
    problems,
  );
  const source: Source = { kind: 'option' };
  const values = resolve((setting) => {
    if (setting.serveOnly) return undefined;
    const value = valueAt(options as unknown as Record<string, unknown>, setting.key);
    // A policy that is no name was checked above (a policy of your own, or its problem).
    if ((setting.key === 'prefillPolicy' || setting.key === 'decodePolicy') && typeof value !== 'string') {
      return undefined;
    }
    return value === undefined ? undefined : { value, source };
  }, problems);
  if (options.tracer !== undefined && typeof (options.tracer as { startSpan?: unknown })?.startSpan !== 'function') {
    throw new ConfigError(`tracer must be an OpenTelemetry tracer, got ${describeValue(options.tracer)}`);
  }
  const registry = options.metricsRegistry as { registerMetric?: unknown } | undefined;
  if (registry !== undefined && typeof registry?.registerMetric !== 'function') {
    throw new ConfigError(`metricsRegistry must be a prom-client Registry, got ${describeValue(registry)}`);
  }
  if (options.dnsLookup !== undefined && typeof options.dnsLookup !== 'function') {
    throw new ConfigError(`dnsLookup must be a function, got ${describeValue(options.dnsLookup)}`);
  }
  for (const key of ['logger', 'onEvent'] as const) {
    const value = options[key];
    if (value !== undefined && typeof value !== (key === 'onEvent' ? 'function' : 'object')) {
      throw new ConfigError(
        `${key} must be ${key === 'onEvent' ? 'a function' : 'a pino logger'}, got ${describeValue(value)}`,
      );
    }
  }
  const decodePolicy = (values.decodePolicy ?? values.selection) as PolicyName;
  if (
    (values.routing as { aggregateCachedRatio: number }).aggregateCachedRatio > 0 &&
    customPolicies.decode === undefined &&
    decodePolicy !== 'cache-aware' &&
    decodePolicy !== 'precise-prefix'
  ) {
    throw new ConfigError(
      `routing.aggregateCachedRatio (--aggregate-cached-ratio) needs decodePolicy 'cache-aware' or 'precise-prefix' (--decode-policy): only then does the router know what decode workers hold; decodePolicy is '${decodePolicy}'`,
    );
  }
  const prefillPolicy = (values.prefillPolicy ?? values.selection) as PolicyName;
  const kv = kvEventsOf(values);
  const ownEndpoints = [
    ...((values.prefill as KvEventEndpoints[]) ?? []),
    ...((values.decode as KvEventEndpoints[]) ?? []),
  ].some((worker) => worker.kvEvents !== undefined);
  for (const [role, policy] of [
    ['prefill', prefillPolicy],
    ['decode', decodePolicy],
  ] as const) {
    if (customPolicies[role] !== undefined) continue;
    if (policy === 'precise-prefix' && kv.port === undefined && !ownEndpoints) {
      throw new ConfigError(
        `${role}Policy 'precise-prefix' routes on the engines' KV cache events: set kvEvents.port (--kv-events-port, the port of the workers' --kv-events-config endpoint) or give the workers kvEvents endpoints`,
      );
    }
  }
  return {
    ...(withWorkers(values) as Omit<ResolvedProxyOptions, 'logger' | 'onEvent' | 'dispatcher' | 'cleanupBudgetMs'>),
    deadlines: activeDeadlines(values.deadlines as Deadlines | undefined),
    prefillPolicy,
    decodePolicy,
    customPolicies,
    engine,
    cleanupBudgetMs: (values.cleanupBudgetMs as number | undefined) ?? DEFAULT_CLEANUP_BUDGET_MS,
    apiKey: values.apiKey as string | undefined,
    adminKey: values.adminKey as string | undefined,
    tenantsFile: values.tenantsFile as string | undefined,
    tenantHeader: values.tenantHeader as string | undefined,
    tenantHeaderKeys: values.tenantHeaderKeys as string[] | undefined,
    redisUrl: values.redisUrl as string | undefined,
    metricsPort: values.metricsPort as number | undefined,
    discovery: discoveryOf(values),
    kvEvents: kv,
    tokenizer: tokenizerOf(values),
    dnsLookup: options.dnsLookup,
    kubeConfig: options.kubeConfig,
    metricsRegistry: options.metricsRegistry,
    tracer: options.tracer,
    workerApiKey: values.workerApiKey as string | undefined,
    logger: options.logger,
    onEvent: options.onEvent,
    dispatcher: options.dispatcher,
  };
}

/** Options of `createHandler`: the proxy's, and where the routes are mounted. */
export interface HandlerOptions extends ProxyOptions {
  /**
   * The path the routes are mounted under (`/llm` serves `/llm/v1/chat/completions`); none by
   * default. It must start with `/` and not end with one.
   */
  basePath?: string | undefined;
}

/**
 * `createHandler`'s options checked: the proxy's (as {@link resolveProxyOptions}) and the
 * base path.
 *
 * @throws {ConfigError} naming what is wrong.
 */
export function resolveHandlerOptions(options: HandlerOptions): { proxy: ResolvedProxyOptions; basePath: string } {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError(`createHandler expects an options object, got ${describeValue(options)}`);
  }
  const { basePath = '', ...proxy } = options;
  if (typeof basePath !== 'string' || (basePath !== '' && (!basePath.startsWith('/') || basePath.endsWith('/')))) {
    throw new ConfigError(
      `basePath must be a path that starts with / and does not end with one, such as '/llm', got ${describeValue(basePath)}`,
    );
  }
  return { proxy: resolveProxyOptions(proxy), basePath };
}

/**
 * Every setting from `read` (the first source that gives it), parsed, with defaults; a
 * required one that no source gives is refused with its command-line name.
 */
function resolve(
  read: (setting: Setting) => { value: unknown; source: Source } | undefined,
  problems: Problems = new Problems(),
): Record<string, unknown> {
  const values: Record<string, unknown> = { deadlines: {} };
  const refused = new Set<string>();
  for (const setting of SETTINGS) {
    const given = read(setting);
    let value: unknown;
    const before = problems.count;
    if (given !== undefined) value = problems.check(() => parseSetting(setting, given.value, given.source));
    else if (setting.default !== undefined) value = setting.default;
    else if (setting.key === 'connector')
      value = problems.check(() => parseSetting(setting, undefined, { kind: 'flag' }));
    if (problems.count > before) refused.add(setting.key);
    if (value !== undefined) setAt(values, setting.key, value);
  }
  // A worker's name is one worker, across both pools (the admin API and answers name it).
  const named = (['prefill', 'decode'] as const).flatMap((role) =>
    ((values[role] ?? []) as Array<{ name?: string }>).flatMap((worker) =>
      worker.name === undefined ? [] : [worker.name],
    ),
  );
  const twice = named.find((name, i) => named.indexOf(name) !== i);
  if (twice !== undefined) {
    problems.add(`Two workers are named ${JSON.stringify(twice)}: give each its own name (or none)`);
  }
  // A role needs a worker at start unless discovery will find them.
  for (const role of ['prefill', 'decode'] as const) {
    const list = (values[role] ?? []) as unknown[];
    values[role] = list;
    const found = valueAt(values, `discovery.${role}Dns`) ?? valueAt(values, `discovery.${role}Selector`);
    // A list that was refused has said so already.
    if (list.length === 0 && found === undefined && !refused.has(role)) {
      problems.add(
        `--${role} is required: at least one worker URL (or --${role}-dns or --${role}-selector to find them)`,
      );
    }
  }
  problems.throwIfAny();
  return values;
}

/** The worker lists with SGLang's bootstrap port given to prefill workers that name none. */
function withWorkers(values: Record<string, unknown>): Record<string, unknown> {
  if (!engineOf(values.connector as EngineName).prefillBootstrap) return values;
  return {
    ...values,
    prefill: (values.prefill as ProxyPrefillWorker[]).map((worker) =>
      withBootstrap(worker, values.bootstrapPort as number),
    ),
  };
}

function withBootstrap(worker: ProxyPrefillWorker, bootstrapPort: number): ProxyPrefillWorker {
  return { ...worker, bootstrapPort: worker.bootstrapPort ?? bootstrapPort };
}

/**
 * A worker joining at run time (the admin API, discovery), checked as `--prefill`/`--decode`
 * entries are: a URL or an object with the same fields; SGLang prefill workers get the
 * proxy's bootstrap port when they name none.
 *
 * @throws {ConfigError} saying what is wrong with it.
 */
export function checkWorker(
  role: 'prefill' | 'decode',
  value: unknown,
  options: Pick<ResolvedProxyOptions, 'connector' | 'bootstrapPort'>,
): ProxyPrefillWorker | ProxyDecodeWorker {
  const setting = SETTINGS.find((candidate) => candidate.key === role) as Setting;
  if (value === undefined || value === '' || (Array.isArray(value) && value.length !== 1)) {
    throw new ConfigError(`A ${role} worker is a URL or an object with a url, got ${describeValue(value)}`);
  }
  const [worker] = parseSetting(setting, Array.isArray(value) ? value : [value], {
    kind: 'option',
  }) as ProxyPrefillWorker[];
  if (worker === undefined)
    throw new ConfigError(`A ${role} worker is a URL or an object with a url, got ${describeValue(value)}`);
  return role === 'prefill' && engineOf(options.connector).prefillBootstrap
    ? withBootstrap(worker, options.bootstrapPort)
    : worker;
}

/** The help text of `disagg serve`, written from {@link SETTINGS}. */
export function serveUsage(): string {
  const indent = ' '.repeat(36);
  const lines = SETTINGS.map((setting, i) => {
    const left = `  --${setting.flag}${setting.arg === '' ? '' : ` ${setting.arg}`}`;
    const shown = setting.shownDefault ?? (setting.default === undefined ? undefined : String(setting.default));
    const help = `${setting.help}${shown === undefined ? '' : ` (default ${shown})`}`;
    const names = `${indent}${setting.env}; ${setting.key} in a file`;
    // A heading where a concern begins: the settings read as a dozen groups, not one list.
    const heading = setting.group !== SETTINGS[i - 1]?.group ? `${i === 0 ? '' : '\n'}${setting.group}:\n` : '';
    return `${heading}${left.length < indent.length ? left.padEnd(indent.length) : `${left}\n${indent}`}${help}\n${names}`;
  });
  return `Usage: disagg serve --connector ${ENGINE_NAMES.join('|')} --prefill URL[,URL...] --decode URL[,URL...] [options]

An OpenAI-compatible proxy in front of prefill and decode workers.

Every setting is also an environment variable (named after it) and a key of a config file
(--config FILE or DISAGG_CONFIG, JSON or YAML, keys in camelCase as in createProxy's
options, deadlines nested: deadlines: { idleMs: 10000 }). Flags win over the environment,
which wins over the file. Unknown keys and variables are refused.

${lines.join('\n')}

Other:
  --config FILE                     a JSON or YAML file of settings; DISAGG_CONFIG
  --help                            this text
`;
}

/**
 * Refuses a key no setting has, at the top or inside a group (`routing`, `retry`, `deadlines`,
 * ...), and a group that is not an object: a misspelt or misplaced setting would otherwise be
 * ignored without a word and its default used. `what` names a key where it was given
 * (`setting "x" in disagg.yaml`).
 */
function rejectUnknown(
  values: Record<string, unknown>,
  known: readonly string[],
  what: (key: string) => string,
  problems: Problems,
): void {
  const tops = new Set(known.map((key) => key.split('.')[0] as string));
  const groups = new Set(known.filter((key) => key.includes('.')).map((key) => key.split('.')[0] as string));
  for (const [key, value] of Object.entries(values)) {
    if (!tops.has(key)) {
      // A group's own name is a candidate too: `routnig` is most likely `routing`.
      problems.add(withHint(`Unknown ${what(JSON.stringify(key))}`, key, [...known, ...groups]));
      continue;
    }
    if (!groups.has(key) || value === undefined) continue;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      const kind = key === 'deadlines' ? 'budgets' : 'settings';
      problems.add(`The ${what(JSON.stringify(key))}: ${key} must be an object of ${kind}`);
      continue;
    }
    for (const inner of Object.keys(value)) {
      const name = `${key}.${inner}`;
      if (!known.includes(name)) problems.add(withHint(`Unknown ${what(JSON.stringify(name))}`, name, known));
    }
  }
}

function withHint(message: string, name: string, known: readonly string[]): string {
  const hint = closest(name, known);
  return hint === undefined ? message : `${message}; did you mean ${JSON.stringify(hint)}?`;
}

// Parsers: each takes what a source gave (strings from flags and the environment) and
// returns the value, or throws an Invalid that says what was expected.

function oneOf<T extends string>(choices: readonly T[]): (value: unknown) => T {
  return (value) => {
    if (typeof value === 'string' && (choices as readonly string[]).includes(value)) return value as T;
    const expected =
      choices.length === 2 ? `'${choices[0]}' or '${choices[1]}'` : `one of ${choices.map((c) => `'${c}'`).join(', ')}`;
    // A typo of a choice gets the choice it most likely meant.
    const near = typeof value === 'string' ? closest(value, choices) : undefined;
    throw new Invalid(
      `must be ${expected}, got ${describeValue(value)}${near === undefined ? '' : ` (did you mean '${near}'?)`}`,
    );
  };
}

function unitRatio(value: unknown): number {
  const ratio = number(value);
  if (!(ratio >= 0 && ratio <= 1)) throw new Invalid(`must be a number from 0 to 1, got ${describeValue(value)}`);
  return ratio;
}

function atLeastOne(value: unknown): number {
  const ratio = number(value);
  if (!(Number.isFinite(ratio) && ratio >= 1))
    throw new Invalid(`must be a number of 1 or more, got ${describeValue(value)}`);
  return ratio;
}

function headerName(value: unknown): string {
  if (typeof value !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value)) {
    throw new Invalid(`must be an HTTP header name, got ${describeValue(value)}`);
  }
  return value.toLowerCase();
}

function number(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && value.trim() !== '') return Number(value);
  return Number.NaN;
}

function positiveNumber(value: unknown): number {
  const n = number(value);
  if (!(n > 0)) throw new Invalid(`takes a number above 0, got ${describeValue(value)}`);
  return n;
}

function positiveMs(value: unknown): number {
  const ms = number(value);
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new Invalid(`must be a positive number of milliseconds, got ${describeValue(value)}`);
  }
  return ms;
}

function nonNegativeMs(value: unknown): number {
  const ms = number(value);
  if (!Number.isFinite(ms) || ms < 0) {
    throw new Invalid(`must be a non-negative number of milliseconds, got ${describeValue(value)}`);
  }
  return ms;
}

function positiveInteger(value: unknown): number {
  const n = number(value);
  if (!Number.isSafeInteger(n) || n <= 0)
    throw new Invalid(`must be a positive whole number, got ${describeValue(value)}`);
  return n;
}

function switchValue(value: unknown): boolean {
  if (value === true || value === 'true' || value === '1') return true;
  if (value === false || value === 'false' || value === '0') return false;
  throw new Invalid(`must be true or false, got ${describeValue(value)}`);
}

function nonNegativeInteger(value: unknown): number {
  const n = number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new Invalid(`must be a whole number of 0 or more, got ${describeValue(value)}`);
  return n;
}

function port(value: unknown): number {
  const n = number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    throw new Invalid(`must be a non-negative number (a port, 0-65535), got ${describeValue(value)}`);
  }
  return n;
}

/** An http(s) URL whose host is a name to resolve (an address would never change). */
function dnsUrl(value: unknown): string {
  const given = text(value);
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw new Invalid(
      `must be an http(s) URL such as http://prefill-headless.llm.svc:8000, got ${describeValue(value)}`,
    );
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new Invalid(
      `must be an http(s) URL such as http://prefill-headless.llm.svc:8000, got ${describeValue(value)}`,
    );
  }
  if (/^[\d.]+$/.test(url.hostname) || url.hostname.startsWith('[')) {
    throw new Invalid(
      `names an address (${url.hostname}), not a host name to resolve: list it with the worker URLs instead`,
    );
  }
  return given;
}

/** An http(s) URL, such as a collector's. */
function httpUrl(value: unknown): string {
  const given = text(value);
  let url: URL | undefined;
  try {
    url = new URL(given);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new Invalid(`must be an http(s) URL such as http://otel-collector:4318, got ${describeValue(value)}`);
  }
  return given;
}

function redisUrl(value: unknown): string {
  const url = text(value);
  if (!/^rediss?:\/\/[^/]/.test(url))
    throw new Invalid(`must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`);
  return url;
}

/** A comma-separated list of keys (or a list of them, from a file). */
function keyList(value: unknown): string[] {
  const items = Array.isArray(value) ? value : String(value).split(',');
  const keys = items.map((item) => (typeof item === 'string' ? item.trim() : '')).filter((item) => item !== '');
  if (keys.length === 0) throw new Invalid('must name at least one key');
  return keys;
}

function text(value: unknown): string {
  if (typeof value !== 'string' || value === '')
    throw new Invalid(`must be a non-empty string, got ${describeValue(value)}`);
  return value;
}

/** Workers from repeated flags, a comma-separated string, or a list of URLs or objects. */
function workers(value: unknown, kinds: Readonly<Record<string, WorkerFieldKind>>): Array<{ url: string }> {
  const fields = Object.keys(kinds);
  const list: unknown[] = Array.isArray(value)
    ? value.flatMap((entry) => (typeof entry === 'string' ? entry.split(',') : [entry]))
    : typeof value === 'string'
      ? value.split(',')
      : [];
  const result = list
    .map((entry) => (typeof entry === 'string' ? entry.trim() : entry))
    .filter((entry) => entry !== '')
    .map((entry) => (typeof entry === 'string' ? { url: entry } : entry));
  for (const entry of result) {
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      throw new Invalid(`takes URLs or objects with a url, got ${describeValue(entry)}`);
    }
    for (const [field, fieldValue] of Object.entries(entry)) {
      if (!fields.includes(field)) {
        throw new Invalid(withHint(`has an unknown worker field ${JSON.stringify(field)}`, field, fields));
      }
      if (kinds[field] === 'integer' && !Number.isInteger(fieldValue)) {
        throw new Invalid(`has a worker whose ${field} is not a whole number: ${describeValue(fieldValue)}`);
      }
      // The url has its own check below (an http(s) URL), which says more.
      if (kinds[field] === 'string' && field !== 'url' && (typeof fieldValue !== 'string' || fieldValue === '')) {
        throw new Invalid(`has a worker whose ${field} is not a non-empty string: ${describeValue(fieldValue)}`);
      }
    }
    const url = (entry as { url?: unknown }).url;
    if (typeof url !== 'string' || !/^https?:\/\/[^/]+/.test(url)) {
      throw new Invalid(`has ${describeValue(url ?? entry)}, which is not an http(s) URL such as http://10.0.0.2:8000`);
    }
    // The proxy calls the worker's own routes under its URL (/v1/completions, /health): a URL
    // that already ends in /v1 would be called at /v1/v1/completions.
    if (/\/v1\/*$/.test(url)) {
      throw new Invalid(
        `has ${describeValue(url)}, which ends in /v1: give the worker's base URL (${url.replace(/\/v1\/*$/, '')}); the proxy adds /v1/completions, /health and the rest itself`,
      );
    }
  }
  const names = result.map((entry) => (entry as { name?: unknown }).name).filter((name) => name !== undefined);
  const twice = names.find((name, i) => names.indexOf(name) !== i);
  if (twice !== undefined) throw new Invalid(`names two workers ${describeValue(twice)}: a name is one worker`);
  return result as Array<{ url: string }>;
}

/** Prefill workers whose data-parallel size is given must say their rank too. */
function prefillWorkers(list: Array<{ url: string }>): Array<{ url: string }> {
  for (const worker of list as ProxyPrefillWorker[]) {
    if (worker.dpSize !== undefined && worker.dpRank === undefined) {
      throw new Invalid(
        `has a worker with dpSize ${worker.dpSize} but no dpRank (${worker.url}): rooms are routed to the rank they are congruent to, so give each rank its own entry`,
      );
    }
  }
  return list;
}

/** The sources `disagg serve` reads, in order of precedence. */
export interface ServeSources {
  flags: Record<string, unknown>;
  env: NodeJS.ProcessEnv;
  file: { path: string; values: Record<string, unknown> } | undefined;
}

/**
 * `disagg serve`'s configuration from its sources: flags win over `DISAGG_*` variables, which
 * win over the config file. Unknown variables and file keys are refused, with the closest
 * known name as a hint.
 *
 * @throws {ConfigError} naming the setting as it was given.
 */
export function resolveServeConfig({ flags, env, file }: ServeSources): ServeConfig {
  const problems = new Problems();
  checkEnvironment(env, problems);
  if (file !== undefined) {
    rejectUnknown(
      file.values,
      SETTINGS.map((setting) => setting.key),
      (key) => `setting ${key} in ${file.path}`,
      problems,
    );
  }
  const values = resolve((setting) => {
    const flag = flags[setting.flag];
    if (flag !== undefined) return { value: flag, source: { kind: 'flag' } };
    const variable = env[setting.env];
    if (variable !== undefined && variable !== '' && !isServiceLink(setting.env, variable)) {
      return { value: variable, source: { kind: 'env' } };
    }
    const value = file === undefined ? undefined : valueAt(file.values, setting.key);
    return value === undefined ? undefined : { value, source: { kind: 'file', path: (file as { path: string }).path } };
  }, problems);
  // Every row's value as resolved, under its key: a row added to SETTINGS reaches the CLI as it
  // reaches createProxy (a field-by-field copy here once parsed a new flag and dropped it).
  const resolved = withWorkers(values);
  return {
    ...resolved,
    discovery: discoveryOf(resolved),
    kvEvents: kvEventsOf(resolved),
    tokenizer: tokenizerOf(resolved),
  } as unknown as ServeConfig;
}

function tokenizerOf(values: Record<string, unknown>): ResolvedProxyOptions['tokenizer'] {
  const given = (values.tokenizer ?? {}) as Partial<ResolvedProxyOptions['tokenizer']>;
  return { dir: given.dir, threads: given.threads ?? 1 };
}

function kvEventsOf(values: Record<string, unknown>): ResolvedProxyOptions['kvEvents'] {
  const kv = (values.kvEvents ?? {}) as Partial<ResolvedProxyOptions['kvEvents']>;
  return { port: kv.port, replayPort: kv.replayPort, topic: kv.topic };
}

function discoveryOf(values: Record<string, unknown>): ResolvedProxyOptions['discovery'] {
  const discovery = (values.discovery ?? {}) as Partial<ResolvedProxyOptions['discovery']>;
  return {
    prefillDns: discovery.prefillDns,
    decodeDns: discovery.decodeDns,
    dnsIntervalMs: discovery.dnsIntervalMs as number,
    prefillSelector: discovery.prefillSelector,
    decodeSelector: discovery.decodeSelector,
    namespace: discovery.namespace,
    port: discovery.port as number,
    prefillPort: discovery.prefillPort,
    decodePort: discovery.decodePort,
    bootstrapPortAnnotation: discovery.bootstrapPortAnnotation as string,
    workerPortsAnnotation: discovery.workerPortsAnnotation as string,
  };
}

/**
 * Kubernetes gives every pod variables for each Service of its namespace: a Service named
 * `disagg` yields `DISAGG_SERVICE_HOST`, `DISAGG_PORT=tcp://...`, `DISAGG_PORT_8000_TCP...`.
 * Those are not settings; the rest of `DISAGG_*` must be.
 */
function isServiceLink(name: string, value: string): boolean {
  return (
    name.startsWith('DISAGG_SERVICE_') ||
    /^DISAGG_PORT_\d+_(TCP|UDP|SCTP)/.test(name) ||
    (name === 'DISAGG_PORT' && /^(tcp|udp|sctp):\/\//.test(value))
  );
}

function checkEnvironment(env: NodeJS.ProcessEnv, problems: Problems): void {
  const known = [...SETTINGS.map((setting) => setting.env), 'DISAGG_CONFIG'];
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('DISAGG_') || known.includes(name) || isServiceLink(name, value ?? '')) continue;
    problems.add(withHint(`Unknown environment variable ${name}`, name, known));
  }
}
