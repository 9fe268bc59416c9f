import { branded, DisaggError } from '../../util/disagg-error.js';

/**
 * A request the proxy would not take on: every slot busy and the queue full, a wait in the
 * queue past its limit, or a sheddable one no worker is predicted to serve within its service
 * levels. Answered 429 with `Retry-After` (`retryAfterS`). `code`:
 * `DISAGG_OVERLOADED`.
 */
export class OverloadedError extends DisaggError {
  static override readonly is = branded<OverloadedError>('OverloadedError');
  declare readonly code: 'DISAGG_OVERLOADED';
  /** When the client may try again, in whole seconds. */
  readonly retryAfterS: number;
  /**
   * The limit that was hit: the proxy's `capacity` (every slot busy and the queue full), a
   * `shed` (its place given to a request of higher priority), a `queue_timeout` (a wait past
   * its band's time-to-live), the tenant's own `max_concurrent`, `requests_per_minute`,
   * `tokens_per_minute`, or `slo` (a sheddable request no worker was predicted to meet the
   * service levels of, refused once the scheduler decided).
   */
  readonly limit:
    | 'capacity'
    | 'shed'
    | 'queue_timeout'
    | 'max_concurrent'
    | 'requests_per_minute'
    | 'tokens_per_minute'
    | 'slo';

  constructor(message: string, retryAfterS: number, limit: OverloadedError['limit'] = 'capacity') {
    super('DISAGG_OVERLOADED', message);
    this.retryAfterS = retryAfterS;
    this.limit = limit;
  }
}

/**
 * A request under way whose slot was given to one of higher priority (`preempt` on): it is to
 * end now, both legs, with a 503, `Retry-After` (`retryAfterS`) and `x-disagg-preempted:
 * true`, or its API's error event once its stream has begun. `code`: `DISAGG_PREEMPTED`; the
 * API error's own code is `preempted` (`apiCode`).
 */
export class PreemptedError extends DisaggError {
  static override readonly is = branded<PreemptedError>('PreemptedError');
  declare readonly code: 'DISAGG_PREEMPTED';
  /** When the client may try again, in whole seconds. */
  readonly retryAfterS: number;
  /** The priority of the request that took its slot. */
  readonly preemptedBy: number;
  /** Its own priority. */
  readonly priority: number;
  /** What OpenAI's error body and stream event say as `code`, so that a client can tell it from other 503s. */
  readonly apiCode = 'preempted';

  constructor(priority: number, preemptedBy: number, retryAfterS = 1) {
    super(
      'DISAGG_PREEMPTED',
      `The proxy is at capacity and gave this request's slot to one of higher priority (${preemptedBy} over ${priority}): it was preempted; try again later`,
    );
    this.retryAfterS = retryAfterS;
    this.preemptedBy = preemptedBy;
    this.priority = priority;
  }
}

/**
 * A place taken in {@link Admission}: `release()` once the request is over (idempotent; a
 * no-op for a request that was preempted, whose slot Admission gave on already).
 */
export interface Ticket {
  release(): void;
}

/**
 * Who asks for a slot: its tenant (fair turns are taken between tenants), its priority band
 * (higher first; 0 by default) and how many of its requests may be under way or waiting at
 * once (no bound by default). With `preempt` it may be preempted once under way (where the
 * admission preempts): the callback is told, once, and must end the request (it must not
 * throw); without it the request is never preempted.
 */
export interface Applicant {
  tenant: string;
  priority: number;
  maxConcurrent?: number | undefined;
  preempt?: ((error: PreemptedError) => void) | undefined;
  /**
   * Whether ending it now ends its work on the workers too; asked when a victim is sought, and
   * one that says no is passed over. A prefill under way is never cancelled (its KV could be
   * stranded), so preempting a request whose prefill still runs frees a slot of the router's
   * but not the worker: the slot's new holder would then run beside it, past the limit the
   * slots keep. Always, without it.
   */
  stoppable?: (() => boolean) | undefined;
}

/** A slot held, as preemption looks for one to take. */
interface Holder {
  readonly applicant: Applicant;
  /** Released, or preempted: the slot is no longer its own. */
  over: boolean;
}

const ANYONE: Applicant = { tenant: 'default', priority: 0 };

interface Waiter {
  readonly applicant: Applicant;
  admit(ticket: Ticket): void;
  refuse(error: OverloadedError): void;
  timer: NodeJS.Timeout | undefined;
  queuedAt: number;
}

/** The waiters of one priority band, by tenant, and whose turn is next. */
interface Band {
  readonly tenants: Map<string, Waiter[]>;
  /** The tenants with waiters, in turn order: the next takes the head, then goes to the back. */
  readonly turns: string[];
}

