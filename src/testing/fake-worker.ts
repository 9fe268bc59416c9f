import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { ENGINE_NAMES, type EngineName, engineOf } from '../engines/registry.js';
import { fakeSglang } from '../engines/sglang/fake.js';
import { fakeTrtllm } from '../engines/trtllm/fake.js';
import { fakeVllm } from '../engines/vllm/fake.js';
import { BatchSeats } from '../fakes/fake-batch.js';
import { answerHandlerError, endpointAt, POOLING_PATHS, poolingAnswer } from '../fakes/fake-formats.js';
import { FakeKvCache, fakePromptTokenIds } from '../fakes/fake-kv-cache.js';
import { FakeKvPublisher } from '../fakes/fake-kv-publisher.js';
import { loadMetricsText, modelList } from '../fakes/fake-metrics.js';
import { type FakeAnswer, promptTokens } from '../fakes/fake-plan.js';
import { FakePrefixCache } from '../fakes/fake-prefix-cache.js';
import { type FakeProtocol, servedPaths, type WorkerSide } from '../fakes/fake-protocol.js';
import { FakeSimulation, type SimulatedDecode } from '../fakes/fake-simulation.js';
import type { FakeRequest, FakeWorkerOptions } from '../fakes/fake-types.js';
import { KvLedger } from '../fakes/kv-ledger.js';
import { parseJson } from '../http/json.js';
import { answerJson, headerValue, pathOf, readBody } from '../http/node-server.js';
import { describeValue } from '../util/describe-value.js';
import { answerDecode } from './fake-decode.js';
import { faultFor, type Refusal, refuseBudget, refuseContext, requiredField } from './fake-faults.js';

export type { FakeRequest, FakeWorkerOptions, Fault } from '../fakes/fake-types.js';

/** A running fake worker. */
export interface FakeWorker {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  readonly role: 'prefill' | 'decode';
  readonly protocol: EngineName;
  /** Where decode workers meet this prefill worker (SGLang): this server. */
  readonly bootstrapHost: string;
  readonly bootstrapPort: number;
  /** The KV this worker committed as a prefill worker, and what became of it. */
  readonly ledger: KvLedger;
  /** Every generation request it received, in order. */
  readonly requests: FakeRequest[];
  /** How many TCP connections it has accepted (a pooled client reuses them). */
  readonly connections: number;
  /** Changes the fault of later requests (undefined for none). */
  setFault(fault: FakeWorkerOptions['fault']): void;
  /** Makes `GET /health` answer 503 (`false`) or 200 (`true`, the start). */
  setHealthy(healthy: boolean): void;
  /**
   * Its KV cache in token blocks and the publisher of its KV events (`kvCache.publisher.endpoint`,
   * `.replayEndpoint`), when started with `kvCache`.
   */
  readonly kvCache: FakeKvCache | undefined;
  /** Its simulated engine and that engine's clock, when started with `simulated`. */
  readonly simulation: FakeSimulation | undefined;
  /** Stops accepting, ends every open connection and pending wait, and resolves once closed. */
  close(): Promise<void>;
}

const HOST = '127.0.0.1';

/**
 * Starts a fake vLLM or SGLang worker on loopback (a random port) speaking the protocol subset
 * a disaggregating router uses, with a ledger of KV handoffs and injectable faults, so that a
 * router (or the library's own tests) can exercise every failure without a GPU.
 *
 * - vLLM (`POST /v1/completions`, `/v1/chat/completions`): a prefill call with
 *   `kv_transfer_params.do_remote_decode` computes one token, commits KV and answers JSON with
 *   top-level `kv_transfer_params` naming itself; a decode call with those parameters takes the
 *   KV from that prefill worker (over HTTP, as NIXL would) and streams `data:` chunks ending
 *   with `data: [DONE]`.
 * - SGLang (the same routes plus `/generate`): a prefill call with `bootstrap_room` commits KV
 *   and waits for the decode worker of that room to connect to its bootstrap server (this
 *   worker's port), then answers; a decode call connects to `bootstrap_host:bootstrap_port`
 *   for its room, then streams.
 * - Tokens are deterministic (`tok0 tok1 ...`) at a configurable pace; `GET /health` and
 *   `GET /v1/models` answer too.
 *
 * @example
 * const prefill = await startFakeWorker({ role: 'prefill', protocol: 'vllm' });
 * const decode = await startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 4 });
 * // ... run requests against prefill.url and decode.url ...
 * expect(prefill.ledger.outstanding()).toEqual([]);
 * await Promise.all([prefill.close(), decode.close()]);
 */
