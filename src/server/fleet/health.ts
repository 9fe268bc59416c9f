import type { Dispatcher } from 'undici';
import type { FlowEvent } from '../../flow/events.js';
import { request } from '../../http/undici-parts.js';
import type { UpstreamError } from '../../http/upstream-error.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import type { Logger } from '../../runtime/logger.js';
import { errorCode } from '../../util/cause-chain.js';
import { isUnder, joinUrl } from '../../util/url.js';
import { HEALTH_DEFAULTS } from '../settings/defaults.js';
import { classifyFailure, FAILURE_RULES } from './failure-rules.js';
import { type Circuit, type ProbeFailure, WorkerRecords } from './worker-records.js';

export { BREAKER_DEFAULTS, HEALTH_DEFAULTS } from '../settings/defaults.js';
export type { ProbeFailure } from './worker-records.js';

type Named = { url: string };

/** Options of {@link HealthChecker}. */
export interface HealthOptions {
  /** Between rounds of probes; {@link HEALTH_DEFAULTS} (5,000 ms) by default. */
  intervalMs?: number | undefined;
  /** How long one probe may take; {@link HEALTH_DEFAULTS} (2,000 ms) by default. */
  timeoutMs?: number | undefined;
  logger: Logger;
  dispatcher?: Dispatcher | undefined;
  /** Sent with every probe (a worker key). */
  headers?: Record<string, string> | undefined;
  /** Runs after every round of probes (what else the proxy learns from its workers). */
  afterRound?: (() => Promise<void>) | undefined;
  /**
   * Probes in a row that take a worker out (a 5xx while it loads, say) and that bring it back;
   * 1 and 1 by default. A probe that cannot connect at all takes it out at once.
   */
  probeThresholds?: { failure: number; success: number } | undefined;
  /** The circuit breaker of each worker, fed by what requests meet; see {@link HealthChecker}. */
  breaker?: { failureThreshold: number; successThreshold: number; openMs: number } | undefined;
  /**
   * Forget, after each round, the workers no pool has any more (with no membership of its
   * own to call `forget`: a router's own pools).
   */
  forgetLeavers?: boolean | undefined;
  /**
   * Where it keeps what it learns of each worker (its probes and circuit): the fleet's book,
   * shared with membership and the engine-load scraper; a book of its own by default.
   */
  records?: WorkerRecords<Named> | undefined;
}

/**
 * Keeps failing workers out of rotation, from probes and from what requests meet:
 * - every worker's `GET /health` is probed each round; a worker that fails the thresholds'
 *   run of them leaves its pool's rotation and comes back after their run of successes; a
 *   worker's first probe (the proxy's start, before it listens) decides at once: one that
 *   fails it is out until it passes one, logged with the usual cause;
 * - a request that could not reach a worker (a connection failure before any answer) takes
 *   it out at once, until a probe finds it again;
 * - a circuit breaker per worker counts the requests that failed on it after reaching it (a
 *   5xx, a broken stream, a protocol error): `failureThreshold` in a row open it (out of
 *   rotation, whatever its probes say); after `openMs` it is half-open (back in rotation, on
 *   trial); `successThreshold` successes in a row close it, one failure opens it again. One
 *   failure alone never takes a worker out.
 *
 * @internal
 */
export class HealthChecker {
  readonly #pools: Array<{ role: string; pool: WorkerPool<Named> }>;
  readonly #options: HealthOptions;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  /** Its part of each worker's record (`probes`, `circuit`); the record is forgotten with the worker. */
  readonly #records: WorkerRecords<Named>;
  /** The workers probed at least once: a worker's first probe decides at once, whatever the thresholds. */
  readonly #probed = new WeakSet<Named>();
  /** The workers held out of rotation (an admin drain of a discovered worker), whatever probes and circuits say. */
  readonly #held = new WeakSet<Named>();

  constructor(pools: Array<{ role: string; pool: WorkerPool<Named> }>, options: HealthOptions) {
    this.#pools = pools;
    this.#options = options;
    this.#records = options.records ?? new WorkerRecords();
  }

