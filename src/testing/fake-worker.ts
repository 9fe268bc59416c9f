import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { request } from 'undici';
import { parseJson, stringifyJson } from '../http/json.js';
import { describeValue } from '../util/describe-value.js';
import { KvLedger } from './kv-ledger.js';

/**
 * What can go wrong, per request or for every request of a worker:
 * - `status`: answer with this HTTP status (and an OpenAI-style error body) before anything else;
 * - `hang`: never answer;
 * - `error-event`: stream `afterTokens` tokens, then an SSE `error` event, then end;
 * - `reset`: stream `afterTokens` tokens, then break the connection;
 * - `slow`: stream with `tokenIntervalMs` between tokens;
 * - `never-bootstrap`: SGLang decode never connects to prefill, a prefill never answers
 *   after committing its KV; vLLM decode never pulls the KV (and never answers);
 * - `late-failure`: a prefill fails after its KV was taken (SGLang; `afterMs` later) or after
 *   computing (vLLM);
 * - `no-claim`: decode streams without taking the KV, which stays on the prefill worker.
 */
export type Fault =
  | { type: 'status'; status: number; message?: string }
  | { type: 'hang' }
  | { type: 'error-event'; afterTokens?: number; message?: string }
  | { type: 'reset'; afterTokens?: number }
  | { type: 'slow'; tokenIntervalMs: number }
  | { type: 'never-bootstrap' }
  | { type: 'late-failure'; message?: string; afterMs?: number }
  | { type: 'no-claim' };

/** A request a fake worker received. */
export interface FakeRequest {
  path: string;
  headers: IncomingHttpHeaders;
  /** The JSON body, with integers above 2^53 - 1 as `bigint`s. */
  body: Record<string, unknown>;
  /** The `x-request-id` header. */
  requestId: string | undefined;
  /** The client went away before the answer was complete. */
  aborted: boolean;
  /** The answer was sent to its end. */
  completed: boolean;
}

/** Options of {@link startFakeWorker}. */
export interface FakeWorkerOptions {
  role: 'prefill' | 'decode';
  protocol: 'vllm' | 'sglang';
  /** Tokens a decode answers at most (fewer if the request's max_tokens says so); 8 by default. */
  tokens?: number;
  /** Milliseconds between streamed tokens; 0 by default. */
  tokenIntervalMs?: number;
  /** A fault for every request, or a function choosing one per request. */
  fault?: Fault | ((request: FakeRequest) => Fault | undefined);
  /** How long a prefill holds committed KV before freeing it as stranded; 60,000 ms by default. */
  kvTimeoutMs?: number;
  /**
   * SGLang prefill: how long the KV transfer takes once decode has connected, before prefill
   * answers (meanwhile decode streams); 0 by default.
   */
  transferMs?: number;
  /** How long a rendezvous waits for its peer (SGLang); 30,000 ms by default. */
  bootstrapTimeoutMs?: number;
  /** The model id it serves (`/v1/models`); `fake-model` by default. */
  model?: string;
}

/** A running fake worker. */
export interface FakeWorker {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  readonly role: 'prefill' | 'decode';
  readonly protocol: 'vllm' | 'sglang';
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
  if (options.protocol !== 'vllm' && options.protocol !== 'sglang') {
    throw new TypeError(`startFakeWorker expects protocol 'vllm' or 'sglang', got ${describeValue(options.protocol)}`);
  }
  const worker = new Worker(options);
  await worker.listen();
  return worker;
}

