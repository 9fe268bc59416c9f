import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { DnsDiscovery } from '../discovery/dns-discovery.js';
import { KubernetesDiscovery } from '../discovery/kubernetes-discovery.js';
import { type Connector, sglangBootstrap, trtllmContextFirst, vllmNixl } from '../flow/connectors.js';
import type { Engine } from '../flow/disaggregate.js';
import { WorkerPool } from '../flow/worker-pool.js';
import { httpEngine } from '../http/http-engine.js';
import { answerJson } from '../http/node-server.js';
import { defaultLogger, type Logger } from '../runtime/logger.js';
import { Admission } from './admission.js';
import { errorAnswer } from './error-answers.js';
import { HealthChecker } from './health.js';
import { InFlightRequests } from './in-flight.js';
import { Membership } from './membership.js';
import { ProxyMetrics } from './metrics.js';
import { ServedModels } from './model-limits.js';
import type { Route } from './openai-format.js';
import {
  checkWorker,
  type ProxyDecodeWorker,
  type ProxyOptions,
  type ProxyPrefillWorker,
  type ResolvedProxyOptions,
  resolveProxyOptions,
} from './options.js';
import type { ProxyState } from './proxy-state.js';
import { handleRequest, routeLabel } from './routes.js';
import { conditionalAggregation, selectionFor } from './routing-policies.js';
import { Tracing } from './tracing.js';

export type { ProxyDecodeWorker, ProxyOptions, ProxyPrefillWorker } from './options.js';

const CONNECTORS: Record<ResolvedProxyOptions['connector'], Connector> = {
  vllm: vllmNixl,
  sglang: sglangBootstrap,
  trtllm: trtllmContextFirst,
};

/** A running (or ready to run) proxy. */
export interface ProxyServer {
  readonly server: Server;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  /** Probes every worker once, then listens; resolves with the proxy's base URL. */
  listen(port?: number, host?: string): Promise<string>;
  /**
   * Shuts down as orchestrators expect: first `/ready` answers 503 for `drainDelayMs` (the
   * option's value, 5,000 by default) while requests are still served, so that load balancers
   * stop sending; then it stops accepting, lets requests under way finish within
   * `gracePeriodMs` (30,000 by default), ends the rest cleanly (an SSE `error` event, or a
   * 503), ends every call still open to a worker, and closes.
   */
  close(options?: { gracePeriodMs?: number; drainDelayMs?: number }): Promise<void>;
}

/**
 * An OpenAI-compatible disaggregating proxy on Node's `http` server: `POST /v1/completions`
 * and `/v1/chat/completions` (streamed or not) through `disaggregate` with `httpEngine` legs,
 * `GET /v1/models` (from a decode worker), `/health`, `/ready` (at least one prefill and one
 * decode worker in rotation) and `/metrics` (Prometheus).
 *
 * The error contract: a failure before the first byte is a real HTTP status with an
 * OpenAI-style JSON error body (a worker's 4xx passes through); after streaming started, one
 * SSE `error` event naming the failing `leg`, then the end. Every response carries
 * `x-request-id` (sent to both legs), `x-disagg-strategy` and the chosen workers.
 *
 * @example
 * const proxy = createProxy({ connector: 'vllm', prefill: [{ url: 'http://p0:8100' }], decode: [{ url: 'http://d0:8200' }] });
 * const url = await proxy.listen(8000);
 * process.on('SIGTERM', () => proxy.close());
 *
 * @throws {ConfigError} for options that are missing, wrong or unknown, naming the option.
 */
export function createProxy(options: ProxyOptions): ProxyServer {
  return new DisaggProxy(resolveProxyOptions(options));
}