  /** Probes every worker once, now. */
  check(): Promise<void> {
    this.#round ??= Promise.all(
      this.#pools.flatMap(({ role, pool }) => pool.workers.map((worker) => this.#probe(role, pool, worker))),
    )
      .then(() => this.#options.afterRound?.())
      .then(() => {
        if (this.#options.forgetLeavers === true) this.#forgetLeavers();
      })
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
    }, this.#options.intervalMs ?? HEALTH_DEFAULTS.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#records.stopTimers();
  }

  /** The state of `worker`'s circuit breaker. */
  circuit(worker: Named): Circuit['state'] {
    return this.#records.get(worker)?.circuit?.state ?? 'closed';
  }

  /**
   * Holds `worker` out of rotation until {@link release}: its probes go on (the admin API shows
   * why they fail) but bring it back no more, nor does its circuit's trial.
   */
  hold(role: string, worker: Named): void {
    this.#held.add(worker);
    const entry = this.#entryOf(role, worker);
    if (entry?.pool.has(worker)) entry.pool.setAvailable(worker, false);
  }

  /** Ends a hold: one probe now, back in rotation if it answers (as {@link admit}). */
  release(role: string, worker: Named): Promise<boolean> {
    this.#held.delete(worker);
    return this.admit(role, worker);
  }

  /** Whether `worker` is held out of rotation (see {@link hold}). */
  isHeld(worker: Named): boolean {
    return this.#held.has(worker);
  }

