import type { DiscoveredWorker, MembershipTarget } from '../../discovery/worker-set.js';
import type { WorkerPool, WorkerState } from '../../routing/worker-pool.js';
import type { Logger } from '../../runtime/logger.js';
import { branded, DisaggError } from '../../util/disagg-error.js';
import { addressForms, trimSlash } from '../../util/url.js';
import type { ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { HealthChecker } from './health.js';
import { type AnyWorker, type Fleet, type PoolPair, PoolSet, pairsOf, type Role } from './pool-set.js';
import { inFlightOf, type MembershipSource, stateOf, WorkerRecords } from './worker-records.js';

export type { Role } from './pool-set.js';
export type { MembershipSource } from './worker-records.js';

/** A membership change as metrics count it. */
export type MembershipChange = 'added' | 'draining' | 'removed' | 'left';

/** A worker as the admin API lists it. */
export interface WorkerView {
  role: Role;
  name: string;
  url: string;
  /**
   * `left`: no longer in the pool (drained with nothing under way, or removed); `drained`: a
   * discovered worker the admin API drained, nothing under way, kept out of rotation until
   * undrained (it stays `draining` while its requests finish).
   */
  state: WorkerState | 'left' | 'drained';
  in_flight: number;
  source: MembershipSource;
  bootstrap_host?: string | undefined;
  bootstrap_port?: number | undefined;
  /**
   * When out of rotation: why (its last health probe's failure, `GET /health answered 404`,
   * `ECONNREFUSED`; its circuit open; a drain through the admin API).
   */
  reason?: string | undefined;
  /** When out of rotation for a usual cause: what to check, or how it comes back. */
  hint?: string | undefined;
}

/** The codes of {@link MembershipError}. */
export type MembershipErrorCode = 'DISAGG_WORKER_EXISTS' | 'DISAGG_WORKER_UNKNOWN' | 'DISAGG_WORKER_LEAVING';

/**
 * A membership change the proxy refuses: a worker already there (`DISAGG_WORKER_EXISTS`,
 * answered 409), one it does not have (`DISAGG_WORKER_UNKNOWN`, answered 404), or the undrain
 * of one leaving for good (`DISAGG_WORKER_LEAVING`, answered 409).
 */
export class MembershipError extends DisaggError {
  static override readonly is = branded<MembershipError>('MembershipError');
  declare readonly code: MembershipErrorCode;

  constructor(code: MembershipErrorCode, message: string) {
    super(code, message);
  }
}

/**
 * The proxy's workers as they change at run time: who is in which pool, under which name,
 * put there by whom. Every change goes through here, so that it is logged once, counted once
 * (`onChange`), probed before it takes requests, and named in what clients see (a worker's
 * address never reaches a client: {@link redact} replaces it with its name, also for a worker
 * that has left while requests it served are still answering).
 *
 * Names are unique across every pool of the fleet: `prefill-0`, `decode-3`, ... by role and
 * order of arrival unless one is given. A worker joins the fleet's first pool (the only one
 * today); a worker already in the fleet is changed in its own pool, which its record keeps.
 *
 * @internal
 */
export class Membership {
  /** The fleet's pools; the first is where added workers join unless one serves any model. */
  readonly #pools: readonly PoolPair[];
  /** The pool of every model no other pool names, if the fleet has one. */
  readonly #anyModel: PoolPair | undefined;
  readonly #health: HealthChecker;
  readonly #logger: Logger;
  readonly #onChange: (role: Role, change: MembershipChange, source: MembershipSource) => void;
  /**
   * The fleet's book: one record per worker it has (or had, while requests it served still
   * run), whose `member` part is this membership's; health and engine load keep theirs there.
   */
  readonly #records: WorkerRecords<AnyWorker>;
  readonly #counters = { prefill: 0, decode: 0 };
  /** Each address, in the forms a message may hold it, and its worker's name; longest first. */
  #addresses: Array<[string, string]> = [];

  constructor(
    pools: Fleet,
    health: HealthChecker,
    logger: Logger,
    onChange: (role: Role, change: MembershipChange, source: MembershipSource) => void = () => {},
    records: WorkerRecords<AnyWorker> = new WorkerRecords(),
  ) {
    this.#records = records;
    this.#pools = pairsOf(pools);
    this.#anyModel = pools instanceof PoolSet ? pools.poolFor(undefined) : undefined;
    this.#health = health;
    this.#logger = logger;
    this.#onChange = onChange;
    // Named workers first: a name given is kept, and the generated ones (prefill-0, ...) pass
    // over it, whatever the order of the list.
    for (const named of [true, false]) {
      for (const pool of this.#pools) {
        for (const role of ['prefill', 'decode'] as const) {
          for (const worker of pool[role].workers) {
            if ((worker.name !== undefined) === named) this.#register(role, worker, 'config', pool);
          }
        }
      }
    }
  }

  /** How clients, logs and headers name a worker; `worker` for one the proxy never had. */
  nameOf(worker: { url: string }): string {
    // A worker of no pool (a sidecar's prefill target) may still carry its name.
    return this.#records.get(worker as AnyWorker)?.member?.name ?? (worker as { name?: string }).name ?? 'worker';
  }

  /** `text` with every worker address replaced by the worker's name. */
  redact(text: string): string {
    let redacted = text;
    for (const [address, name] of this.#addresses) redacted = redacted.replaceAll(address, name);
    return redacted;
  }

  /** Every worker of every pool by role, draining ones included. */
  list(): { prefill: WorkerView[]; decode: WorkerView[] } {
    return {
      prefill: this.#workers('prefill').map((worker) => this.#view('prefill', worker)),
      decode: this.#workers('decode').map((worker) => this.#view('decode', worker)),
    };
  }

  /** Every worker of `role`, pool after pool. */
  #workers(role: Role): AnyWorker[] {
    return this.#pools.flatMap((pool) => pool[role].workers as readonly AnyWorker[]);
  }

  /** The side of `role` of the pool `worker` is (or was) in; the first pool's for a worker never had. */
  #poolOf(role: Role, worker: AnyWorker): WorkerPool<AnyWorker> {
    const pool = this.#records.get(worker)?.member?.pool ?? (this.#pools[0] as PoolPair);
    return pool[role] as WorkerPool<AnyWorker>;
  }

  /** The workers of `role` a source put there (what a discovery source reconciles against). */
  workersFrom(role: Role, source: MembershipSource): AnyWorker[] {
    return this.#workers(role).filter((worker) => this.#records.get(worker)?.member?.source === source);
  }

  /**
   * This membership as a discovery source changes it: what `source` put in each pool, adds
   * checked by `check` (the options module's rules), drains by URL.
   */
  targetFor(
    source: MembershipSource,
    check: (role: Role, worker: DiscoveredWorker) => AnyWorker,
    into?: PoolPair,
  ): MembershipTarget {
    // One source per pool: each sees, adds and drains its own pool's workers only.
    const pool = into ?? this.#anyModel ?? (this.#pools[0] as PoolPair);
    const mine = (role: Role) =>
      this.workersFrom(role, source).filter((worker) => this.#records.get(worker)?.member?.pool === pool);
    return {
      current: (role) =>
        mine(role).map((worker) => ({
          url: worker.url,
          draining: this.#poolOf(role, worker).stateOf(worker) === 'draining',
        })),
      // A found worker's name is a wish: a pod re-created under its name while the old one
      // drains must still join (as `<name>-2`), not wait for the next change to the pods.
      add: (role, worker) => this.add(role, check(role, this.#freeName(worker)), source, pool),
      drain: (role, url) => {
        const worker = mine(role).find((candidate) => candidate.url === url);
        if (worker !== undefined) this.drain(role, worker, source);
      },
    };
  }

  /** A worker by name (or, failing that, by URL) in any pool. */
  find(nameOrUrl: string): { role: Role; worker: AnyWorker } | undefined {
    for (const match of [
      (w: AnyWorker) => this.#records.get(w)?.member?.name === nameOrUrl,
      (w: AnyWorker) => trimSlash(w.url) === trimSlash(nameOrUrl),
    ]) {
      for (const role of ['prefill', 'decode'] as const) {
        const worker = this.#workers(role).find(match);
        if (worker !== undefined) return { role, worker };
      }
    }
    return undefined;
  }

  /**
   * Adds a (checked) worker to `role`'s pool out of rotation, probes it once and puts it in
   * rotation if it answers; otherwise the health rounds bring it in when it does. Resolves
   * with the worker as listed.
   *
   * @throws {MembershipError} when its URL is already in the pool or its name is taken.
   */
  async add(role: Role, worker: AnyWorker, source: MembershipSource, into?: PoolPair): Promise<WorkerView> {
    // The pool given (the admin API's `model`), else the one of every model no pool names (the
    // top-level workers', where discovery finds them), else the fleet's first.
    const joined = into ?? this.#anyModel ?? (this.#pools[0] as PoolPair);
    const pool = joined[role] as WorkerPool<AnyWorker>;
    const url = trimSlash(worker.url);
    const same = pool.workers.find((candidate) => trimSlash(candidate.url) === url);
    if (same !== undefined) {
      throw new MembershipError(
        'DISAGG_WORKER_EXISTS',
        `A ${role} worker with this URL is already in the pool, as ${this.nameOf(same)}${pool.stateOf(same) === 'draining' ? ' (draining: add it again once it has left)' : ''}`,
      );
    }
    if (worker.name !== undefined && this.find(worker.name) !== undefined) {
      throw new MembershipError(
        'DISAGG_WORKER_EXISTS',
        `The name ${JSON.stringify(worker.name)} is taken by another worker`,
      );
    }
    pool.add(worker, { available: false });
    this.#register(role, worker, source, joined);
    this.#onChange(role, 'added', source);
    const name = this.nameOf(worker);
    const inRotation = await this.#health.admit(role, worker);
    // Removed while its first probe was out: it has been logged and forgotten already, and
    // is answered under the name and source it was added with.
    if (!pool.has(worker)) return { ...this.#view(role, worker), name, source };
    const view = this.#view(role, worker);
    this.#logger.info(
      {
        role,
        worker: view.name,
        url: worker.url,
        source,
        state: view.state,
        ...(view.reason === undefined ? {} : { reason: view.reason }),
        ...(view.hint === undefined ? {} : { hint: view.hint }),
      },
      inRotation
        ? `Worker added to the ${role} pool`
        : `Worker added to the ${role} pool; out of rotation until it answers a probe`,
    );
    return view;
  }

  /**
   * Drains a worker: no new request, those under way finish, then it leaves the pool (logged
   * and counted then too). Answers with the worker as it is now: `draining`, or `left` when
   * nothing was under way. A discovered worker drained through the admin API does not leave
   * (its discovery would add it again): it is held out of rotation, listed `draining` then
   * `drained`, until {@link undrain} or until its discovery no longer finds it.
   */
  drain(role: Role, worker: AnyWorker, source: MembershipSource): WorkerView {
    const pool = this.#poolOf(role, worker);
    if (pool.stateOf(worker) === 'draining') return this.#view(role, worker);
    const found = this.#records.get(worker)?.member?.source;
    if (source === 'admin' && (found === 'dns' || found === 'kubernetes')) return this.#hold(role, worker, found);
    const inFlight = pool.inFlight(worker);
    const left = pool.drain(worker);
    const view = this.#view(role, worker);
    this.#onChange(role, 'draining', source);
    this.#logger.info(
      { role, worker: view.name, url: worker.url, source, inFlight },
      `Worker draining from the ${role} pool`,
    );
    this.#whenGone(role, worker, left, source, 'Drained worker left the pool');
    return view;
  }

  /** A discovered worker drained by the admin API: out of rotation, in the pool (see {@link drain}). */
  #hold(role: Role, worker: AnyWorker, found: MembershipSource): WorkerView {
    if (!this.#health.isHeld(worker)) {
      this.#health.hold(role, worker);
      this.#onChange(role, 'draining', 'admin');
    }
    const view = this.#view(role, worker);
    this.#logger.info(
      { role, worker: view.name, url: worker.url, source: found, inFlight: view.in_flight },
      `Discovered worker drained from the ${role} pool: out of rotation until undrained (POST /admin/workers/${view.name}/undrain) or until ${found} discovery no longer finds it`,
    );
    return view;
  }

  /**
   * Undoes an admin drain of a discovered worker: probed once, back in rotation if it
   * answers (else when a probe finds it). A worker in rotation, or out for another cause,
   * is answered as it is.
   *
   * @throws {MembershipError} `DISAGG_WORKER_LEAVING` for a worker draining out of the pool for
   * good (one of the start-up list or the admin API's): add it again once it has left.
   */
  async undrain(role: Role, worker: AnyWorker): Promise<WorkerView> {
    if (this.#health.isHeld(worker)) {
      const inRotation = await this.#health.release(role, worker);
      const view = this.#view(role, worker);
      this.#onChange(role, 'added', 'admin');
      this.#logger.info(
        { role, worker: view.name, url: worker.url, source: 'admin', state: view.state },
        inRotation
          ? `Worker undrained: back in the ${role} pool's rotation`
          : `Worker undrained; out of rotation until it answers a probe`,
      );
      return view;
    }
    if (this.#poolOf(role, worker).stateOf(worker) === 'draining') {
      throw new MembershipError(
        'DISAGG_WORKER_LEAVING',
        `${this.nameOf(worker)} is leaving the ${role} pool for good (drained from the start-up list or the admin API); add it again with POST /admin/workers once it has left`,
      );
    }
    return this.#view(role, worker);
  }

  /** One worker as the admin API lists it. */
  view(role: Role, worker: AnyWorker): WorkerView {
    return this.#view(role, worker);
  }

  /** Removes a worker at once; requests under way on it finish. Answers with its view (state `left`, what it still has in flight). */
  remove(role: Role, worker: AnyWorker, source: MembershipSource): WorkerView {
    const pool = this.#poolOf(role, worker);
    const gone = pool.remove(worker);
    const view = this.#view(role, worker);
    this.#onChange(role, 'removed', source);
    this.#logger.info(
      { role, worker: view.name, url: worker.url, source, inFlight: view.in_flight },
      `Worker removed from the ${role} pool`,
    );
    this.#whenGone(role, worker, gone, source, undefined);
    return view;
  }

  #whenGone(
    role: Role,
    worker: AnyWorker,
    gone: Promise<void>,
    source: MembershipSource,
    message: string | undefined,
  ): void {
    const record = this.#records.get(worker)?.member;
    if (record === undefined || record.leaving) return;
    record.leaving = true;
    void gone.then(() => {
      record.leaving = false;
      // Added again meanwhile (a discovery source that saw it come back): it stays known.
      if (this.#pools.some((pool) => pool[role].has(worker as never))) return;
      this.#health.forget(worker);
      if (message !== undefined) {
        this.#onChange(role, 'left', source);
        this.#logger.info({ role, worker: this.nameOf(worker), url: worker.url, source }, message);
      }
      this.#forget(worker);
    });
  }

  #register(role: Role, worker: AnyWorker, source: MembershipSource, pool: PoolPair): void {
    const name = worker.name ?? this.#nextName(role);
    this.#records.of(worker).member = { name, role, pool, source, leaving: false };
    for (const form of addressForms(worker.url)) this.#addresses.push([form, name]);
    // Longer addresses first, so that a URL is replaced whole before its host is.
    this.#addresses.sort((a, b) => b[0].length - a[0].length);
  }

  /** `worker`, its name made unique if another worker has it. */
  #freeName<T extends { name?: string }>(worker: T): T {
    if (worker.name === undefined || this.find(worker.name) === undefined) return worker;
    let n = 2;
    while (this.find(`${worker.name}-${n}`) !== undefined) n += 1;
    return { ...worker, name: `${worker.name}-${n}` };
  }

  #nextName(role: Role): string {
    let name: string;
    do name = `${role}-${this.#counters[role]++}`;
    while (this.find(name) !== undefined);
    return name;
  }

  #forget(worker: AnyWorker): void {
    const name = this.#records.get(worker)?.member?.name;
    this.#records.forget(worker);
    const forms = addressForms(worker.url);
    // Another worker may share the address (added again under a new name): keep its entries.
    this.#addresses = this.#addresses.filter(([address, named]) => !(named === name && forms.includes(address)));
  }

  /** A worker as the admin API lists it, from its record (its pool's state and leases read through it). */
  #view(role: Role, worker: AnyWorker): WorkerView {
    const record = this.#records.get(worker);
    const prefill = worker as ProxyPrefillWorker;
    const inFlight = record === undefined ? 0 : inFlightOf(record);
    const pooled = record === undefined ? 'left' : stateOf(record);
    // A held worker its discovery lost is leaving for good: shown as any drain.
    const held = pooled === 'down' && this.#health.isHeld(worker);
    const state = held ? (inFlight > 0 ? 'draining' : 'drained') : pooled;
    return {
      role,
      name: this.nameOf(worker),
      url: worker.url,
      state,
      in_flight: inFlight,
      source: record?.member?.source ?? 'config',
      ...(prefill.bootstrapHost === undefined ? {} : { bootstrap_host: prefill.bootstrapHost }),
      ...(prefill.bootstrapPort === undefined ? {} : { bootstrap_port: prefill.bootstrapPort }),
      ...(held ? this.#heldWhy(worker) : state === 'down' ? this.#downWhy(worker) : {}),
    };
  }

  #heldWhy(worker: AnyWorker): { reason: string; hint: string } {
    const name = this.nameOf(worker);
    return {
      reason: 'drained through the admin API',
      hint: `POST /admin/workers/${name}/undrain (or DELETE /admin/workers/${name}/drain) brings it back; its discovery keeps it out until then, or until it no longer finds it`,
    };
  }

  /** Why a worker is down: its last failed probe, else its open circuit. */
  #downWhy(worker: AnyWorker): { reason: string; hint?: string } | undefined {
    const probe = this.#health.lastFailure(worker);
    if (probe !== undefined || this.#health.circuit(worker) !== 'open') return probe;
    return {
      reason: 'circuit open: requests failed on it in a row',
      hint: 'back on trial after --breaker-open-ms; the log line "Worker circuit open" says what failed',
    };
  }
}