/** The composition: pools, engines, health, metrics and shutdown around the route handlers. */
class DisaggProxy implements ProxyServer, ProxyState {
  readonly server: Server;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  readonly options: ResolvedProxyOptions;
  readonly connector: Connector;
  readonly workerHeaders: Record<string, string>;
  readonly health: HealthChecker;
  readonly metrics: ProxyMetrics;
  readonly inFlight = new InFlightRequests();
  readonly models: ServedModels;
  readonly admission: Admission;
  readonly logger: Logger;
  readonly skipPrefill: ((request: Record<string, unknown>) => string | undefined) | undefined;
  closing = false;
  draining = false;
  readonly membership: Membership;
  /** Spans, once `listen` found `@opentelemetry/api` (undefined without it). */
  tracing: Tracing | undefined;
  /** Discovery per role: DNS (`--prefill-dns`), Kubernetes (`--prefill-selector`). */
  readonly #discoveries: Array<DnsDiscovery | KubernetesDiscovery> = [];
  /** Engines with fixed headers (the worker key, or none), one per route. */
  readonly #engines = new Map<Route, Engine<{ url: string }>>();

  /** The connection pool towards the workers when the options gave none: closed by `close()`. */
  readonly #ownDispatcher: Agent | undefined;

  constructor(resolved: ResolvedProxyOptions) {
    // A pool of its own, so that shutdown can end every call still open to a worker (a hung
    // prefill would otherwise keep the process alive until undici's own 300 s timeouts).
    this.#ownDispatcher = resolved.dispatcher === undefined ? new Agent() : undefined;
    const options = this.#ownDispatcher === undefined ? resolved : { ...resolved, dispatcher: this.#ownDispatcher };
    this.options = options;
    this.logger = options.logger ?? defaultLogger();
    this.connector = CONNECTORS[options.connector];
    const { dispatcher, workerApiKey, routing } = options;
    this.workerHeaders = workerApiKey === undefined ? {} : { authorization: `Bearer ${workerApiKey}` };
    this.prefillWorkers = new WorkerPool(options.prefill, { selection: selectionFor(options.prefillPolicy, routing) });
    const decodeSelection = selectionFor<ProxyDecodeWorker>(options.decodePolicy, routing);
    this.decodeWorkers = new WorkerPool(options.decode, { selection: decodeSelection });
    this.skipPrefill = conditionalAggregation(routing, this.decodeWorkers, decodeSelection);
    this.admission = new Admission({
      maxConcurrent: options.maxConcurrentRequests,
      queueSize: options.queueSize,
      queueTimeoutMs: options.queueTimeoutMs,
      onWait: (seconds) => this.metrics.queueWait(seconds),
    });
    this.metrics = new ProxyMetrics({ prefill: this.prefillWorkers, decode: this.decodeWorkers }, this.admission);
    this.models = new ServedModels({
      headers: this.workerHeaders,
      dispatcher: options.dispatcher,
      logger: this.logger,
    });
    this.health = new HealthChecker(
      [
        { role: 'prefill', pool: this.prefillWorkers },
        { role: 'decode', pool: this.decodeWorkers },
      ],
      {
        logger: this.logger,
        intervalMs: options.healthIntervalMs,
        headers: this.workerHeaders,
        ...(dispatcher === undefined ? {} : { dispatcher }),
        afterRound: () => this.models.refresh(this.decodeWorkers.available),
        breaker: options.breaker,
        probeThresholds: { failure: options.healthFailureThreshold, success: options.healthSuccessThreshold },
      },
    );
    this.membership = new Membership(
      { prefill: this.prefillWorkers, decode: this.decodeWorkers },
      this.health,
      this.logger,
      (role, change, source) => this.metrics.membershipChanged(role, change, source),
    );
    this.#discover(options);
    const serverOptions = {
      keepAliveTimeout: options.keepAliveTimeoutMs,
      headersTimeout: Math.min(options.headersTimeoutMs, options.requestTimeoutMs),
      requestTimeout: options.requestTimeoutMs,
      // Node checks the two timeouts above on this period (30 s by default): a tenth of the
      // shorter one, so that a slow client is cut near its limit rather than up to 30 s late.
      connectionsCheckingInterval: Math.max(10, Math.min(1000, options.headersTimeoutMs / 10)),
    };
    this.server = createServer(serverOptions, (req, res) => {
      res.once('close', () => this.metrics.answered(routeLabel(req), res));
      handleRequest(this, req, res).catch((error: unknown) => {
        this.logger.error({ err: error }, 'The proxy failed to answer a request');
        if (res.headersSent) res.destroy();
        else {
          const answer = errorAnswer(error, undefined, (text) => this.redact(text));
          answerJson(res, answer.status, answer.body);
        }
      });
    });
  }

