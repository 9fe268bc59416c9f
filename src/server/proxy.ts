import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WorkerPool } from '../routing/worker-pool.js';
import type { Stage } from './pipeline/stage.js';
import { ProxyCore } from './proxy-core.js';
import type { ProxyOptions } from './settings/proxy-options.js';
import { resolveProxyOptions } from './settings/resolve.js';
import type { ResolvedProxyOptions } from './settings/types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';

export type { ProxyOptions } from './settings/proxy-options.js';
export type { ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';

/** A running (or ready to run) proxy. */
export interface ProxyServer {
  readonly server: Server;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  /**
   * Adds a stage of your own to every API request (see {@link Stage}), run once the request is
   * admitted and before its workers are picked, as fastify's `addHook`; add it before `listen`.
   *
   * @throws {TypeError} for a stage without a name or a `run` function, or a name taken.
   */
  addStage(stage: Stage): void;
  /** Probes every worker once, then listens; resolves with the proxy's base URL. */
  listen(port?: number, host?: string): Promise<string>;
  /** Where `/metrics` is served when `metricsPort` is set and the proxy listens; else undefined. */
  readonly metricsUrl: string | undefined;
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

/** A Node `http` server around a {@link ProxyCore}: listen, and shut down as orchestrators expect. */
class DisaggProxy implements ProxyServer {
  readonly server: Server;
  /** @internal What the server answers with (tests reach its health checker through it). */
  readonly core: ProxyCore;

  constructor(options: ResolvedProxyOptions) {
    this.core = new ProxyCore(options);
    const serverOptions = {
      keepAliveTimeout: options.keepAliveTimeoutMs,
      headersTimeout: Math.min(options.headersTimeoutMs, options.requestTimeoutMs),
      requestTimeout: options.requestTimeoutMs,
      // Node checks the two timeouts above on this period (30 s by default): a tenth of the
      // shorter one, so that a slow client is cut near its limit rather than up to 30 s late.
      connectionsCheckingInterval: Math.max(10, Math.min(1000, options.headersTimeoutMs / 10)),
    };
    this.server = createServer(serverOptions, (req, res) => this.core.answer(req, res));
    if (options.metricsPort !== undefined) {
      this.#metricsServer = createServer((req, res) => this.core.answerMetricsPort(req, res));
    }
  }
  addStage(stage: Stage): void {
    this.core.addStage(stage);
  }

  /** `/metrics` alone, when `metricsPort` gives it a port of its own. */
  readonly #metricsServer: Server | undefined;

  get prefillWorkers(): WorkerPool<ProxyPrefillWorker> {
    return this.core.prefillWorkers;
  }

  get decodeWorkers(): WorkerPool<ProxyDecodeWorker> {
    return this.core.decodeWorkers;
  }

  async listen(port = 8000, host = '127.0.0.1'): Promise<string> {
    try {
      await this.core.start();
      // The metrics port first: a port in use fails the start before the API takes requests.
      if (this.#metricsServer !== undefined) {
        await listenOn(this.#metricsServer, this.core.options.metricsPort as number, host);
      }
      await listenOn(this.server, port, host);
    } catch (error) {
      // What the start began (discovery, KV subscribers, connections, the metrics port) ends
      // with it: a process whose start failed exits instead of hanging on their handles.
      if (this.#metricsServer?.listening) this.#metricsServer.close();
      await this.core.shutdown({ accepting: () => false }, { drainDelayMs: 0, gracePeriodMs: 0 }).catch(() => {});
      throw error;
    }
    return urlOf(this.server);
  }

  get metricsUrl(): string | undefined {
    return this.#metricsServer?.listening ? urlOf(this.#metricsServer) : undefined;
  }

  async close(options: { gracePeriodMs?: number; drainDelayMs?: number } = {}): Promise<void> {
    const core = this.core;
    const server = this.server;
    let closed: Promise<void> = Promise.resolve();
    await core.shutdown(
      {
        accepting: () => server.listening,
        stopAccepting: () => {
          closed = new Promise<void>((resolve) => server.close(() => resolve()));
          server.closeIdleConnections();
        },
        cutConnections: async () => {
          server.closeAllConnections();
          await closed;
        },
      },
      {
        drainDelayMs: options.drainDelayMs ?? core.options.drainDelayMs,
        gracePeriodMs: options.gracePeriodMs ?? core.options.gracePeriodMs,
      },
    );
    // Scraped to the end: the last of the drain shows in the metrics.
    const metricsServer = this.#metricsServer;
    if (metricsServer?.listening) {
      await new Promise<void>((resolve) => {
        metricsServer.close(() => resolve());
        metricsServer.closeAllConnections();
      });
    }
  }
}

function listenOn(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function urlOf(server: Server): string {
  const address = server.address() as AddressInfo;
  return `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
}