export async function startFakeWorker(options: FakeWorkerOptions): Promise<FakeWorker> {
  if (options?.role !== 'prefill' && options?.role !== 'decode') {
    throw new TypeError(`startFakeWorker expects role 'prefill' or 'decode', got ${describeValue(options?.role)}`);
  }
  if (!(ENGINE_NAMES as readonly unknown[]).includes(options.protocol)) {
    // Every engine of the registry, named as the message always has: 'vllm', 'sglang' or 'trtllm'.
    const names = ENGINE_NAMES.map((name) => `'${name}'`);
    throw new TypeError(
      `startFakeWorker expects protocol ${names.slice(0, -1).join(', ')} or ${names.at(-1)}, got ${describeValue(options.protocol)}`,
    );
  }
  const publisher =
    options.kvCache === undefined
      ? undefined
      : await FakeKvPublisher.start({
          ...(options.kvCache.encoding === undefined ? {} : { encoding: options.kvCache.encoding }),
          ...(options.kvCache.replayForm === undefined ? {} : { replayForm: options.kvCache.replayForm }),
          ...(options.kvCache.topic === undefined ? {} : { topic: options.kvCache.topic }),
          host: options.host ?? HOST,
          port: options.kvCache.port,
          replayPort: options.kvCache.replayPort,
        });
  const worker = new FakeWorkerServer(options, publisher);
  try {
    await worker.listen();
  } catch (error) {
    publisher?.close();
    throw error;
  }
  return worker;
}

// One fake per engine of the registry: an engine added there without its fake fails to compile.
const PROTOCOLS: Record<EngineName, FakeProtocol> = {
  vllm: fakeVllm,
  sglang: fakeSglang,
  trtllm: fakeTrtllm,
};

/**
 * The HTTP side of a fake worker, common to every engine: the dispatch of a request (its
 * refusals and faults are `fake-faults`', a decode call's answer `fake-decode`'s), request
 * records, `/metrics`, timers and closing. What differs between the engines is its
 * {@link FakeProtocol}.
 */