  /** The discovery sources the options ask for; started by `listen`. */
  #discover(options: ResolvedProxyOptions): void {
    const { discovery } = options;
    const check = (role: 'prefill' | 'decode', worker: { url: string; bootstrapPort?: number }) =>
      checkWorker(role, worker.bootstrapPort === undefined ? worker.url : worker, options);
    const dnsTarget = this.membership.targetFor('dns', check);
    const kubernetesTarget = this.membership.targetFor('kubernetes', check);
    for (const role of ['prefill', 'decode'] as const) {
      const url = discovery[`${role}Dns`];
      if (url !== undefined) {
        const lookup = options.dnsLookup;
        this.#discoveries.push(
          new DnsDiscovery({
            role,
            url,
            intervalMs: discovery.dnsIntervalMs,
            target: dnsTarget,
            logger: this.logger,
            ...(lookup === undefined ? {} : { lookup }),
          }),
        );
      }
      const selector = discovery[`${role}Selector`];
      if (selector !== undefined) {
        this.#discoveries.push(
          new KubernetesDiscovery({
            role,
            selector,
            ...(discovery.namespace === undefined ? {} : { namespace: discovery.namespace }),
            port: discovery.port,
            bootstrapPortAnnotation: discovery.bootstrapPortAnnotation,
            target: kubernetesTarget,
            logger: this.logger,
            ...(options.kubeConfig === undefined ? {} : { kubeConfig: options.kubeConfig }),
          }),
        );
      }
    }
  }

  engineFor(
    route: Route,
    authorization: string | undefined,
    perCall?: (worker: { url: string } | undefined) => Record<string, string>,
  ): Engine<{ url: string }> {
    const forwarded = this.options.workerApiKey === undefined && authorization !== undefined;
    const cached = forwarded || perCall !== undefined ? undefined : this.#engines.get(route);
    if (cached !== undefined) return cached;
    const { dispatcher } = this.options;
    const fixed = forwarded ? { authorization } : this.workerHeaders;
    const engine = httpEngine<{ url: string }>({
      api: route,
      headers: perCall === undefined ? fixed : (worker) => ({ ...fixed, ...perCall(worker) }),
      ...(dispatcher === undefined ? {} : { dispatcher }),
    });
    if (!forwarded && perCall === undefined) this.#engines.set(route, engine);
    return engine;
  }

  nameOf(worker: { url: string }): string {
    return this.membership.nameOf(worker);
  }

  redact(text: string): string {
    return this.membership.redact(text);
  }

  async listen(port = 8000, host = '127.0.0.1'): Promise<string> {
    this.tracing = await Tracing.load(this.options.tracer);
    // Discovered workers are probed as they are added; then every worker once more.
    await Promise.all(this.#discoveries.map((discovery) => discovery.start()));
    await this.health.check();
    this.health.start();
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const address = this.server.address() as AddressInfo;
    return `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  }

  async close(options: { gracePeriodMs?: number; drainDelayMs?: number } = {}): Promise<void> {
    this.draining = true;
    await Promise.all(this.#discoveries.map((discovery) => discovery.stop()));
    const drainMs = options.drainDelayMs ?? this.options.drainDelayMs;
    if (drainMs > 0 && this.server.listening) await new Promise((resolve) => setTimeout(resolve, drainMs));
    this.closing = true;
    this.health.stop();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    await this.inFlight.drain(options.gracePeriodMs ?? this.options.gracePeriodMs);
    this.server.closeAllConnections();
    await closed;
    // Legs still open (a prefill that never answers, a clean-up read) end here, whatever the
    // workers do: shutdown is bounded by the grace period.
    if (this.#ownDispatcher !== undefined && !this.#ownDispatcher.destroyed) await this.#ownDispatcher.destroy();
  }
}