/**
 * Bounded admission: at most `maxConcurrent` requests served at once, at most `queueSize`
 * waiting for a slot, each for at most its band's `queueTimeoutMs`. A free slot goes to the
 * highest priority band with waiters and, within it, to the tenants in turn (each tenant's
 * own requests first come, first served), so that one tenant's backlog never holds another's
 * requests behind it. A full queue sheds the newest waiter of the lowest band below the
 * newcomer's priority (its tenant the one with most waiting), else refuses the newcomer; a
 * tenant over its own `maxConcurrent` (under way and waiting) is refused at once. Refusals are
 * {@link OverloadedError}s that name the limit. A waiter that gives up (its client left)
 * leaves the queue at once, so it neither takes a place nor a slot later. Written here rather
 * than with cockatiel 3's bulkhead: that one keeps a cancelled waiter in its queue until its
 * turn, has no wait limit, and stalls its queue when a cancelled waiter comes up.
 *
 * With `preempt`, a request that finds every slot busy takes at once the slot of the
 * lowest-priority request under way below its own (of those as low, the one admitted last),
 * among those whose applicant gave a `preempt` callback: that one is told with a
 * {@link PreemptedError}, its ticket is released here, and the newcomer neither waits nor
 * sheds anyone. A request of equal priority never preempts: it waits as before.
 *
 * @example
 * const admission = new Admission({ maxConcurrent: 1, queueSize: 0, queueTimeoutMs: 1000, preempt: true });
 * const never = new Promise<never>(() => {});
 * await admission.enter(never, { tenant: 'batch', priority: 0, preempt: (error) => error.preemptedBy });
 * const ticket = await admission.enter(never, { tenant: 'chat', priority: 1 }); // batch's request is told
 * ticket.release();
 *
 * @internal
 */
export class Admission {
  readonly #max: number;
  readonly #queueSize: number;
  readonly #timeoutMs: (priority: number) => number;
  readonly #onWait: ((seconds: number, applicant: Applicant) => void) | undefined;
  readonly #preempt: boolean;
  readonly #clock: { readonly now: number; after(delayMs: number, run: () => void): void } | undefined;
  /** The slots held by requests that may be preempted, in the order they were admitted. */
  readonly #preemptible = new Set<Holder>();
  #active = 0;
  #queued = 0;
  /** Bands with waiters, highest priority first. */
  readonly #bands = new Map<number, Band>();
  /** Each tenant's requests under way and waiting. */
  readonly #perTenant = new Map<string, { active: number; queued: number }>();
  readonly #tenantNames: () => readonly string[];

  constructor(options: {
    maxConcurrent: number;
    queueSize: number;
    /** How long a request may wait, in ms: one for every band, or per priority. */
    queueTimeoutMs: number | ((priority: number) => number);
    /** How long each admitted request waited in the queue (0 for none), and whose it was. */
    onWait?: (seconds: number, applicant: Applicant) => void;
    /** The tenants whose waiting requests {@link Admission.queuedByTenant} reports (the metrics' gauge). */
    tenantNames?: () => readonly string[];
    /** Whether a request of higher priority preempts one under way when every slot is busy; off by default. */
    preempt?: boolean | undefined;
    /**
     * The clock waits are timed on: the wall clock by default; a simulation's virtual one
     * (`disagg simulate` admits on simulated time). Its timers are never cancelled: one that
     * fires for a request no longer waiting does nothing.
     */
    clock?: { readonly now: number; after(delayMs: number, run: () => void): void } | undefined;
  }) {
    this.#clock = options.clock;
    this.#preempt = options.preempt ?? false;
    this.#tenantNames = options.tenantNames ?? (() => []);
    this.#max = options.maxConcurrent;
    this.#queueSize = options.queueSize;
    const timeout = options.queueTimeoutMs;
    this.#timeoutMs = typeof timeout === 'function' ? timeout : () => timeout;
    this.#onWait = options.onWait;
  }

  /** Requests being served. */
  get active(): number {
    return this.#active;
  }

