import { type Dispatcher, request } from 'undici';
import type { WorkerPool } from '../flow/worker-pool.js';
import { UpstreamError } from '../http/upstream-error.js';
import type { Logger } from '../runtime/logger.js';
import { findCause } from '../util/cause-chain.js';
import { joinUrl, trimSlash } from '../util/url.js';

type Named = { url: string };

/** Options of {@link HealthChecker}. */
export interface HealthOptions {
  /** Between rounds of probes; 5,000 ms by default. */
  intervalMs?: number;
  /** How long one probe may take; 2,000 ms by default. */
  timeoutMs?: number;
  logger: Logger;
  dispatcher?: Dispatcher;
  /** Sent with every probe (a worker key). */
  headers?: Record<string, string>;
  /** Runs after every round of probes (what else the proxy learns from its workers). */
  afterRound?: () => Promise<void>;
}

/**
 * Keeps failing workers out of rotation, from probes and from what requests meet: every
 * worker's `GET /health` is probed each round; a worker that fails (or that a request found
 * unreachable) leaves its pool's rotation and comes back at its first successful probe.
 *
 * @internal
 */
export class HealthChecker {
  readonly #pools: Array<{ role: string; pool: WorkerPool<Named> }>;
  readonly #options: HealthOptions;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;

  constructor(pools: Array<{ role: string; pool: WorkerPool<Named> }>, options: HealthOptions) {
    this.#pools = pools;
    this.#options = options;
  }

  /** Probes every worker once, now. */
  check(): Promise<void> {
    this.#round ??= Promise.all(
      this.#pools.flatMap(({ role, pool }) => pool.workers.map((worker) => this.#probe(role, pool, worker))),
    )
      .then(() => this.#options.afterRound?.())
      .then(
        () => {
          this.#round = undefined;
        },
        () => {
          this.#round = undefined;
        },
      );
    return this.#round;
  }

  /** Probes every `intervalMs` until `stop()`; the timer does not keep the process alive. */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => {
      this.check().then(undefined, () => {});
    }, this.#options.intervalMs ?? 5000);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Learns from a request's failure: a worker it could not reach (a connection failure to
   * its URL before any answer) leaves the rotation until a probe finds it again. A stream
   * that broke off after the worker answered says nothing of the worker's health (one reset
   * would otherwise empty the rotation of a busy pool until the next probe).
   */
  noteFailure(error: unknown, workers: { prefill?: Named | undefined; decode?: Named | undefined }): void {
    const upstream = findCause(error, UpstreamError.is);
    if (upstream?.kind !== 'connection' || upstream.afterResponse) return;
    for (const role of ['prefill', 'decode'] as const) {
      const worker = workers[role];
      if (worker !== undefined && upstream.url.startsWith(trimSlash(worker.url))) this.failed(role, worker);
    }
  }

  /** A request found `worker` unreachable: out of rotation until a probe says otherwise. */
  failed(role: string, worker: Named): void {
    const entry = this.#pools.find((candidate) => candidate.role === role);
    if (entry === undefined || !entry.pool.workers.includes(worker) || !entry.pool.isAvailable(worker)) return;
    entry.pool.setAvailable(worker, false);
    this.#options.logger.warn(
      { worker: worker.url, role },
      'Worker unreachable; out of rotation until it answers a probe',
    );
  }

  async #probe(role: string, pool: WorkerPool<Named>, worker: Named): Promise<void> {
    let status: number | undefined;
    let failure: unknown;
    try {
      const answer = await request(joinUrl(worker.url, '/health'), {
        headers: this.#options.headers ?? {},
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? 2000),
        ...(this.#options.dispatcher === undefined ? {} : { dispatcher: this.#options.dispatcher }),
      });
      await answer.body.dump();
      status = answer.statusCode;
    } catch (error) {
      failure = error;
    }
    const healthy = status === 200;
    if (healthy === pool.isAvailable(worker)) return;
    pool.setAvailable(worker, healthy);
    if (healthy) {
      this.#options.logger.info({ worker: worker.url, role }, 'Worker back in rotation');
      return;
    }
    const code = failure === undefined ? undefined : codeOf(failure);
    const hint = probeHint(worker.url, status, code);
    this.#options.logger.warn(
      {
        worker: worker.url,
        role,
        ...(status === undefined ? {} : { status }),
        ...(code === undefined ? {} : { code }),
        ...(failure === undefined ? {} : { err: failure }),
        ...(hint === undefined ? {} : { hint }),
      },
      `Worker failed its health check (${status === undefined ? (code ?? 'no answer') : `GET /health answered ${status}`}); out of rotation`,
    );
  }
}

/** The code of a failed probe (undici nests the socket's), e.g. ECONNREFUSED, UND_ERR_CONNECT_TIMEOUT. */
function codeOf(error: unknown): string | undefined {
  const found = findCause(error, (cause) => typeof (cause as { code?: unknown }).code === 'string');
  const code = (found as { code?: string } | undefined)?.code;
  if (code !== undefined) return code;
  return (error as { name?: unknown })?.name === 'TimeoutError' ? 'TIMEOUT' : undefined;
}

/** What an operator most likely got wrong, for the failures that have a usual cause. */
export function probeHint(url: string, status: number | undefined, code: string | undefined): string | undefined {
  let path = '';
  try {
    path = new URL(url).pathname.replace(/\/+$/, '');
  } catch {
    return undefined;
  }
  if (path.endsWith('/v1')) {
    return `the worker URL ends in /v1: give the server's root (${url.replace(/\/v1\/?$/, '')}), not an OpenAI base URL`;
  }
  if (status === 401 || status === 403) return 'the worker wants a key: set --worker-api-key to its --api-key';
  if (status === 404) return 'the worker has no /health: is the URL the root of a vLLM or SGLang server?';
  if (code === 'ECONNREFUSED') return 'nothing listens there: is the worker up, and the port right?';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name does not resolve';
  if (code === 'TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT')
    return 'no answer in time: a firewall, or an overloaded worker';
  return undefined;
}
