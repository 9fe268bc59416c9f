// The options of `createProxy` and `createHandler` as a program writes them: hand-written for
// their documentation (what an editor shows); rows.ts holds them and the rows together.
import type { Registry } from 'prom-client';
import type { Dispatcher } from 'undici';
import type { Lookup } from '../../discovery/dns-discovery.js';
import type { EngineName } from '../../engines/registry.js';
import type { Deadlines } from '../../flow/deadlines.js';
import type { FlowEvent } from '../../flow/events.js';
import type { DeciderSetting } from '../../routing/decider-plugins.js';
import type { FilterSetting } from '../../routing/filter-plugins.js';
import type { PickerSetting } from '../../routing/picker-plugins.js';
import type { ScorerSetting } from '../../routing/plugins.js';
import type { Logger } from '../../runtime/logger.js';
import type { ProxyPoolOption } from './pool-entries.js';
import type { ProxyRewriteOption } from './rewrite-entries.js';
import type { EngineHook, PolicyOption, TracerLike } from './types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './worker-entries.js';

/**
 * Options of `createProxy`. Every setting is described, with its default, its command-line
 * flag and its environment variable, in one table (`SETTINGS` in `settings/rows.ts`), which `createProxy`,
 * `disagg serve` and its `--help` all read, so they cannot disagree.
 */