class Worker implements FakeWorker {
  readonly role: 'prefill' | 'decode';
  readonly protocol: 'vllm' | 'sglang';
  readonly bootstrapHost = HOST;
  readonly ledger = new KvLedger();
  readonly requests: FakeRequest[] = [];
  readonly #options: FakeWorkerOptions;
  readonly #engineId = randomUUID();
  readonly #server = createServer((req, res) => {
    this.#handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) answerError(res, 500, `fake worker failed: ${String(error)}`);
      else res.destroy();
    });
  });
  readonly #sockets = new Set<Socket>();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #cancels = new Set<() => void>();
  #fault: FakeWorkerOptions['fault'];
  #healthy = true;
  #port = 0;
  #connections = 0;
  #blocks = 0;

  constructor(options: FakeWorkerOptions) {
    this.#options = options;
    this.role = options.role;
    this.protocol = options.protocol;
    this.#fault = options.fault;
    this.#server.on('connection', (socket) => {
      this.#connections++;
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
  }

  get url(): string {
    return `http://${HOST}:${this.#port}`;
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
      this.#server.listen(0, HOST, () => {
        this.#port = (this.#server.address() as AddressInfo).port;
        resolve();
      });
    });
  }

  close(): Promise<void> {
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
    const path = (req.url ?? '/').split('?')[0] as string;
    if (req.method === 'GET' && path === '/health') {
      return this.#healthy ? answerJson(res, 200, { status: 'ok' }) : answerError(res, 503, 'unhealthy');
    }
    if (req.method === 'GET' && path === '/v1/models') {
      const id = this.#options.model ?? 'fake-model';
      return answerJson(res, 200, { object: 'list', data: [{ id, object: 'model', owned_by: 'disagg-fake' }] });
    }
    if (req.method !== 'POST') return answerError(res, 404, `no route ${req.method} ${path}`);
    const text = await readBody(req);
    let body: Record<string, unknown>;
    try {
      body = parseJson(text) as Record<string, unknown>;
    } catch {
      return answerError(res, 400, 'the body is not JSON');
    }
    if (path === '/fake/kv/claim') return this.#claim(res, String(body.key));
    if (path === '/fake/bootstrap') return this.#bootstrap(res, String(body.room));
    if (!['/v1/completions', '/v1/chat/completions', '/generate'].includes(path)) {
      return answerError(res, 404, `no route POST ${path}`);
    }
    if (path === '/generate' && this.protocol !== 'sglang') return answerError(res, 404, 'no route POST /generate');
    const record: FakeRequest = {
      path,
      headers: req.headers,
      body,
      requestId: header(req.headers['x-request-id']),
      aborted: false,
      completed: false,
    };
    this.requests.push(record);
    res.on('close', () => {
      if (!record.completed) record.aborted = true;
    });
    const fault = typeof this.#fault === 'function' ? this.#fault(record) : this.#fault;
    if (fault?.type === 'status') return answerError(res, fault.status, fault.message ?? `injected ${fault.status}`);
    if (fault?.type === 'hang') return;
    if (this.role === 'prefill' && this.#isPrefillCall(body)) return this.#prefill(res, record, fault);
    return this.#decode(res, record, fault);
  }

  #isPrefillCall(body: Record<string, unknown>): boolean {
    if (this.protocol === 'sglang') return body.bootstrap_room !== undefined;
    const params = body.kv_transfer_params as { do_remote_decode?: unknown } | undefined;
    return params?.do_remote_decode === true;
  }

  /** One token computed, KV committed for decode; the answer names where to take it. */
  async #prefill(res: ServerResponse, record: FakeRequest, fault: Fault | undefined) {
    const requestId = record.requestId ?? randomUUID();
    await this.#pause(this.#options.tokenIntervalMs ?? 0);
    if (this.protocol === 'vllm') {
      if (fault?.type === 'late-failure')
        return answerError(res, 500, fault.message ?? 'prefill failed after computing');
      const blocks = [this.#blocks++, this.#blocks++];
      const params = {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_engine_id: this.#engineId,
        remote_block_ids: blocks,
        remote_host: HOST,
        remote_port: this.#port,
        remote_request_id: requestId,
        tp_size: 1,
      };
      this.ledger.commit(kvKey(this.#engineId, blocks), requestId);
      this.#strandLater(kvKey(this.#engineId, blocks));
      record.completed = true;
      return answerJson(res, 200, { ...oneTokenAnswer(record, this.#options.model), kv_transfer_params: params });
    }
    // SGLang: a request aborted while it computed is dropped (nothing committed); otherwise
    // commit, then wait for the decode worker of this room to take it.
    if (res.destroyed) return;
    const room = String(record.body.bootstrap_room);
    this.ledger.commit(room, requestId);
    if (fault?.type === 'never-bootstrap') return; // never answers
    const taken = await this.#waitForClaim(res, room);
    if (!taken) {
      // Timed out, or the router aborted this leg: the KV is freed unclaimed at once.
      this.ledger.strand(room);
      if (!res.destroyed) answerError(res, 500, `bootstrap room ${room} timed out waiting for decode`);
      return;
    }
    await this.#pause(this.#options.transferMs ?? 0);
    if (fault?.type === 'late-failure') {
      await this.#pause(fault.afterMs ?? 0);
      return answerError(res, 500, fault.message ?? 'KV transfer aborted after the bootstrap');
    }
    record.completed = true;
    answerJson(res, 200, oneTokenAnswer(record, this.#options.model));
  }

  /** Takes the KV (vLLM: from the prefill worker named in the body; SGLang: at its bootstrap), then streams. */
  async #decode(res: ServerResponse, record: FakeRequest, fault: Fault | undefined) {
    const { body } = record;
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    if (fault?.type === 'never-bootstrap') return; // never takes the KV, never answers
    if (fault?.type !== 'no-claim') {
      const failure = await this.#takeKv(body, abort.signal);
      if (failure !== undefined) {
        if (!res.destroyed) answerError(res, 500, failure);
        return;
      }
    }
    const sampling = body.sampling_params as { max_new_tokens?: unknown } | undefined;
    const limit = Number(
      body.max_tokens ?? body.max_completion_tokens ?? sampling?.max_new_tokens ?? Number.POSITIVE_INFINITY,
    );
    const count = Math.max(0, Math.min(this.#options.tokens ?? 8, limit));
    const finish = count === limit ? 'length' : 'stop';
    const interval = fault?.type === 'slow' ? fault.tokenIntervalMs : (this.#options.tokenIntervalMs ?? 0);
    const format = formatFor(record.path, this.#options.model);
    if (body.stream !== true) {
      await this.#pause(interval * count);
      if (res.destroyed) return;
      record.completed = true;
      return answerJson(res, 200, format.whole(count, finish, usageOf(body, count)));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    // As vLLM does for chat: a first chunk with the role and no text.
    const opening = format.opening();
    if (opening !== undefined) res.write(`data: ${stringifyJson(opening)}\n\n`);
    const breakAt = fault?.type === 'error-event' || fault?.type === 'reset' ? (fault.afterTokens ?? 1) : -1;
    for (let i = 0; i < count; i++) {
      if (i === breakAt) return this.#breakStream(res, fault as Fault);
      await this.#pause(interval);
      if (res.destroyed) return;
      // As a real server does: no faster than the client reads.
      if (!res.write(`data: ${stringifyJson(format.chunk(i, null))}\n\n`) && !(await drained(res))) return;
    }
    if (breakAt >= count) return this.#breakStream(res, fault as Fault);
    res.write(`data: ${stringifyJson(format.chunk(count, finish))}\n\n`);
    // As vLLM does: the usage in a chunk of its own, with no choices.
    if (wantsUsage(body)) res.write(`data: ${stringifyJson(format.usage(usageOf(body, count)))}\n\n`);
    res.write('data: [DONE]\n\n');
    record.completed = true;
    res.end();
  }

  #breakStream(res: ServerResponse, fault: Fault): void {
    if (fault.type === 'reset') {
      // Once what was written has left, so that the client sees the tokens, then the break.
      this.#timer(20, () => res.destroy());
      return;
    }
    const message = (fault as { message?: string }).message ?? 'injected failure mid-stream';
    res.write(
      `event: error\ndata: ${JSON.stringify({ error: { message, type: 'InternalServerError', code: 500 } })}\n\n`,
    );
    res.end();
  }

  /** Takes the KV prefill committed: undefined when taken, else why not. */
  async #takeKv(body: Record<string, unknown>, signal: AbortSignal): Promise<string | undefined> {
    let target: string;
    let path: string;
    let payload: Record<string, unknown>;
    if (this.protocol === 'vllm') {
      const params = body.kv_transfer_params as Record<string, unknown> | undefined;
      if (params?.do_remote_prefill !== true) return undefined; // an aggregated request: nothing to take
      target = `http://${String(params.remote_host)}:${String(params.remote_port)}`;
      path = '/fake/kv/claim';
      payload = { key: kvKey(String(params.remote_engine_id), params.remote_block_ids as number[]) };
    } else {
      if (body.bootstrap_room === undefined) return undefined;
      target = `http://${String(body.bootstrap_host)}:${String(body.bootstrap_port)}`;
      path = '/fake/bootstrap';
      payload = { room: String(body.bootstrap_room) };
    }
    try {
      const answer = await request(`${target}${path}`, { method: 'POST', body: JSON.stringify(payload), signal });
      const text = await answer.body.text();
      return answer.statusCode === 200 ? undefined : `KV transfer failed: ${text}`;
    } catch (error) {
      return `KV transfer failed: ${String(error)}`;
    }
  }

  #claim(res: ServerResponse, key: string): void {
    if (this.ledger.claim(key)) answerJson(res, 200, { claimed: key });
    else answerError(res, 404, `no KV held for ${key}`);
  }

  /**
   * SGLang's rendezvous: waits for prefill to commit the room, then takes it. A decode leg
   * that goes away meanwhile (its connection closes) leaves the rendezvous and takes nothing.
   */
  async #bootstrap(res: ServerResponse, room: string): Promise<void> {
    const handoff = await this.#untilDone(res, this.ledger.whenCommitted(room));
    if (handoff !== undefined && !res.destroyed && this.ledger.claim(room)) answerJson(res, 200, { claimed: room });
    else if (!res.destroyed) answerError(res, 404, `no prefill committed room ${room}`);
  }

  /** Whether decode claimed `room` before the bootstrap timeout, and while prefill's own caller stayed. */
  async #waitForClaim(res: ServerResponse, room: string): Promise<boolean> {
    return (await this.#untilDone(res, this.ledger.whenReleased(room))) === 'claimed';
  }

  /**
   * A ledger wait, cut short (undefined) by the bootstrap timeout, by the close of the
   * worker, or by `res` closing before it was answered (the caller went away).
   */
  async #untilDone<T>(res: ServerResponse, waiting: { promise: Promise<T | undefined>; cancel(): void }) {
    this.#cancels.add(waiting.cancel);
    const timer = this.#timer(this.#options.bootstrapTimeoutMs ?? 30_000, waiting.cancel);
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

  #strandLater(key: string): void {
    this.#timer(this.#options.kvTimeoutMs ?? 60_000, () => this.ledger.strand(key));
  }

  #pause(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => this.#timer(ms, resolve));
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

/** Resolves true when the response can take more, false when it closed first. */
function drained(res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

function kvKey(engineId: string, blocks: unknown): string {
  return `${engineId}/${Array.isArray(blocks) ? blocks.join(',') : String(blocks)}`;
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function answerJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return;
  const text = stringifyJson(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function answerError(res: ServerResponse, status: number, message: string): void {
  answerJson(res, status, {
    object: 'error',
    error: { message, type: status >= 500 ? 'InternalServerError' : 'BadRequestError', code: status },
  });
}

function wantsUsage(body: Record<string, unknown>): boolean {
  return (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
}

function promptTokens(body: Record<string, unknown>): number {
  const text = typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.messages ?? body.text ?? '');
  return Math.max(1, Math.ceil(text.length / 4));
}

function usageOf(body: Record<string, unknown>, completion: number) {
  const prompt = promptTokens(body);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** The one-token answer of a prefill call, in the shape of its route. */
function oneTokenAnswer(record: FakeRequest, model: string | undefined) {
  const prompt = promptTokens(record.body);
  const usage = {
    prompt_tokens: prompt,
    completion_tokens: 1,
    total_tokens: prompt + 1,
    prompt_tokens_details: { cached_tokens: Math.floor(prompt / 2) },
  };
  return formatFor(record.path, model).whole(1, 'length', usage);
}

interface Format {
  opening(): object | undefined;
  chunk(index: number, finish: string | null, usage?: object): object;
  usage(usage: object): object;
  whole(count: number, finish: string, usage: object): object;
}

const text = (count: number) => Array.from({ length: count }, (_, i) => `tok${i} `).join('');

/** The JSON shapes of each route: OpenAI completions, chat completions, SGLang's /generate. */
function formatFor(path: string, model = 'fake-model'): Format {
  const id = `fake-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  if (path === '/v1/chat/completions') {
    return {
      opening: () => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
      }),
      chunk: (index, finish, usage) => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, delta: finish === null ? { content: `tok${index} ` } : {}, finish_reason: finish }],
        ...(usage === undefined ? {} : { usage }),
      }),
      usage: (usage) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage }),
      whole: (count, finish, usage) => ({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: text(count) }, finish_reason: finish }],
        usage,
      }),
    };
  }
  if (path === '/generate') {
    return {
      opening: () => undefined,
      chunk: (index, finish, usage) => ({
        text: text(finish === null ? index + 1 : index),
        meta_info: {
          id,
          finish_reason: finish === null ? null : { type: finish },
          prompt_tokens: (usage as { prompt_tokens?: number } | undefined)?.prompt_tokens ?? 0,
          completion_tokens: finish === null ? index + 1 : index,
        },
      }),
      usage: (usage) => ({ text: '', meta_info: { id, finish_reason: null, ...usage } }),
      whole: (count, finish, usage) => ({
        text: text(count),
        meta_info: {
          id,
          finish_reason: { type: finish },
          prompt_tokens: (usage as { prompt_tokens: number }).prompt_tokens,
          completion_tokens: count,
        },
      }),
    };
  }
  return {
    opening: () => undefined,
    chunk: (index, finish, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: [{ index: 0, text: finish === null ? `tok${index} ` : '', finish_reason: finish }],
      ...(usage === undefined ? {} : { usage }),
    }),
    usage: (usage) => ({ id, object: 'text_completion', created, model, choices: [], usage }),
    whole: (count, finish, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: [{ index: 0, text: text(count), finish_reason: finish }],
      usage,
    }),
  };
}
