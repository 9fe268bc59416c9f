import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import type { Dispatcher } from 'undici';
import type { AgentState } from '../agent-state/agent-state.js';
import type { Endpoint } from '../endpoints/endpoint.js';
import type { Engine } from '../flow/disaggregate.js';
import { httpEngine } from '../http/http-engine.js';
import { answerJson, pathOf, RequestError } from '../http/node-server.js';
import { Agent } from '../http/undici-parts.js';
import { RedisSessionBindings } from '../replicas/redis-session-bindings.js';
import { SharedInFlight } from '../replicas/shared-in-flight.js';
import { mergeConsumption } from '../routing/services.js';
import type { LatencyPredictor } from '../routing/slo/latency-predictor.js';
import type { WorkerPool } from '../routing/worker-pool.js';
import { libraryLogger } from '../runtime/library-logger.js';
import type { Logger } from '../runtime/logger.js';
import { repeatedLogOf } from '../runtime/repeated-log.js';
import { MinuteWindows, type TenantLimits } from '../tenancy/rate-window.js';
import { RedisWindows } from '../tenancy/redis-windows.js';
import { TenantDirectory } from '../tenancy/tenants.js';
import type { TokenizerPool } from '../tokenize/tokenizer-pool.js';
import { redactAddresses } from '../util/url.js';
import { agentStateOf } from './agents/agent-state-of.js';
import { type DiscoverySource, discoverySources } from './fleet/discovery-sources.js';
import { type EngineLoadScraper, engineLoadScraper } from './fleet/engine-load.js';
import { HealthChecker } from './fleet/health.js';
import { KvFollower } from './fleet/kv-following.js';
import { Membership } from './fleet/membership.js';
import { ServedModels } from './fleet/model-limits.js';
import { modelPool, policiesOf } from './fleet/model-pools.js';
import { ModelRewrites } from './fleet/model-rewrites.js';
import { downWorkers, localInFlight, peerLoadOf, usesSessionPolicy } from './fleet/peer-load.js';
import { type ModelPool, PoolSet } from './fleet/pool-set.js';
import { PrefillTargets } from './fleet/prefill-targets.js';
import { startRouterTokenizer } from './fleet/router-tokenizer.js';
import { consumedBy, routingServices } from './fleet/routing-policies.js';
import { WorkerRecords } from './fleet/worker-records.js';
import { registerKvMetrics } from './observability/kv-metrics.js';
import { ProxyMetrics } from './observability/metrics.js';
import { registerReplicaMetrics } from './observability/replica-metrics.js';
import { Tracing } from './observability/tracing.js';
import type { Route } from './openai-format.js';
import { Admission } from './pipeline/admission.js';
import { errorAnswer } from './pipeline/error-answers.js';
import { InFlightRequests } from './pipeline/in-flight.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import { ResponseHomes } from './pipeline/response-homes.js';
import type { Stage } from './pipeline/stage.js';
import { answerMetrics, handleRequest, routeLabel } from './routes.js';
import type { ResolvedProxyOptions } from './settings/types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';
import { unusedSettings } from './unused-settings.js';

/** What the tokenizer threads render of each kind of prompt (chat through the template). */
const TOKENIZER_ROUTES = { chat: 'chat', prompt: 'completions', text: 'generate' } as const;

/** What {@link ProxyCore.shutdown} asks of the host it runs in. */
export interface ShutdownHost {
  /** Whether the host still accepts connections: only then is the drain delay worth waiting. */
  accepting(): boolean;
  /** Stops accepting new connections (its listener closes once the open ones have). */
  stopAccepting?(): void;
  /** After the grace period: ends the connections still open, so that the listener can close. */
  cutConnections?(): Promise<void> | void;
}

/**
 * What a proxy is without its HTTP server: pools, membership and discovery, engines, health,
 * metrics, admission, tracing and the requests under way, with `answer(req, res)` for one
 * request. `disagg serve` (`createProxy`) puts a Node server around it; `createHandler` the
 * WHATWG `Request`/`Response` types; the fastify plugin a fastify app.
 *
 * @internal
 */