  /**
   * A worker joining at run time: one probe now, into rotation if it answers 200 (the
   * thresholds count from there); otherwise it stays out until a later round finds it.
   * Resolves with whether it is in rotation.
   */
  async admit(role: string, worker: Named): Promise<boolean> {
    const entry = this.#entryOf(role, worker);
    if (entry === undefined || !entry.pool.has(worker) || this.#held.has(worker)) return false;
    if (entry.pool.isAvailable(worker)) return true;
    // Unreachable for now or not ready: the regular rounds keep trying.
    const { status, failure } = await this.#ask(worker);
    // Removed while the probe was out (and forgotten already): nothing of it is kept.
    if (!entry.pool.has(worker)) return false;
    this.#probed.add(worker);
    this.#note(worker, status, failure);
    if (status !== 200 || entry.pool.stateOf(worker) !== 'down' || this.#held.has(worker)) {
      return entry.pool.isAvailable(worker);
    }
    entry.pool.setAvailable(worker, true);
    return true;
  }

  /**
   * Why the worker's last probe failed (`GET /health answered 404`, `ECONNREFUSED`) with the
   * usual cause when there is one; undefined once a probe succeeds.
   */
  lastFailure(worker: Named): ProbeFailure | undefined {
    return this.#records.get(worker)?.probes.lastFailure;
  }

  #note(worker: Named, status: number | undefined, failure: unknown): void {
    if (status === 200) {
      const record = this.#records.get(worker);
      if (record !== undefined) record.probes.lastFailure = undefined;
      return;
    }
    const code = failure === undefined ? undefined : codeOf(failure);
    const hint = probeHint(status, code);
    this.#records.of(worker).probes.lastFailure = {
      reason: status === undefined ? (code ?? 'no answer') : `GET /health answered ${status}`,
      ...(hint === undefined ? {} : { hint }),
    };
  }

  #forgetLeavers(): void {
    for (const { worker } of [...this.#records.values()]) {
      if (!this.#pools.some(({ pool }) => pool.has(worker))) this.forget(worker);
    }
  }

  /**
   * A worker left its pool: its circuit (and its timer) and probe streak go with it, and its
   * record once nothing else is kept there (membership forgets the fleet's).
   */
  forget(worker: Named): void {
    const record = this.#records.get(worker);
    if (record === undefined) return;
    clearTimeout(record.circuit?.timer);
    record.circuit = undefined;
    record.probes = { streak: 0, lastFailure: undefined };
    this.#records.release(worker);
  }

  /**
   * Learns from one event of a request's flow (a `disaggregate` `onEvent`), whatever request
   * it belongs to: a failure is charged when the flow moves past it (a retry from prefill, a
   * decode given to another worker, a stream migrated) and when the request finishes with
   * it; a success counts for the workers `finished` names.
   */
  observe(event: FlowEvent<Named | undefined, Named | undefined>): void {
    switch (event.type) {
      case 'prefillRetried':
        this.noteFailure(event.error, { prefill: event.prefillWorker, decode: event.decodeWorker });
        return;
      case 'decodeRetried':
        this.noteFailure(event.error, { decode: event.fromWorker });
        return;
      case 'migration':
        if (event.outcome === 'migrated') this.noteFailure(event.error, { decode: event.fromWorker });
        return;
      case 'finished': {
        const workers = { prefill: event.prefillWorker, decode: event.decodeWorker };
        if (event.outcome === 'success') this.noteSuccess(workers);
        else if (event.outcome === 'error') this.noteFailure(event.error, workers);
        return;
      }
      default:
        return;
    }
  }

  /** A request served by these workers succeeded: their circuits count a success. */
  noteSuccess(workers: { prefill?: Named | undefined; decode?: Named | undefined }): void {
    const breaker = this.#options.breaker;
    if (breaker === undefined) return;
    for (const role of ['prefill', 'decode'] as const) {
      const worker = workers[role];
      const circuit = worker === undefined ? undefined : this.#records.get(worker)?.circuit;
      if (worker === undefined || circuit === undefined) continue;
      circuit.failures = 0;
      if (circuit.state !== 'half-open') continue;
      circuit.successes += 1;
      if (circuit.successes >= breaker.successThreshold) {
        circuit.state = 'closed';
        this.#options.logger.info({ ...this.#named(worker), role }, 'Worker circuit closed after its trial');
      }
    }
  }

  /**
   * How a log line names `worker`, as every line about a worker does: `worker`, its name (the
   * membership's, else its own `name`; none for a nameless worker of a router's own pools),
   * and `url`, its address.
   */
  #named(worker: Named): { worker?: string; url: string } {
    const name = this.#records.get(worker)?.member?.name ?? (worker as { name?: unknown }).name;
    return typeof name === 'string' ? { worker: name, url: worker.url } : { url: worker.url };
  }

  /** One request failure on `worker` after it was reached; opens its circuit at the threshold. */
  #count(role: string, worker: Named, error: UpstreamError): void {
    const breaker = this.#options.breaker;
    const entry = this.#entryOf(role, worker);
    if (breaker === undefined || entry === undefined || !entry.pool.workers.includes(worker)) return;
    const record = this.#records.of(worker);
    record.circuit ??= { state: 'closed', failures: 0, successes: 0, timer: undefined };
    const circuit = record.circuit;
    if (circuit.state === 'open') return;
    circuit.failures += 1;
    if (circuit.state === 'closed' && circuit.failures < breaker.failureThreshold) return;
    // Open: out of rotation for openMs, then on trial.
    circuit.state = 'open';
    circuit.successes = 0;
    entry.pool.setAvailable(worker, false);
    this.#options.logger.warn(
      { ...this.#named(worker), role, failures: circuit.failures, openMs: breaker.openMs, err: error },
      `Worker circuit open after ${circuit.failures === 1 ? 'one failed request' : `${circuit.failures} failed requests`} in a row; out of rotation for ${breaker.openMs} ms`,
    );
    const open = circuit;
    open.timer = setTimeout(() => {
      open.state = 'half-open';
      open.failures = 0;
      if (!entry.pool.has(worker) || this.#held.has(worker)) return;
      entry.pool.setAvailable(worker, true);
      this.#options.logger.info(
        { ...this.#named(worker), role },
        'Worker circuit half-open: back in rotation on trial',
      );
    }, breaker.openMs);
    open.timer.unref();
  }

  /**
   * Learns from a request's failure: a worker it could not reach (a connection failure to
   * its URL before any answer) leaves the rotation until a probe finds it again. A stream
   * that broke off after the worker answered says nothing of the worker's health (one reset
   * would otherwise empty the rotation of a busy pool until the next probe).
   */
  noteFailure(error: unknown, workers: { prefill?: Named | undefined; decode?: Named | undefined }): void {
    const { kind, upstream } = classifyFailure(error);
    const rule = FAILURE_RULES[kind].health;
    if (upstream === undefined || rule === 'ignore') return;
    for (const role of ['prefill', 'decode'] as const) {
      const worker = workers[role];
      if (worker === undefined || !isUnder(upstream.url, worker.url)) continue;
      if (rule === 'eject') this.failed(role, worker);
      else this.#count(role, worker, upstream);
    }
  }

  /**
   * The pool of `role` that holds `worker`: with several pools (one per model) two sides share
   * a role, so the worker says which; the role's first pool for one no pool has (any more).
   */
  #entryOf(role: string, worker: Named): { role: string; pool: WorkerPool<Named> } | undefined {
    return (
      this.#pools.find((candidate) => candidate.role === role && candidate.pool.has(worker)) ??
      this.#pools.find((candidate) => candidate.role === role)
    );
  }

  /** A request found `worker` unreachable: out of rotation until a probe says otherwise. */
  failed(role: string, worker: Named): void {
    const entry = this.#entryOf(role, worker);
    if (entry === undefined || !entry.pool.isAvailable(worker)) return;
    entry.pool.setAvailable(worker, false);
    this.#options.logger.warn(
      { ...this.#named(worker), role },
      'Worker unreachable; out of rotation until it answers a probe',
    );
  }

  /** One `GET /health`: its status, or why there was none. */
  async #ask(worker: Named): Promise<{ status?: number; failure?: unknown }> {
    try {
      const answer = await request(joinUrl(worker.url, '/health'), {
        headers: this.#options.headers ?? {},
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? HEALTH_DEFAULTS.timeoutMs),
        ...(this.#options.dispatcher === undefined ? {} : { dispatcher: this.#options.dispatcher }),
      });
      await answer.body.dump();
      return { status: answer.statusCode };
    } catch (error) {
      return { failure: error };
    }
  }

  async #probe(role: string, pool: WorkerPool<Named>, worker: Named): Promise<void> {
    const { status, failure } = await this.#ask(worker);
    const healthy = status === 200;
    // The worker may have left the pool while the probe was out (removed, drained, discovery).
    if (!pool.has(worker)) return;
    // A worker never probed yet (the start's round, before the proxy listens) that fails is a
    // wrong URL or a worker not up: out at once, or clients get its answers until the
    // threshold's worth of rounds has passed (Envoy's ignore_new_hosts_until_first_hc).
    const first = !this.#probed.has(worker);
    this.#probed.add(worker);
    this.#note(worker, status, failure);
    // An open circuit keeps its worker out whatever /health says, until its trial; a hold, until released.
    if (this.#held.has(worker)) return;
    if (healthy && this.#records.get(worker)?.circuit?.state === 'open') return;
    if (healthy === pool.isAvailable(worker)) {
      const record = this.#records.get(worker);
      if (record !== undefined) record.probes.streak = 0;
      return;
    }
    const code = failure === undefined ? undefined : codeOf(failure);
    const thresholds = this.#options.probeThresholds ?? { failure: 1, success: 1 };
    const record = this.#records.of(worker);
    const streak = record.probes.streak + 1;
    const unreachable = code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN';
    if (streak < (healthy ? thresholds.success : thresholds.failure) && !unreachable && !first) {
      record.probes.streak = streak;
      return;
    }
    record.probes.streak = 0;
    pool.setAvailable(worker, healthy);
    if (healthy) {
      this.#options.logger.info({ ...this.#named(worker), role }, 'Worker back in rotation');
      return;
    }
    const hint = probeHint(status, code);
    this.#options.logger.warn(
      {
        ...this.#named(worker),
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
  return errorCode(error) ?? ((error as { name?: unknown })?.name === 'TimeoutError' ? 'TIMEOUT' : undefined);
}

/** What an operator most likely got wrong, for the failures that have a usual cause. */
export function probeHint(status: number | undefined, code: string | undefined): string | undefined {
  // A URL ending in /v1 never gets here: workers() refuses it with the base URL to give.
  if (status === 401 || status === 403) return 'the worker wants a key: set --worker-api-key to its --api-key';
  if (status === 404) return 'the worker has no /health: is the URL the root of a vLLM or SGLang server?';
  if (code === 'ECONNREFUSED') return 'nothing listens there: is the worker up, and the port right?';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name does not resolve';
  if (code === 'TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT')
    return 'no answer in time: a firewall, or an overloaded worker';
  return undefined;
}