  /** The limits it admits by. */
  get limits(): { maxConcurrent: number; queueSize: number } {
    return { maxConcurrent: this.#max, queueSize: this.#queueSize };
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#queued;
  }

  /**
   * How many tenants it keeps a record of: only those with requests under way or waiting, so
   * that the names a gateway sends come and go without the records piling up.
   *
   * @internal
   */
  get tenantRecords(): number {
    return this.#perTenant.size;
  }

  /** Each named tenant's requests waiting (see the `tenantNames` option), for a gauge. */
  queuedByTenant(): ReadonlyArray<readonly [string, number]> {
    return this.#tenantNames().map((tenant) => [tenant, this.usageOf(tenant).queued] as const);
  }

  /** A tenant's requests under way and waiting (zeros for one with none). */
  usageOf(tenant: string): { active: number; queued: number } {
    const usage = this.#perTenant.get(tenant);
    return { active: usage?.active ?? 0, queued: usage?.queued ?? 0 };
  }

  /**
   * A slot for one request of `applicant` (by default one tenant, priority 0): at once if one
   * is free (nobody waits while one is), else after a wait in the queue.
   * `gaveUp` resolving (the client left) takes the request out of the queue; the promise then
   * never settles, as nobody waits for it.
   *
   * With preemption on and every slot busy, the slot of a request under way of lower priority
   * is taken at once instead (see the class).
   *
   * @throws {OverloadedError} (rejects) when the tenant is at its own limit, the queue is full
   *   (or it is shed for a higher priority), or the wait runs past its band's limit.
   */
  enter(gaveUp: Promise<unknown>, applicant: Applicant = ANYONE): Promise<Ticket> {
    const usage = this.#usage(applicant.tenant);
    const cap = applicant.maxConcurrent;
    if (cap !== undefined && usage.active + usage.queued >= cap) {
      return Promise.reject(
        new OverloadedError(
          `Tenant ${applicant.tenant} is at its limit of ${cap} requests under way or waiting; try again later`,
          1,
          'max_concurrent',
        ),
      );
    }
    // A free slot and a waiter never coexist (a release hands its slot to the next waiter at
    // once), so a free slot is nobody's turn: no band need be asked who waits.
    if (this.#active < this.#max) {
      this.#active += 1;
      usage.active += 1;
      this.#onWait?.(0, applicant);
      return Promise.resolve(this.#ticket(applicant));
    }
    const victim = this.#victimBelow(applicant.priority);
    if (victim !== undefined) return Promise.resolve(this.#preemptFor(victim, applicant));
    if (this.#queued >= this.#queueSize && !this.#shedBelow(applicant.priority)) {
      return Promise.reject(
        new OverloadedError(
          `The proxy is at capacity: ${this.#max} requests under way and ${this.#queueSize} waiting; try again later`,
          1,
        ),
      );
    }
    return new Promise<Ticket>((resolve, reject) => {
      const timeoutMs = this.#timeoutMs(applicant.priority);
      const waiter: Waiter = {
        applicant,
        admit: resolve,
        refuse: reject,
        timer: undefined,
        queuedAt: this.#now(),
      };
      const expire = () => {
        if (!this.#leave(waiter)) return;
        reject(
          new OverloadedError(
            `The request waited ${timeoutMs} ms for one of ${this.#max} slots; try again later`,
            Math.max(1, Math.ceil(timeoutMs / 1000)),
            'queue_timeout',
          ),
        );
      };
      if (this.#clock === undefined) waiter.timer = setTimeout(expire, timeoutMs);
      else this.#clock.after(timeoutMs, expire);
      this.#enqueue(waiter);
      gaveUp.then(
        () => this.#leave(waiter),
        () => this.#leave(waiter),
      );
    });
  }

  #now(): number {
    return this.#clock === undefined ? performance.now() : this.#clock.now;
  }

  #usage(tenant: string): { active: number; queued: number } {
    let usage = this.#perTenant.get(tenant);
    if (usage === undefined) {
      usage = { active: 0, queued: 0 };
      this.#perTenant.set(tenant, usage);
    }
    return usage;
  }

  /** Drops a tenant's record once it has nothing under way or waiting (tenants come and go). */
  #tidy(tenant: string): void {
    const usage = this.#perTenant.get(tenant);
    if (usage !== undefined && usage.active === 0 && usage.queued === 0) this.#perTenant.delete(tenant);
  }

  #enqueue(waiter: Waiter): void {
    const { priority, tenant } = waiter.applicant;
    let band = this.#bands.get(priority);
    if (band === undefined) {
      band = { tenants: new Map(), turns: [] };
      this.#bands.set(priority, band);
      // Highest first, so that the first band with waiters is the one to serve.
      const sorted = [...this.#bands.entries()].sort(([a], [b]) => b - a);
      this.#bands.clear();
      for (const [key, value] of sorted) this.#bands.set(key, value);
    }
    let own = band.tenants.get(tenant);
    if (own === undefined) {
      own = [];
      band.tenants.set(tenant, own);
      band.turns.push(tenant);
    }
    own.push(waiter);
    this.#queued += 1;
    this.#usage(tenant).queued += 1;
  }

  /**
   * Makes room for a request of `priority` in a full queue: the newest waiter of the lowest
   * band below it, of the tenant with most waiting there (of tenants with as many, the one
   * that has waited longest in that band), is refused. False when no band is lower.
   */
  #shedBelow(priority: number): boolean {
    const lowest = [...this.#bands.keys()].at(-1);
    if (lowest === undefined || lowest >= priority) return false;
    const band = this.#bands.get(lowest) as Band;
    let heaviest: Waiter[] = [];
    for (const own of band.tenants.values()) if (own.length > heaviest.length) heaviest = own;
    const shed = heaviest.at(-1) as Waiter;
    this.#leave(shed);
    shed.refuse(
      new OverloadedError(
        `The proxy is at capacity and gave this request's place to one of higher priority (${priority} over ${lowest}); try again later`,
        1,
        'shed',
      ),
    );
    return true;
  }

  /** Takes `waiter` out of the queue; false if it was not there any more (admitted or gone). */
  #leave(waiter: Waiter): boolean {
    const { priority, tenant } = waiter.applicant;
    const band = this.#bands.get(priority);
    const own = band?.tenants.get(tenant);
    const at = own?.indexOf(waiter) ?? -1;
    if (band === undefined || own === undefined || at === -1) return false;
    own.splice(at, 1);
    clearTimeout(waiter.timer);
    this.#queued -= 1;
    this.#usage(tenant).queued -= 1;
    if (own.length === 0) this.#dropTurn(band, priority, tenant);
    this.#tidy(tenant);
    return true;
  }

  #dropTurn(band: Band, priority: number, tenant: string): void {
    band.tenants.delete(tenant);
    const turn = band.turns.indexOf(tenant);
    if (turn !== -1) band.turns.splice(turn, 1);
    if (band.turns.length === 0) this.#bands.delete(priority);
  }