export interface ProxyOptions {
  /**
   * The engines behind: vLLM with NIXL (sequential), SGLang with its bootstrap (concurrent), or
   * TensorRT-LLM context first (sequential).
   */
  connector: EngineName;
  /**
   * The prefill workers at start; may be empty when `discovery` finds them. With `pools`, the
   * top-level workers (if any) are the pool of every model no pool names.
   */
  prefill?: readonly ProxyPrefillWorker[] | undefined;
  /** The decode workers at start; may be empty when `discovery` finds them, or with `pools`. */
  decode?: readonly ProxyDecodeWorker[] | undefined;
  /**
   * More pools, one per model: each with the model names its clients send, its own workers,
   * and its engine and policies where they differ from the top level's. A request goes to the
   * pool of its `model`; a model no pool names to the top-level workers, or, without them, is a
   * 404 naming the models served. None by default.
   */
  pools?: readonly ProxyPoolOption[] | undefined;
  /**
   * Models served as weighted targets (a canary beside the stable version): a request for a
   * rule's `model` is sent as one of its targets (the body's `model` rewritten), in proportion
   * to their weights, the same session always to the same target; counted in
   * `disagg_model_rewrites_total`. None by default.
   */
  rewrites?: readonly ProxyRewriteOption[] | undefined;
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
        /**
         * Kubernetes: the decode pods are those of this Gateway API `InferencePool`
         * (`inference.networking.k8s.io/v1`, in `namespace`, `default` without one): its label
         * selector, and its target ports as each pod's workers (several: its data-parallel
         * ranks). Read when discovery starts (again after a failure); instead of `decodeSelector`.
         */
        inferencePool?: string | undefined;
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
  /**
   * How a worker is chosen for each leg where no policy is named for it: `least-in-flight` or
   * `round-robin`. Without it, `scored` with the SLO-aware scorers (`routing.scorers`: prefix,
   * slo-headroom, load; `routing.filters`: slo-feasible).
   */
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
   * making one: see {@link PolicyOption}). `selection` by default, else `scored`.
   */
  prefillPolicy?: PolicyOption<ProxyPrefillWorker> | undefined;
  /** How the decode worker of a request is chosen, as `prefillPolicy`; `selection` by default, else `scored`. */
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
        /**
         * The request header a client that knows its prompt's prefix names it with (a
         * conversation's id, a shared system prompt's name): where a request carries it,
         * cache-aware and consistent-hash routing read its value as the prompt, not the body;
         * `x-prefix-key` by default.
         */
        prefixKeyHeader?: string | undefined;
        /** precise-prefix: the weight of KV prefix overlap against load (whose weight is 1); 2 by default. */
        prefixWeight?: number | undefined;
        /**
         * precise-prefix: how long a prompt just routed counts as held by its worker before the
         * engine's event confirms it (a speculative entry), in ms; 0 for none; 2,000 by default.
         */
        speculativeTtlMs?: number | undefined;
        /**
         * The `scored` policy's scorers and their weights, each with its own parameters
         * (`[{ name: 'kv-usage', weight: 2 }, { name: 'load' }]`); `load` alone by default.
         */
        scorers?: readonly ScorerSetting[] | undefined;
        /**
         * The `scored` policy's filters, applied in order before scoring, each with its own
         * parameters (`[{ name: 'low-kv-usage', params: { maxKvUsage: 0.9 } }]`); none by default.
         */
        filters?: readonly FilterSetting[] | undefined;
        /** How the `scored` policy chooses from the totals (`{ name: 'weighted-random' }`); `max-score` by default. */
        picker?: PickerSetting | undefined;
        /**
         * The P/D deciders, asked in order, the first reason serving a request on decode alone
         * (`[{ name: 'short-prompt', params: { belowChars: 512 } }]`, or one of your own from
         * `registerDecider`); `aggregateBelowChars` and `aggregateCachedRatio` add theirs. None by default.
         */
        deciders?: readonly DeciderSetting[] | undefined;
        /**
         * Read each worker's own load (requests waiting and running, KV cache usage) from its
         * `/metrics` this often, in ms, for the policies and scorers that read it
         * (precise-prefix; the queue and kv-usage scorers); 0 (off) by default.
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
   * A worker's own `kvEvents` and `kvEventsReplay` endpoints win. Off by default. A worker
   * whose events do not come within `silenceMs` of a prompt it computed is blind: its view is
   * untrusted (routed by load), warned of and counted; 30,000 by default, 0: never.
   */
  kvEvents?:
    | {
        port?: number | undefined;
        replayPort?: number | undefined;
        topic?: string | undefined;
        silenceMs?: number | undefined;
      }
    | undefined;
  /**
   * The router's own tokenizer, for `precise-prefix` on text and chat prompts (the engines'
   * blocks are tokens): `dir` is a directory holding the model's Hugging Face `tokenizer.json`
   * and `tokenizer_config.json` (its chat template), or a model id (`org/name`,
   * `org/name@revision`) fetched once into the Hugging Face cache before the proxy listens (see
   * `findTokenizer`); tokenized in `threads` worker threads (1). Without one, only token-id
   * prompts are matched to blocks.
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
   * `disagg epp` (and `startEndpointPicker`): the Envoy ext_proc streams open at once; past
   * it a new stream is refused at once with gRPC `RESOURCE_EXHAUSTED`, the streams open
   * untouched. By default twice `maxConcurrentRequests` plus `queueSize` (4,096): room for
   * every request admission lets in or queues, so that a busy gateway meets admission's 429
   * first. A proxy does not read it.
   */
  maxExtProcStreams?: number | undefined;
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
   * Preemption by priority: when every slot is busy, a request of higher priority (its
   * tenant's) takes the slot of the lowest-priority request under way, the newest of those,
   * which ends at once with a 503 (`Retry-After`, `x-disagg-preempted: true`), or with its
   * API's error event once its stream has begun; both its legs end and its KV is freed, as for
   * a client that leaves. Equal priorities never preempt. False by default. The endpoint
   * picker refuses it: the requests it admits run between the gateway and the pods.
   */
  preempt?: boolean | undefined;
  /**
   * Tenants: a YAML or JSON file of `tenants: [{ name, keys, priority, requestsPerMinute,
   * tokensPerMinute, maxConcurrent, slo: { ttftMs, itlMs } }]`, `default:` (the limits of
   * requests that name no tenant) and `bands: [{ priority, queueTimeoutMs }]`, read again when
   * it changes. A request is its key's tenant (a tenant's key is an API key too), or the tenant
   * a trusted gateway names in `tenantHeader` (from the keys in `tenantHeaderKeys`, or any
   * request), else the default tenant. A tenant's `slo` is its requests' service levels where
   * their headers name none (`x-disagg-slo-ttft-ms`, `x-disagg-slo-itl-ms`, or llm-d's
   * `x-slo-ttft-ms`, `x-slo-tpot-ms`); a tenant of negative priority is sheddable: its request
   * that no worker is predicted to meet them is refused (429). None by default: one tenant
   * without limits.
   *
   * @example
   * // tenants.yaml:
   * // tenants:
   * //   - { name: chat, keys: [sk-chat-0001], priority: 10, slo: { ttftMs: 2000, itlMs: 100 } }
   * //   - { name: batch, keys: [sk-batch-001], priority: -1, tokensPerMinute: 200000 }
   * // default: { requestsPerMinute: 60, slo: { ttftMs: 5000 } }
   * createProxy({ connector: 'vllm', prefill: [{ url: 'http://p:8100' }], decode: [{ url: 'http://d:8200' }], tenantsFile: 'tenants.yaml' });
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
   * With `redisUrl`: how often each replica writes its requests in flight per worker to Redis
   * and reads the other replicas' (`SharedInFlight`), so that their policies balance the whole
   * fleet's load; 250 ms by default. Another replica's request shows within two of these; a
   * replica silent for eight ages out.
   */
  replicaSyncMs?: number | undefined;
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
   * The decode-pod sidecar of the Gateway API's P/D protocol (`disagg sidecar`): with
   * `prefillFrom: 'header'` a request's prefill worker is the one its endpoint picker named in
   * `x-prefiller-host-port` (the first of a list; the others are retried), which must be a
   * prefill worker given or discovered, or in one of `prefillAllow`'s networks (CIDRs): any
   * other is a 403 before any call. A request without the header is served by the decode
   * worker alone. `prefillMaxRetries` (0 by default, as llm-d's sidecar) retries a request
   * whose prefill failed before its first byte. `'pool'`, the default, chooses from the pools.
   */
  sidecar?:
    | {
        prefillFrom?: 'pool' | 'header' | undefined;
        prefillAllow?: string[] | undefined;
        prefillMaxRetries?: number | undefined;
      }
    | undefined;
  /**
   * Stored Responses and Conversations (`previous_response_id`, `conversation`, `GET
   * /v1/responses/{id}`, background responses): kept in `store` (`'memory'` by default,
   * bounded by `memoryBytes` (256 MiB) in all; a `redis://` URL replicas share; a
   * `postgres://` URL, durable), each object living `ttlHours` (720) after its last write, each
   * tenant (or API key) holding at most `maxObjects` (100,000) and `maxBytes` (1 GiB).
   */
  responses?:
    | {
        store?: string | undefined;
        ttlHours?: number | undefined;
        maxObjects?: number | undefined;
        maxBytes?: number | undefined;
        memoryBytes?: number | undefined;
      }
    | undefined;
  /**
   * What makes a stage of a pool saturated, for `disagg_stage_saturation` (1.0 its set point,
   * what an autoscaler holds and an alert compares): a worker's engine queue against
   * `queueDepth` (5) and KV cache against `kvUsage` (0.8), read where `saturationSource` is
   * `'auto'` (the default) and a routing policy has the engines' load scraped, or `'engine'`
   * (scraped for this too); else its requests in flight against `prefillRequests` (8) or
   * `decodeRequests` (256). `'in-flight'` never reads the engines.
   */
  scaling?:
    | {
        saturationSource?: 'auto' | 'engine' | 'in-flight' | undefined;
        queueDepth?: number | undefined;
        kvUsage?: number | undefined;
        prefillRequests?: number | undefined;
        decodeRequests?: number | undefined;
      }
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

/** Options of `createHandler`: the proxy's, and where the routes are mounted. */
export interface HandlerOptions extends ProxyOptions {
  /**
   * The path the routes are mounted under (`/llm` serves `/llm/v1/chat/completions`); none by
   * default. It must start with `/` and not end with one.
   */
  basePath?: string | undefined;
}
