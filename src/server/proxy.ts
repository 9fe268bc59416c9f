import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Dispatcher, request } from 'undici';
import { legOf } from '../flow/client-stream.js';
import { type Connector, sglangBootstrap, vllmNixl } from '../flow/connectors.js';
import type { Deadlines } from '../flow/deadlines.js';
import { disaggregate } from '../flow/disaggregate.js';
import type { FlowEvent, FlowEventOf } from '../flow/events.js';
import { WorkerPool } from '../flow/worker-pool.js';
import { httpEngine } from '../http/http-engine.js';
import { parseJson } from '../http/json.js';
import { UpstreamError } from '../http/upstream-error.js';
import { Annotated } from '../protocol/annotated.js';
import type { EngineItem } from '../protocol/llm-engine-output.js';
import { Controller } from '../runtime/controller.js';
import { defaultLogger, type Logger } from '../runtime/logger.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { findCause } from '../util/cause-chain.js';
import { closeQuietly } from '../util/close-quietly.js';
import { HealthChecker } from './health.js';
import { ProxyMetrics } from './metrics.js';
import { errorAnswer, OpenAIWriter, type Route } from './openai-format.js';

/** A prefill worker of the proxy: its base URL and, for SGLang, its bootstrap port. */
export interface ProxyPrefillWorker {
  url: string;
  bootstrapPort?: number;
  bootstrapHost?: string;
  dpRank?: number;
  dpSize?: number;
}

/** A decode worker of the proxy. */
export interface ProxyDecodeWorker {
  url: string;
}

/** Options of {@link createProxy}. */
export interface ProxyOptions {
  /** The engines behind: vLLM with NIXL (sequential), or SGLang with its bootstrap (concurrent). */
  connector: 'vllm' | 'sglang';
  prefill: ProxyPrefillWorker[];
  decode: ProxyDecodeWorker[];
  /** How a worker is chosen for each leg; `least-in-flight` by default. */
  selection?: 'round-robin' | 'least-in-flight';
  deadlines?: Deadlines;
  cleanupBudgetMs?: number;
  /** Between health probes of every worker; 5,000 ms by default. */
  healthIntervalMs?: number;
  /**
   * How long a client may leave its socket full before the request is given up: the decode
   * leg is stopped (and its KV cleaned up) and the connection closed; 30,000 ms by default.
   * The proxy reads decode only as fast as the client reads, so it never buffers more than one
   * chunk beyond the socket's own buffer.
   */
  slowClientTimeoutMs?: number;
  /** The largest request body accepted; 8 MiB by default. */
  maxBodyBytes?: number;
  /**
   * How long an idle client connection is kept open; 72,000 ms by default (as fastify does).
   * Node's own default of 5 s makes busy clients reconnect between bursts: measured in
   * `bench:proxy`, it cost a relay about a quarter of its requests per second.
   */
  keepAliveTimeoutMs?: number;
  logger?: Logger;
  /** Receives every request's lifecycle events (see `FlowEvent`), for your own logs or traces. */
  onEvent?: (event: FlowEvent) => void;
  /** The undici dispatcher for worker calls (connection pool); undici's global one by default. */
  dispatcher?: Dispatcher;
}

/** A running (or ready to run) proxy. */
export interface ProxyServer {
  readonly server: Server;
  readonly metrics: ProxyMetrics;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  /** Probes every worker once, then listens; resolves with the proxy's base URL. */
  listen(port?: number, host?: string): Promise<string>;
  /**
   * Stops accepting, lets requests under way finish within `gracePeriodMs` (30,000 by
   * default), then ends the rest cleanly (an SSE `error` event, or a 503) and closes.
   */
  close(options?: { gracePeriodMs?: number }): Promise<void>;
}

const STRATEGY_HEADER: Record<FlowEventOf<'routed'>['strategy'], string> = {
  sequential: 'disaggregated-sequential',
  concurrent: 'disaggregated-concurrent',
  early: 'disaggregated-early',
  aggregated: 'skipped-prefill',
};

interface InFlight {
  context: Controller;
  res: ServerResponse;
  /** Ends the response now with a shutdown error (the grace period is over). */
  shutdown(): void;
}

/**
 * An OpenAI-compatible disaggregating proxy on Node's `http` server: `POST /v1/completions`
 * and `/v1/chat/completions` (streamed or not) through {@link disaggregate} with
 * {@link httpEngine} legs, `GET /v1/models` (from a decode worker), `/health`, `/ready` (at
 * least one prefill and one decode worker in rotation) and `/metrics` (Prometheus).
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
 */
export function createProxy(options: ProxyOptions): ProxyServer {
  return new DisaggProxy(options);
}