  #ticket(applicant: Applicant): Ticket {
    const holder: Holder = { applicant, over: false };
    if (this.#preempt && applicant.preempt !== undefined) this.#preemptible.add(holder);
    return {
      release: () => {
        if (this.#end(holder)) this.#next();
      },
    };
  }

  /**
   * Looks again, for the first of the highest band waiting, for a request under way to preempt:
   * one of lower priority may have become stoppable since that waiter came (its prefill over).
   * Its slot goes to that waiter, then it is told. Nothing with preemption off, nobody waiting,
   * or no such request. The host calls it when a request's prefill ends.
   */
  recheck(): void {
    if (!this.#preempt) return;
    const first = this.#bands.keys().next();
    if (first.done === true) return;
    const victim = this.#victimBelow(first.value);
    if (victim === undefined || !this.#end(victim)) return;
    // Its slot to the waiter that asked (the highest band's next in turn), then the victim told.
    this.#next();
    const preempt = victim.applicant.preempt as NonNullable<Applicant['preempt']>;
    preempt(new PreemptedError(victim.applicant.priority, first.value));
  }

  /** Frees `holder`'s slot, once: false when it was freed before (released, or preempted). */
  #end(holder: Holder): boolean {
    if (holder.over) return false;
    holder.over = true;
    this.#preemptible.delete(holder);
    const { tenant } = holder.applicant;
    this.#active -= 1;
    this.#usage(tenant).active -= 1;
    this.#tidy(tenant);
    return true;
  }

  /**
   * The request under way to preempt for one of `priority`: of the preemptible ones below it
   * that can be stopped (no prefill running), the lowest, and of those as low the one admitted
   * last (its work lost is the least). None with preemption off, or none lower and stoppable.
   */
  #victimBelow(priority: number): Holder | undefined {
    let victim: Holder | undefined;
    // In the order admitted: `<=` leaves the newest of the lowest.
    for (const holder of this.#preemptible) {
      const own = holder.applicant.priority;
      if (own >= priority || holder.applicant.stoppable?.() === false) continue;
      if (victim === undefined || own <= victim.applicant.priority) victim = holder;
    }
    return victim;
  }

  /** Gives `victim`'s slot to `applicant` at once, then tells the victim. */
  #preemptFor(victim: Holder, applicant: Applicant): Ticket {
    this.#end(victim);
    this.#active += 1;
    // Read again: ending the victim may have dropped a record of the same tenant.
    this.#usage(applicant.tenant).active += 1;
    this.#onWait?.(0, applicant);
    const ticket = this.#ticket(applicant);
    const preempt = victim.applicant.preempt as NonNullable<Applicant['preempt']>;
    preempt(new PreemptedError(victim.applicant.priority, applicant.priority));
    return ticket;
  }

  /** A slot came free: the highest band's next tenant in turn takes it with its oldest waiter. */
  #next(): void {
    const first = this.#bands.entries().next();
    if (first.done === true) return;
    const [priority, band] = first.value;
    const tenant = band.turns.shift() as string;
    const own = band.tenants.get(tenant) as Waiter[];
    const waiter = own.shift() as Waiter;
    if (own.length === 0) this.#dropTurn(band, priority, tenant);
    else band.turns.push(tenant);
    clearTimeout(waiter.timer);
    this.#queued -= 1;
    const usage = this.#usage(tenant);
    usage.queued -= 1;
    usage.active += 1;
    this.#active += 1;
    this.#onWait?.((this.#now() - waiter.queuedAt) / 1000, waiter.applicant);
    waiter.admit(this.#ticket(waiter.applicant));
  }
}