class FakeWorkerServer implements FakeWorker, WorkerSide {
  readonly role: 'prefill' | 'decode';
  readonly protocol: EngineName;
  readonly host: string;
  readonly bootstrapHost: string;
  readonly ledger = new KvLedger({ onChange: (handoff, owner) => this.simulation?.handoff(handoff, owner) });
  readonly requests: FakeRequest[] = [];
  readonly options: FakeWorkerOptions;
  readonly engineId = randomUUID();
  readonly #engine: FakeProtocol;
  /** The paths it serves: every endpoint's but those its engine does not serve. */
  readonly #routes: ReadonlySet<string>;
  readonly #server = createServer((req, res) => {
    this.#handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) this.answerError(res, 500, `fake worker failed: ${String(error)}`);
      else res.destroy();
    });
  });
  readonly #sockets = new Set<Socket>();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #cancels = new Set<() => void>();
  readonly #prefixCache: FakePrefixCache | undefined;
  readonly kvCache: FakeKvCache | undefined;
  readonly simulation: FakeSimulation | undefined;
  readonly simulated: SimulatedDecode | undefined;
  /** When the prefills taken so far are computed (with a prefix cache: one at a time). */
  #computingUntil = 0;
  #fault: FakeWorkerOptions['fault'];
  #healthy = true;
  #port = 0;
  #connections = 0;
  #blocks = 0;
  /** Generation requests under way (from their arrival until their answer ends). */
  #running = 0;
  /** Prefills waiting for the ones before them to be computed. */
  #waiting = 0;
  /** A decode's batch (`maxRunning`), and those waiting for a seat in it. */
  readonly #batch: BatchSeats;

  constructor(options: FakeWorkerOptions, publisher?: FakeKvPublisher) {
    this.options = options;
    this.#batch = new BatchSeats(options.maxRunning);
    this.host = options.host ?? HOST;
    this.bootstrapHost = this.host;
    this.role = options.role;
    this.protocol = options.protocol;
    this.#engine = PROTOCOLS[options.protocol];
    this.#routes = servedPaths(this.#engine);
    this.#fault = options.fault;
    this.#prefixCache = options.prefixCache === undefined ? undefined : new FakePrefixCache(options.prefixCache);
    this.kvCache = publisher === undefined ? undefined : new FakeKvCache(publisher, options.kvCache);
    this.simulation = options.simulated === undefined ? undefined : new FakeSimulation(options.simulated, publisher);
    this.simulated =
      this.simulation === undefined ? undefined : this.simulation.decodeSide((record) => this.#promptIds(record));
    this.#server.on('connection', (socket) => {
      this.#connections++;
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
  }

  get url(): string {
    return `http://${this.host}:${this.#port}`;
  }

  get port(): number {
    return this.#port;
  }

  get connections(): number {
    return this.#connections;
  }

  get bootstrapPort(): number {
    return this.#port;
  }

  setFault(fault: FakeWorkerOptions['fault']): void {
    this.#fault = fault;
  }

  setHealthy(healthy: boolean): void {
    this.#healthy = healthy;
  }

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.options.port ?? 0, this.host, () => {
        this.#port = (this.#server.address() as AddressInfo).port;
        resolve();
      });
    });
  }

  close(): Promise<void> {
    this.simulation?.close();
    this.kvCache?.publisher.close();
    void this.kvCache?.close();
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const cancel of this.#cancels) cancel();
    this.#cancels.clear();
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      for (const socket of this.#sockets) socket.destroy();
    });
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = pathOf(req);
    if (req.method === 'GET' && path === '/health') {
      return this.#healthy ? this.answerJson(res, 200, { status: 'ok' }) : this.answerError(res, 503, 'unhealthy');
    }
    if (
      this.options.apiKey !== undefined &&
      !path.startsWith('/fake/') &&
      req.headers.authorization !== `Bearer ${this.options.apiKey}`
    ) {
      // As vLLM started with --api-key: its API needs the key (/health does not, nor the KV
      // transfer between workers, which is not the HTTP API).
      return this.answerJson(res, 401, { error: 'Unauthorized' });
    }
    if (req.method === 'GET' && path === '/metrics') return this.#answerMetrics(res);
    if (req.method === 'GET' && path === '/v1/models') {
      return this.answerJson(
        res,
        200,
        modelList(this.options.model ?? 'fake-model', this.#maxModelLen(), this.options.lora),
      );
    }
    if (path.startsWith('/v1/responses/') && this.#routes.has('/v1/responses')) {
      // vLLM without VLLM_ENABLE_RESPONSES_API_STORE keeps no response: its GET and cancel of
      // one answer 404 (serving.py); recorded, so that a test sees which worker was asked.
      this.#record(req, res, path, {}).completed = true;
      const id = decodeURIComponent(path.slice('/v1/responses/'.length).replace(/\/cancel$/, ''));
      return this.answerJson(res, 404, {
        error: {
          message: `Response with id '${id}' not found.`,
          type: 'invalid_request_error',
          param: 'response_id',
          code: 404,
        },
      });
    }
    if (req.method !== 'POST') return this.answerError(res, 404, `no route ${req.method} ${path}`);
    const text = await readBody(req);
    let body: Record<string, unknown>;
    try {
      body = parseJson(text) as Record<string, unknown>;
    } catch {
      return this.answerError(res, 400, 'the body is not JSON');
    }
    const endpoint = this.#engine.endpoints[path];
    if (endpoint !== undefined) return endpoint(this, res, body);
    if (!this.#routes.has(path)) return this.answerError(res, 404, `no route POST ${path}`);
    if (POOLING_PATHS.includes(path)) return this.#pool(req, res, path, body);
    // Refused as the body is read (field checks), before the engine's request handler: in
    // OpenAI's shape on every route; the engine's own refusals in its route's shape.
    const missing = requiredField(path, body);
    if (missing !== undefined) return this.answerError(res, 400, missing);
    const refused = this.#engine.refuse?.(path, body);
    if (refused !== undefined) return answerHandlerError(this, res, path, 400, refused);
    const invalid = refuseBudget(path, body);
    if (invalid !== undefined) return this.answerError(res, 400, invalid);
    const record = this.#record(req, res, path, body);
    this.#running++;
    res.on('close', () => {
      this.#running--;
    });
    const fault = faultFor(this.#fault, record);
    const prefill = this.role === 'prefill' && this.#engine.isPrefillCall(body);
    if (fault?.type === 'status') {
      const message = fault.message ?? `injected ${fault.status}`;
      if (fault.stage === 'front') return this.answerError(res, fault.status, message);
      return this.#refuse(res, record, prefill, { status: fault.status, message });
    }
    // The engine's request handler: its own refusals (vLLM frees a handoff's KV on them).
    const refusal = this.#engine.handlerRefusal?.(this, body) ?? refuseContext(path, body, this.#maxModelLen());
    if (refusal !== undefined) return this.#refuse(res, record, prefill, refusal);
    if (fault?.type === 'hang') {
      if (!prefill) res.on('close', () => void this.#engine.gaveUp?.(this, body, 'aborted'));
      return;
    }
    if (prefill) {
      // Simulated, its KV goes once its answer is over and the decode side has it.
      if (this.simulation !== undefined) res.on('close', () => this.simulation?.answered(record));
      return this.#engine.prefill(this, res, record, fault);
    }
    // Past its batch, a decode waits in the engine's queue before anything of it happens.
    if (!(await this.#batch.seat(res))) {
      // As vLLM frees the KV a request still waiting in its queue would have pulled.
      void this.#engine.gaveUp?.(this, body, 'aborted');
      return;
    }
    return answerDecode(this, this.#engine, res, record, fault);
  }

  /** A call as the tests read it: recorded, and marked aborted if its client leaves before the end. */
  #record(req: IncomingMessage, res: ServerResponse, path: string, body: Record<string, unknown>): FakeRequest {
    const record: FakeRequest = {
      path,
      headers: req.headers,
      body,
      requestId: headerValue(req.headers['x-request-id']),
      aborted: false,
      completed: false,
    };
    this.requests.push(record);
    res.on('close', () => {
      if (!record.completed) record.aborted = true;
    });
    return record;
  }

  /**
   * A pooling call (embeddings, a rerank, a score): recorded, its front faults applied (a
   * status, a hang), then answered whole as vLLM answers it.
   */
  #pool(req: IncomingMessage, res: ServerResponse, path: string, body: Record<string, unknown>): void {
    const record = this.#record(req, res, path, body);
    const fault = faultFor(this.#fault, record);
    if (fault?.type === 'status') {
      this.answerError(res, fault.status, fault.message ?? `injected ${fault.status}`);
      return;
    }
    if (fault?.type === 'hang') return;
    const answer = poolingAnswer(path, body, this.options.model ?? 'fake-model') as NonNullable<
      ReturnType<typeof poolingAnswer>
    >;
    record.completed = true;
    if (answer.status === 400) this.answerError(res, 400, answer.message);
    else this.answerJson(res, 200, answer.body);
  }

  /** An error answer from the engine's request handler; a decode call gives up its handoff first. */
  async #refuse(res: ServerResponse, record: FakeRequest, prefill: boolean, refusal: Refusal): Promise<void> {
    if (!prefill) await this.#engine.gaveUp?.(this, record.body, 'refused');
    answerHandlerError(this, res, record.path, refusal.status, refusal.message);
  }

  // WorkerSide: what the protocol modules use.

  answerFor(record: FakeRequest): FakeAnswer | undefined {
    return typeof this.options.answer === 'function' ? this.options.answer(record) : this.options.answer;
  }

  /**
   * Computes a prefill's prompt: with a prefix cache, waits for what is not cached and answers
   * the cached tokens; without one, waits `tokenIntervalMs` and answers undefined (the answer
   * then counts half the prompt as cached).
   */
  async computePrompt(record: FakeRequest): Promise<number | undefined> {
    if (this.simulation !== undefined) {
      return this.simulation.prefill(record, this.simulation.prompt(await this.#promptIds(record)));
    }
    if (this.kvCache !== undefined) {
      const { cachedTokens, computeMs } = await this.kvCache.compute(record.body, record.path);
      await this.#computeFor(computeMs);
      return cachedTokens;
    }
    if (this.#prefixCache === undefined) {
      await this.pause(this.options.tokenIntervalMs ?? 0);
      return undefined;
    }
    const { cachedTokens, computeMs } = this.#prefixCache.compute(
      record.body,
      promptTokens(record.body),
      endpointAt(record.path),
    );
    await this.#computeFor(computeMs);
    return cachedTokens;
  }

  /** The context it serves: `maxModelLen`, else its simulated engine's, else 4,096. */
  #maxModelLen(): number {
    return this.options.maxModelLen ?? this.simulation?.contextTokens ?? 4096;
  }

  /** A call's prompt token ids, as its engine has them (see `FakeKvCache.tokens`). */
  #promptIds(record: FakeRequest): Promise<number[]> | number[] {
    return this.kvCache?.tokens(record.body, record.path) ?? fakePromptTokenIds(record.body, record.path);
  }

  /** One prefill at a time, as an engine's prefill queue: a busy worker makes the next wait. */
  async #computeFor(computeMs: number): Promise<void> {
    const now = performance.now();
    const start = Math.max(now, this.#computingUntil);
    this.#computingUntil = start + computeMs;
    this.#waiting++;
    try {
      await this.pause(this.#computingUntil - now);
    } finally {
      this.#waiting--;
    }
  }

  /** `GET /metrics` as the engine names its load (vLLM's or SGLang's), in Prometheus text. */
  #answerMetrics(res: ServerResponse): void {
    const names = engineOf(this.protocol).loadMetrics;
    if (names === undefined) {
      this.answerError(res, 404, 'no route GET /metrics');
      return;
    }
    // Simulated, the engine's own queues; else the requests under way and the fake cache's fill.
    const load = this.simulation?.load() ?? {
      running: this.#running - this.#batch.waiting,
      waiting: this.#waiting + this.#batch.waiting,
      kvUsage: this.kvCache === undefined ? 0 : this.kvCache.size / this.kvCache.capacity,
    };
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(loadMetricsText(names, this.options.model ?? 'fake-model', load, this.options.lora));
  }

  nextBlocks(): number[] {
    return [this.#blocks++, this.#blocks++];
  }

  async untilDone<T>(res: ServerResponse, waiting: { promise: Promise<T | undefined>; cancel(): void }) {
    this.#cancels.add(waiting.cancel);
    const timer = this.#timer(this.options.bootstrapTimeoutMs ?? 30_000, waiting.cancel);
    const left = () => {
      if (!res.writableFinished) waiting.cancel();
    };
    // The response's close, not the request's: a request 'close's once its body is read.
    res.on('close', left);
    if (res.destroyed) waiting.cancel();
    try {
      return await waiting.promise;
    } finally {
      res.off('close', left);
      clearTimeout(timer);
      this.#timers.delete(timer);
      this.#cancels.delete(waiting.cancel);
    }
  }

  strandLater(key: string): void {
    const timeout = this.options.kvTimeoutMs ?? this.#engine.kvTimeoutMs ?? 60_000;
    this.#timer(timeout, () => this.ledger.strand(key));
  }

  pause(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => this.#timer(ms, resolve));
  }

  answerJson(res: ServerResponse, status: number, body: unknown): void {
    answerJson(res, status, body);
  }

  answerError(res: ServerResponse, status: number, message: string): void {
    answerJson(res, status, {
      object: 'error',
      error: { message, type: status >= 500 ? 'InternalServerError' : 'BadRequestError', code: status },
    });
  }

  #timer(ms: number, run: () => void): NodeJS.Timeout {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      run();
    }, ms);
    timer.unref();
    this.#timers.add(timer);
    return timer;
  }
}