class DisaggProxy implements ProxyServer {
  readonly server: Server;
  readonly metrics: ProxyMetrics;
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
  readonly #options: ProxyOptions;
  readonly #connector: Connector;
  readonly #engine: ReturnType<typeof httpEngine<{ url: string }>>;
  readonly #health: HealthChecker;
  readonly #logger: Logger;
  readonly #inFlight = new Set<InFlight>();
  #closing = false;

  constructor(options: ProxyOptions) {
    if (options.connector !== 'vllm' && options.connector !== 'sglang') {
      throw new TypeError(`connector must be 'vllm' or 'sglang', got ${JSON.stringify(options.connector)}`);
    }
    this.#options = options;
    this.#logger = options.logger ?? defaultLogger();
    this.#connector = options.connector === 'vllm' ? vllmNixl : sglangBootstrap;
    const selection = options.selection ?? 'least-in-flight';
    this.prefillWorkers = new WorkerPool(options.prefill, { selection });
    this.decodeWorkers = new WorkerPool(options.decode, { selection });
    this.#engine = httpEngine<{ url: string }>(
      options.dispatcher === undefined ? {} : { dispatcher: options.dispatcher },
    );
    this.metrics = new ProxyMetrics({ prefill: this.prefillWorkers, decode: this.decodeWorkers });
    this.#health = new HealthChecker(
      [
        { role: 'prefill', pool: this.prefillWorkers },
        { role: 'decode', pool: this.decodeWorkers },
      ],
      {
        logger: this.#logger,
        ...(options.healthIntervalMs === undefined ? {} : { intervalMs: options.healthIntervalMs }),
        ...(options.dispatcher === undefined ? {} : { dispatcher: options.dispatcher }),
      },
    );
    const keepAliveTimeout = options.keepAliveTimeoutMs ?? 72_000;
    // headersTimeout stays above the keep-alive window, or Node may cut a reused connection.
    this.server = createServer({ keepAliveTimeout, headersTimeout: keepAliveTimeout + 1000 }, (req, res) => {
      this.#route(req, res).catch((error: unknown) => {
        this.#logger.error({ err: error }, 'The proxy failed to answer a request');
        if (!res.headersSent) answerJson(res, 500, errorAnswer(error).body);
        else res.destroy();
      });
    });
  }

  async listen(port = 8000, host = '127.0.0.1'): Promise<string> {
    await this.#health.check();
    this.#health.start();
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

  async close(options: { gracePeriodMs?: number } = {}): Promise<void> {
    this.#closing = true;
    this.#health.stop();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    const grace = options.gracePeriodMs ?? 30_000;
    const deadline = Date.now() + grace;
    while (this.#inFlight.size > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(50, Math.max(1, deadline - Date.now()))));
    }
    const ending = [...this.#inFlight].map((entry) => {
      entry.shutdown();
      return finished(entry.res);
    });
    // Let those last answers leave before the sockets go (bounded: a client may not read).
    await Promise.race([Promise.all(ending), new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
    this.server.closeAllConnections();
    await closed;
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET') {
      if (path === '/health') return answerJson(res, 200, { status: 'ok' });
      if (path === '/ready') return this.#ready(res);
      if (path === '/metrics') {
        const text = await this.metrics.registry.metrics();
        res.writeHead(200, { 'content-type': this.metrics.registry.contentType });
        res.end(text);
        return;
      }
      if (path === '/v1/models') return this.#models(res);
    }
    if (req.method === 'POST' && path === '/v1/completions') return this.#completion(req, res, 'completions');
    if (req.method === 'POST' && path === '/v1/chat/completions') return this.#completion(req, res, 'chat');
    answerJson(res, 404, errorBody(404, 'not_found', `No route ${req.method} ${path}`));
  }

  #ready(res: ServerResponse): void {
    const prefill = this.prefillWorkers.available.length;
    const decode = this.decodeWorkers.available.length;
    const ready = prefill > 0 && decode > 0 && !this.#closing;
    answerJson(res, ready ? 200 : 503, { ready, prefill_workers: prefill, decode_workers: decode });
  }

  async #models(res: ServerResponse): Promise<void> {
    const worker = this.decodeWorkers.available[0];
    if (worker === undefined)
      return answerJson(res, 503, errorBody(503, 'service_unavailable', 'No decode worker is available'));
    try {
      const answer = await request(`${worker.url.replace(/\/$/, '')}/v1/models`, {
        ...(this.#options.dispatcher === undefined ? {} : { dispatcher: this.#options.dispatcher }),
      });
      const text = await answer.body.text();
      res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
      res.end(text);
    } catch (error) {
      answerJson(res, 502, errorBody(502, 'upstream_error', UpstreamError.fromFailure(worker.url, error).message));
    }
  }

  async #completion(req: IncomingMessage, res: ServerResponse, route: Route): Promise<void> {
    const requestId = headerValue(req.headers['x-request-id']) ?? randomUUID();
    res.setHeader('x-request-id', requestId);
    if (this.#closing) {
      return answerJson(res, 503, errorBody(503, 'service_unavailable', 'The proxy is shutting down'));
    }
    let body: Record<string, unknown>;
    try {
      const parsed = parseJson(await readBody(req, this.#options.maxBodyBytes ?? 8 * 1024 * 1024));
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        throw new RequestError(400, 'The request body must be a JSON object');
      }
      body = parsed as Record<string, unknown>;
    } catch (error) {
      const status = error instanceof RequestError ? error.status : 400;
      const message = error instanceof RequestError ? error.message : `The request body is not JSON: ${String(error)}`;
      return answerJson(res, status, errorBody(status, 'invalid_request_error', message));
    }

    const context = new Controller(requestId);
    const started = performance.now();
    // Until the relay takes over, ending it at shutdown is a 503 (nothing was sent yet).
    const entry: InFlight = {
      context,
      res,
      shutdown: () => {
        context.stopGenerating();
        const answer = errorAnswer(new ShutdownError());
        answerJson(res, answer.status, answer.body);
      },
    };
    this.#inFlight.add(entry);
    // A client that goes away stops the request (the flow still lets decode take the KV).
    res.on('close', () => {
      if (!res.writableFinished) context.stopGenerating();
    });
    const observe = this.metrics.listener();
    let routed: FlowEventOf<'routed'> | undefined;
    let finished: FlowEventOf<'finished'> | undefined;
    const tap = this.#options.onEvent;
    const onEvent = (event: FlowEvent) => {
      observe(event);
      if (tap !== undefined) {
        try {
          tap(event);
        } catch (error) {
          this.#logger.warn({ err: error }, 'The onEvent tap threw; ignored');
        }
      }
      if (event.type === 'routed') routed = event;
      else if (event.type === 'finished') finished = event;
    };
    try {
      let stream: ResponseStream<EngineItem>;
      try {
        stream = await disaggregate({
          request: body,
          context,
          prefill: this.#engine,
          decode: this.#engine,
          connector: this.#connector,
          prefillWorkers: this.prefillWorkers,
          decodeWorkers: this.decodeWorkers,
          onEvent,
          logger: this.#logger,
          ...(this.#options.deadlines === undefined ? {} : { deadlines: this.#options.deadlines }),
          ...(this.#options.cleanupBudgetMs === undefined ? {} : { cleanupBudgetMs: this.#options.cleanupBudgetMs }),
        });
      } catch (error) {
        this.#noteUnreachable(error, routed);
        setRouteHeaders(res, routed);
        const answer = errorAnswer(error, legOf(error));
        answerJson(res, answer.status, answer.body);
        return;
      }
      setRouteHeaders(res, routed);
      const writer = new OpenAIWriter(route, body);
      if (body.stream === true) await this.#relay(stream, res, writer, entry, routed);
      else await this.#whole(stream, res, writer, routed);
    } finally {
      this.#inFlight.delete(entry);
      this.#logger.info(
        {
          requestId,
          route,
          strategy: routed === undefined ? undefined : STRATEGY_HEADER[routed.strategy],
          prefillWorker: (routed?.prefillWorker as { url?: string } | undefined)?.url,
          decodeWorker: (routed?.decodeWorker as { url?: string } | undefined)?.url,
          outcome: finished?.outcome,
          leg: finished?.leg,
          status: res.statusCode,
          durationMs: Math.round(performance.now() - started),
        },
        'request finished',
      );
    }
  }

  /** Streams items to the client as SSE, no faster than it reads. */
  async #relay(
    stream: ResponseStream<EngineItem>,
    res: ServerResponse,
    writer: OpenAIWriter,
    entry: InFlight,
    routed: FlowEventOf<'routed'> | undefined,
  ): Promise<void> {
    const iterator = stream[Symbol.asyncIterator]();
    let started = false;
    let lastWrite: number | undefined;
    const start = () => {
      started = true;
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        connection: 'keep-alive',
      });
    };
    const fail = (error: unknown) => {
      this.#noteUnreachable(error, routed);
      const answer = errorAnswer(error, legOf(error));
      if (res.writableEnded || res.destroyed) return;
      if (!started) answerJson(res, answer.status, answer.body);
      else res.end(`event: error\ndata: ${JSON.stringify(answer.body)}\n\n`);
    };
    entry.shutdown = () => {
      entry.context.stopGenerating();
      fail(new ShutdownError());
    };
    try {
      for (;;) {
        let step: IteratorResult<EngineItem>;
        try {
          step = await iterator.next();
        } catch (error) {
          fail(error);
          return;
        }
        if (res.writableEnded || res.destroyed) return;
        if (step.done === true) break;
        const error = Annotated.err(step.value);
        if (error !== undefined) {
          fail(error);
          return;
        }
        const data = writer.chunk(step.value);
        if (data === undefined) continue;
        if (!started) start();
        const now = performance.now();
        if (lastWrite !== undefined) this.metrics.interToken((now - lastWrite) / 1000);
        lastWrite = now;
        if (!res.write(`data: ${data}\n\n`) && !(await this.#drained(res))) {
          // The client has not read for too long: give the request up rather than buffer.
          entry.context.stopGenerating();
          res.destroy();
          return;
        }
      }
      if (!started) start();
      const usage = writer.usageChunk();
      if (usage !== undefined) res.write(`data: ${usage}\n\n`);
      res.end('data: [DONE]\n\n');
    } finally {
      closeQuietly(iterator);
    }
  }

  /** Collects a non-streamed request's items into one OpenAI response. */
  async #whole(
    stream: ResponseStream<EngineItem>,
    res: ServerResponse,
    writer: OpenAIWriter,
    routed: FlowEventOf<'routed'> | undefined,
  ): Promise<void> {
    try {
      for await (const item of stream) {
        const error = Annotated.err(item);
        if (error !== undefined) throw error;
        writer.add(item);
      }
    } catch (error) {
      this.#noteUnreachable(error, routed);
      const answer = errorAnswer(error, legOf(error));
      if (!res.writableEnded) answerJson(res, answer.status, answer.body);
      return;
    }
    if (!res.writableEnded) answerJson(res, 200, writer.whole());
  }

  /** Resolves true once the client has read what was buffered, false if it did not within the limit. */
  #drained(res: ServerResponse): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (drained: boolean) => {
        clearTimeout(timer);
        res.off('drain', onDrain);
        res.off('close', onClose);
        resolve(drained);
      };
      const onDrain = () => done(true);
      const onClose = () => done(false);
      const timer = setTimeout(() => done(false), this.#options.slowClientTimeoutMs ?? 30_000);
      res.on('drain', onDrain);
      res.on('close', onClose);
    });
  }

  /** A worker a request could not reach leaves the rotation until a probe finds it again. */
  #noteUnreachable(error: unknown, routed: FlowEventOf<'routed'> | undefined): void {
    const upstream = findCause(error, UpstreamError.is);
    if (upstream?.kind !== 'connection') return;
    for (const [role, worker] of [
      ['prefill', routed?.prefillWorker],
      ['decode', routed?.decodeWorker],
    ] as const) {
      const candidate = worker as { url?: string } | undefined;
      if (candidate?.url !== undefined && upstream.url.startsWith(candidate.url.replace(/\/$/, ''))) {
        this.#health.failed(role, candidate as { url: string });
      }
    }
  }
}