export class ProxyCore implements ProxyState {
  /** The fleet: one pool today, serving any model, built from the options' workers and connector. */
  readonly pools: PoolSet;
  readonly options: ResolvedProxyOptions;
  readonly workerHeaders: Record<string, string>;
  /** What every call to a worker goes through: the options' dispatcher, or the proxy's own pool. */
  readonly dispatcher: Dispatcher;
  readonly health: HealthChecker;
  readonly metrics: ProxyMetrics;
  readonly inFlight = new InFlightRequests();
  readonly models: ServedModels;
  readonly admission: Admission;
  /** Whose each request is (`--tenants-file`, `--tenant-header`), and the tenants' per-minute use. */
  readonly tenants: TenantDirectory;
  readonly minuteWindows = new MinuteWindows();
  /** Where the tenants' per-minute limits are counted: here, or in Redis (`--redis-url`) for every replica. */
  readonly limits: TenantLimits;
  readonly logger: Logger;
  closing = false;

  /** The stages added by `addStage`, in the order added. */
  get stages(): readonly Stage[] {
    return this.#stages;
  }

  /**
   * Adds a stage of your own to every API request, as fastify's `addHook`: it runs once the
   * request is admitted (its tenant known, its model and pool resolved), after the stages added
   * before it and before the decision. It may refuse the request (its answer, in the API's error
   * shape), set a variable (`request.set`) for the stages after it, or leave an `after` hook
   * that runs once the request is over, with its answer. The proxy and the endpoint picker run it alike.
   *
   * @throws {TypeError} for a stage without a name or a `run` function, or a name taken.
   */
  addStage(stage: Stage): void {
    if (typeof stage?.name !== 'string' || stage.name === '' || typeof stage.run !== 'function') {
      throw new TypeError('A stage needs a name and a run(request) function');
    }
    if (this.#stages.some((each) => each.name === stage.name)) {
      throw new TypeError(`A stage named ${stage.name} was added already`);
    }
    this.#stages.push(stage);
  }
  draining = false;
  readonly membership: Membership;
  /**
   * One record per worker of the fleet (its name and pool, probes and circuit, engine load, KV
   * subscriber), which membership, health, the engine-load scraper and the KV follower share;
   * forgotten once, when it has left.
   */
  readonly records = new WorkerRecords<ProxyPrefillWorker | ProxyDecodeWorker>();
  readonly rewrites: ModelRewrites;
  readonly prefillTargets: PrefillTargets | undefined;
  /** The replicas' requests in flight per worker, shared through `--redis-url`; undefined without it. */
  readonly sharedInFlight: SharedInFlight | undefined;
  /** Sessions' bound workers, shared through `--redis-url` when a pool routes by session; undefined otherwise. */
  readonly sessionBindings: RedisSessionBindings | undefined;
  #replicaSynced: ((outcome: 'synced' | 'failed') => void) | undefined;
  /** Which decode worker served each Responses answer. */
  readonly responseHomes = new ResponseHomes<{ url: string }>();
  /** Stored Responses and Conversations (`responses.store`), opened on first use. */
  readonly agents: AgentState;
  readonly #stages: Stage[] = [];
  /** The workers' predicted latency, where a configured plugin reads it (fed by each request's events). */
  readonly latency: LatencyPredictor<ProxyPrefillWorker | ProxyDecodeWorker> | undefined;
  /** The engines' KV events, followed per worker, and the block index precise-prefix reads. */
  readonly kv: KvFollower<ProxyPrefillWorker | ProxyDecodeWorker>;
  /** The router's tokenizer (`--tokenizer`), once started; for precise-prefix on text and chat. */
  #tokenizer: TokenizerPool | undefined;
  /** The engines' own load from their `/metrics` (`--engine-load-interval-ms`), when read. */
  readonly #engineLoad: EngineLoadScraper | undefined;
  /** Whether a configured policy reads token ids, so that prompts are worth tokenizing. */
  readonly #routesOnBlocks: boolean;
  /** Spans, once `listen` found `@opentelemetry/api` (undefined without it). */
  tracing: Tracing | undefined;
  /** Discovery per role: DNS (`--prefill-dns`), Kubernetes (`--prefill-selector`). */
  readonly #discoveries: DiscoverySource[] = [];
  /** Engines with fixed headers (the worker key, or none), one per route. */
  readonly #engines = new Map<Route, Engine<{ url: string }>>();