class RequestError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** The proxy stopped before this request ended. */
class ShutdownError extends Error {
  override readonly name = 'ShutdownError';
  readonly status = 503;
  constructor() {
    super('The proxy is shutting down; the request was ended before it finished');
  }
}

/** Resolves once the response has been sent or its connection closed. */
function finished(res: ServerResponse): Promise<void> {
  if (res.writableFinished || res.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    res.once('finish', () => resolve());
    res.once('close', () => resolve());
  });
}

function setRouteHeaders(res: ServerResponse, routed: FlowEventOf<'routed'> | undefined): void {
  if (routed === undefined || res.headersSent) return;
  res.setHeader('x-disagg-strategy', STRATEGY_HEADER[routed.strategy]);
  const prefill = (routed.prefillWorker as { url?: string } | undefined)?.url;
  const decode = (routed.decodeWorker as { url?: string } | undefined)?.url;
  if (prefill !== undefined) res.setHeader('x-disagg-prefill-worker', prefill);
  if (decode !== undefined) res.setHeader('x-disagg-decode-worker', decode);
}

function headerValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  return first === undefined || first === '' ? undefined : first;
}

function errorBody(status: number, type: string, message: string) {
  return { error: { message, type, code: status, param: null } };
}

function answerJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        // Read the rest into nothing, so that the 413 can still be answered on this connection.
        req.off('data', onData);
        req.resume();
        chunks.length = 0;
        reject(new RequestError(413, `The request body is larger than ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