  /** The connection pool towards the workers when the options gave none: closed by `finish()`. */
  readonly #ownDispatcher: Agent | undefined;
  #started: Promise<void> | undefined;

  constructor(resolved: ResolvedProxyOptions) {
    // A pool of its own, so that shutdown can end every call still open to a worker (a hung
    // prefill would otherwise keep the process alive until undici's own 300 s timeouts).
    this.#ownDispatcher = resolved.dispatcher === undefined ? new Agent() : undefined;
    this.dispatcher = (resolved.dispatcher as Dispatcher | undefined) ?? (this.#ownDispatcher as Agent);
    const options = { ...resolved, dispatcher: this.dispatcher };
    this.options = options;
    // Every line of the proxy's, and of the flow it runs, keeps a worker's words out.
    this.logger = libraryLogger(options.logger);
    for (const { setting, message } of unusedSettings(options)) this.logger.warn({ setting }, message);
    const { dispatcher } = this;
    const { workerApiKey } = options;
    this.workerHeaders = workerApiKey === undefined ? {} : { authorization: `Bearer ${workerApiKey}` };
    // What the configured policies declare they read (the top level's, every pool's), never by name.
    const consumed = mergeConsumption([
      consumedBy(options),
      ...options.pools.map((pool) => consumedBy(policiesOf(options, pool))),
    ]);
    this.#routesOnBlocks = consumed.tokens !== undefined;
    const { sidecar } = options;
    this.prefillTargets =
      sidecar.prefillFrom === 'header'
        ? new PrefillTargets({
            allow: sidecar.prefillAllow,
            engine: options.connector,
            bootstrapPort: options.bootstrapPort,
            maxRetries: sidecar.prefillMaxRetries,
          })
        : undefined;
    this.kv = new KvFollower({
      ...options.kvEvents,
      logger: this.logger,
      name: (worker) => this.membership.nameOf(worker),
      records: this.records,
    });
    this.#engineLoad = engineLoadScraper(consumed, options, this.workerHeaders, dispatcher, this.records);
    const services = routingServices(consumed, () => this.kv.index, this.#engineLoad);
    this.latency = services.latency;
    // Replicas that share a Redis balance as one: each policy sees the others' requests in
    // flight beside its own pool's.
    this.sharedInFlight =
      options.redisUrl === undefined
        ? undefined
        : new SharedInFlight({
            url: options.redisUrl,
            intervalMs: options.replicaSyncMs,
            local: () => localInFlight(this.pools),
            down: () => downWorkers(this.pools),
            logger: this.logger,
            onSync: (outcome) => this.#replicaSynced?.(outcome),
          });
    // And sessions bound to their workers where every replica reads them (the session policy).
    this.sessionBindings =
      options.redisUrl === undefined || !usesSessionPolicy(options)
        ? undefined
        : new RedisSessionBindings({ url: options.redisUrl, logger: this.logger });
    const shared = peerLoadOf(this.sharedInFlight);
    const peers = shared === undefined ? undefined : { ...shared, bindings: this.sessionBindings };
    // The pools named for their models, then the top-level workers, the pool of every other
    // model (the one pool of a proxy without `pools`); none without top-level workers.
    const topLevel =
      options.pools.length === 0 ||
      options.decode.length > 0 ||
      options.discovery.decodeDns !== undefined ||
      options.discovery.decodeSelector !== undefined ||
      options.discovery.inferencePool !== undefined;
    this.rewrites = new ModelRewrites(options.rewrites);
    this.agents = agentStateOf(options, this.logger);
    this.pools = new PoolSet([
      ...options.pools.map((pool) => modelPool(options, services, pool, peers)),
      ...(topLevel ? [modelPool(options, services, undefined, peers)] : []),
    ]);
    this.tenants = new TenantDirectory({
      file: options.tenantsFile,
      header: options.tenantHeader,
      headerKeys: options.tenantHeaderKeys,
      logger: this.logger,
    });
    const tenants = this.tenants;
    this.limits =
      options.redisUrl === undefined
        ? this.minuteWindows
        : new RedisWindows(options.redisUrl, {
            failure: options.redisFailure,
            logger: this.logger,
            onFailure: () => this.metrics.redisFailed(),
          });
    this.admission = new Admission({
      maxConcurrent: options.maxConcurrentRequests,
      queueSize: options.queueSize,
      // A band's own time-to-live from the tenants file, else the proxy's.
      queueTimeoutMs: (priority) => tenants.queueTimeoutMs(priority) ?? options.queueTimeoutMs,
      onWait: (seconds, applicant) => this.metrics.queueWait(seconds, this.tenantLabel(applicant.tenant)),
      tenantNames: () => tenants.tenants.map((tenant) => tenant.name),
      preempt: options.preempt,
    });
    this.metrics = new ProxyMetrics(
      this.pools,
      this.admission,
      options.metricsRegistry as Registry | undefined,
      // Names, not addresses: a series matches the admin API and logs, and /metrics does not
      // list the fleet's internal addresses.
      (worker) => this.membership.nameOf(worker),
      // Read at a scrape, after the constructor made the checker.
      (worker) => this.health.circuit(worker),
      {
        limits: options.scaling,
        ...(options.scaling.saturationSource === 'in-flight' || this.#engineLoad === undefined
          ? {}
          : { engineOf: (worker) => this.#engineLoad?.loadOf(worker) }),
      },
    );
    registerKvMetrics(this.metrics.registers, this.kv, (worker) => this.membership.nameOf(worker));
    this.#replicaSynced = registerReplicaMetrics(this.metrics.registers, this.sharedInFlight);
    this.models = new ServedModels({
      headers: this.workerHeaders,
      dispatcher,
      logger: this.logger,
      nameOf: (worker) => this.membership.nameOf(worker),
    });
    this.health = new HealthChecker(this.pools.sides(), {
      logger: this.logger,
      intervalMs: options.healthIntervalMs,
      timeoutMs: options.healthTimeoutMs,
      headers: this.workerHeaders,
      dispatcher,
      afterRound: () => this.models.refresh(this.pools.available('decode')),
      breaker: options.breaker,
      probeThresholds: { failure: options.healthFailureThreshold, success: options.healthSuccessThreshold },
      records: this.records,
    });
    this.membership = new Membership(
      this.pools,
      this.health,
      this.logger,
      // A worker that joined is followed, one that left dropped: the follower sees the pools change.
      (role, change, source) => this.metrics.membershipChanged(role, change, source),
      this.records,
    );
    this.#discoveries.push(...discoverySources(options, this.membership, this.pools, this.logger));
  }

  /** The prefill side of the one pool (`proxy.prefillWorkers`, the public API's). */
  get prefillWorkers(): WorkerPool<ProxyPrefillWorker> {
    return this.#onlyPool.prefill;
  }

  /** The decode side of the one pool (`proxy.decodeWorkers`, the public API's). */
  get decodeWorkers(): WorkerPool<ProxyDecodeWorker> {
    return this.#onlyPool.decode;
  }

  /** The pool of every other model (the top-level workers), else the first: the public API's two pools are its sides. */
  get #onlyPool(): ModelPool {
    return this.pools.poolFor(undefined) ?? (this.pools.all()[0] as ModelPool);
  }

  /** The metrics port: `GET`/`HEAD /metrics` and nothing else (a 404 for any other path). */
  answerMetricsPort(req: IncomingMessage, res: ServerResponse): void {
    const method = req.method ?? 'GET';
    if (pathOf(req) === '/metrics' && (method === 'GET' || method === 'HEAD')) {
      answerMetrics(this, res).catch((error: unknown) => {
        this.logger.error({ err: error }, 'The proxy failed to answer a scrape');
        res.destroy();
      });
      return;
    }
    const answer = errorAnswer(new RequestError(404, 'This port serves GET /metrics only'));
    answerJson(res, answer.status, answer.body);
  }

  /**
   * Answers one request on the proxy's routes, whatever the proxy's own failure: a 500 in the
   * OpenAI shape before the first byte, a cut connection after. `given.body`: the body, when
   * a framework has read it; `given.path`: the route's path, when mounted under a prefix.
   */
  answer(req: IncomingMessage, res: ServerResponse, given: { body?: string; path?: string } = {}): void {
    const arrived = performance.now();
    res.once('close', () =>
      this.metrics.answered(routeLabel(req, given.path), res, (performance.now() - arrived) / 1000, {
        cutAtShutdown: this.inFlight.wasCut(res),
      }),
    );
    handleRequest(this, req, res, given).catch((error: unknown) => {
      this.logger.error({ err: error }, 'The proxy failed to answer a request');
      if (res.headersSent) res.destroy();
      else {
        const answer = errorAnswer(error, undefined, (text) => this.redact(text));
        answerJson(res, answer.status, answer.body);
      }
    });
  }

  engineFor(
    route: Route,
    authorization: string | undefined,
    perCall?: (worker: { url: string } | undefined) => Record<string, string>,
  ): Engine<{ url: string }> {
    const forwarded = this.options.workerApiKey === undefined && authorization !== undefined;
    const cached = forwarded || perCall !== undefined ? undefined : this.#engines.get(route);
    if (cached !== undefined) return cached;
    const fixed = forwarded ? { authorization } : this.workerHeaders;
    const engine = httpEngine<{ url: string }>({
      api: route,
      headers: perCall === undefined ? fixed : (worker) => ({ ...fixed, ...perCall(worker) }),
      dispatcher: this.dispatcher,
    });
    if (!forwarded && perCall === undefined) this.#engines.set(route, engine);
    return engine;
  }

  nameOf(worker: { url: string }): string {
    return this.membership.nameOf(worker);
  }

  redact(text: string): string {
    // The known workers by name, then any address left: a sidecar's prefill target (a
    // request's header named it, no pool lists it), or one inside a worker's own words.
    return redactAddresses(this.membership.redact(text));
  }

  /**
   * Loads tracing, starts discovery, probes every worker once and starts the health rounds;
   * once, however often it is called (the first call's promise).
   */
  start(): Promise<void> {
    this.#started ??= (async () => {
      this.tracing = await Tracing.load(this.options.tracer);
      // First, before anything runs that would keep a failed start alive: a wrong --tokenizer
      // (or a model that cannot be downloaded) stops the start at once.
      const { dir, threads } = this.options.tokenizer;
      if (dir !== undefined) this.#tokenizer = await startRouterTokenizer(dir, threads, this.logger);
      // Discovered workers are probed as they are added; then every worker once more.
      await this.agents.open();
      await Promise.all(this.#discoveries.map((discovery) => discovery.start()));
      await this.health.check();
      await this.kv.start(this.pools.workerPools());
      this.sharedInFlight?.start();
      await this.#engineLoad?.start(this.pools.workerPools());
      this.health.start();
    })();
    return this.#started;
  }

  /**
   * The one shutdown of every host (disagg serve's server, a web handler, the fastify plugin):
   * discovery stops and `/ready` fails; for `drainDelayMs`, while the host still accepts
   * connections, requests are still served (a load balancer takes the pod out meanwhile);
   * then new requests are refused, the host stops accepting, requests under way get
   * `gracePeriodMs`, the host cuts what is left, and every call still open to a worker ends.
   * Resolves when all of it is done; bounded by the two periods and the host's own cut.
   */
  async shutdown(host: ShutdownHost, periods: { drainDelayMs: number; gracePeriodMs: number }): Promise<void> {
    await this.beginDrain();
    if (periods.drainDelayMs > 0 && host.accepting()) {
      await new Promise((resolve) => setTimeout(resolve, periods.drainDelayMs));
    }
    this.stopTaking();
    host.stopAccepting?.();
    await this.finish(periods.gracePeriodMs, async () => {
      await host.cutConnections?.();
    });
  }

  /**
   * The metrics' label of a tenant: its name for a tenant of the file (or the default), else
   * `other` (a name a gateway sent that the file does not list), so that labels stay bounded.
   */
  tenantLabel(tenant: string): string {
    return this.tenants.tenants.some((known) => known.name === tenant) ? tenant : 'other';
  }

  /**
   * The metrics' label of a request's model: a name a pool or a rewrite rule is configured
   * with, or one a decode worker lists (an adapter it loaded); else `other`. A client writes the
   * body's model, and engines that serve any name (SGLang's) would make each a series.
   */
  modelLabel(model: unknown): string {
    if (typeof model !== 'string') return '';
    const known = this.pools.namedFor(model) !== undefined || this.rewrites.names(model) || this.models.lists(model);
    return known ? model : 'other';
  }

  /** The router's tokenizer (`--tokenizer`), once started; undefined without one. */
  get tokenizer(): TokenizerPool | undefined {
    return this.#tokenizer;
  }

  get routesOnTokens(): boolean {
    return this.#routesOnBlocks;
  }

  async tokenize(body: Record<string, unknown>, endpoint: Endpoint): Promise<readonly number[] | undefined> {
    const tokenizer = this.#tokenizer;
    const render = endpoint.tokenize;
    if (tokenizer === undefined || render === undefined) return undefined;
    try {
      // Responses and Anthropic Messages as the engine renders them: converted to chat first.
      return await tokenizer.tokenize(endpoint.chatForm?.(body) ?? body, TOKENIZER_ROUTES[render]);
    } catch (error) {
      this.logger.warn(
        { err: error },
        'Could not tokenize a prompt; the request goes by load and its tokens are estimated',
      );
      return undefined;
    }
  }

  /** Shutdown, first step: `/ready` fails and discovery stops; requests are still served. */
  async beginDrain(): Promise<void> {
    this.draining = true;
    await Promise.all([...this.#discoveries.map((discovery) => discovery.stop()), this.kv.close()]);
  }

  /** Shutdown, second step: new requests are refused (503) and the health rounds stop. */
  stopTaking(): void {
    this.draining = true;
    this.closing = true;
    this.health.stop();
    this.#engineLoad?.stop();
  }

  /**
   * Shutdown, last step: after the grace period the requests still under way are ended (an
   * SSE error or a 503), then every call still open to a worker.
   */
  async finish(gracePeriodMs: number, beforeRelease: () => Promise<void> = async () => {}): Promise<void> {
    await this.inFlight.drain(gracePeriodMs);
    await beforeRelease();
    // Legs still open (a prefill that never answers, a clean-up read) end here, whatever the
    // workers do: shutdown is bounded by the grace period.
    if (this.#ownDispatcher !== undefined && !this.#ownDispatcher.destroyed) await this.#ownDispatcher.destroy();
    await this.#tokenizer?.close();
    await this.sharedInFlight?.close();
    await this.sessionBindings?.close();
    await this.agents.close();
    this.tenants.close();
    if (this.limits !== this.minuteWindows) await (this.limits as RedisWindows).close();
    // What was counted of the lines that repeat (retries while a worker is down), told.
    repeatedLogOf(this.logger).flush();
  }
}
