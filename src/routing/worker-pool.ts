import { describeValue } from '../util/describe-value.js';
import { leastInFlight } from './least-in-flight.js';
import { NoWorkerError } from './no-worker-error.js';
import { roundRobin } from './round-robin.js';
import type { RoutingInput } from './routing-input.js';
import type { LoadView, RoutingPolicy } from './routing-policy.js';

export { NoWorkerError } from './no-worker-error.js';

/**
 * Picks one worker for a request. Built in: `'round-robin'` (each worker in turn) and
 * `'least-in-flight'` (the worker with the fewest requests under way, ties in turn); a
 * {@link RoutingPolicy} (`cacheAware()`, `powerOfTwo()`, `sessionAffinity()` or your own),
 * which also sees the request. A function gets the candidates, the pool (for `inFlight`) and
 * the request, and returns one of the candidates.
 */
export type Selection<W> =
  | 'round-robin'
  | 'least-in-flight'
  | RoutingPolicy<W>
  | ((candidates: readonly W[], pool: WorkerPool<W>, input: RoutingInput | undefined) => W);

/** Options of {@link WorkerPool}. */
export interface WorkerPoolOptions<W> {
  /** How a worker is chosen; `'round-robin'` when omitted. */
  selection?: Selection<W> | undefined;
  /**
   * What other replicas of the router have in flight on each worker (`sharedInFlight`'s view,
   * or your own): a routing policy then sees this pool's own count plus theirs, so that
   * replicas balance as one. The pool's own `inFlight`, its gauges and its drain count only
   * its own leases. None by default.
   */
  peerLoad?: LoadView<W> | undefined;
  /**
   * How many prompt tokens a lease carries (its request's), counted in
   * {@link WorkerPool.promptTokensInFlight} until it is released: the backlog a scaling signal
   * reads (the proxy gives the tokenizer's count, else a quarter of the prompt's text). None
   * counted by default.
   */
  promptTokens?: ((input: RoutingInput | undefined) => number) | undefined;
}

/**
 * How a leg on a worker ended, for the pool's routing policy: `success`, the worker did its part
 * (it now holds the request's prompt in its cache); `failure`, it did not.
 */
export type LegOutcome = 'success' | 'failure';

/**
 * One use of a worker: `release()` (idempotent) when the leg on it is over, with how it ended
 * when that is known, which the pool's routing policy learns from (`completed`).
 */
export interface Lease<W> {
  readonly worker: W;
  release(outcome?: LegOutcome): void;
}

/** Where a worker of a pool stands: serving, out of rotation after failures, or draining. */
export type WorkerState = 'ready' | 'down' | 'draining';

/** A leaving worker (draining, or removed with leases out) and who waits for its last release. */
interface Leaving {
  readonly draining: boolean;
  readonly idle: () => void;
  readonly done: Promise<void>;
}

/**
 * Everything the pool knows of one worker: its leases out, whether health took it out of
 * rotation, and whether it is leaving. Its {@link WorkerState} is derived from these, never
 * stored beside them. A record outlives the worker's place in the list while leases are out.
 */
interface PoolRecord {
  inFlight: number;
  /** The prompt tokens of those leases (see `WorkerPoolOptions.promptTokens`). */
  tokens: number;
  down: boolean;
  leaving: Leaving | undefined;
}

/**
 * A list of interchangeable workers (prefill or decode) and the choice among them: the unit
 * `disaggregate`, the health checks and the routing policies share.
 *
 * - **Choice**: `acquire` picks a worker in rotation by the pool's selection (`'round-robin'` by
 *   default, `'least-in-flight'`, a {@link RoutingPolicy} such as `cacheAware()` or
 *   `precisePrefix(...)`, or a function) and counts one more request on it until the lease is
 *   released; `disaggregate` leases a worker when its leg is dispatched and releases it when
 *   that leg is over (a prefill leg when prefill has settled, a decode leg when its stream has
 *   ended or been cleaned up), telling the policy how the leg went.
 * - **Rotation**: `setAvailable(worker, false)` takes a worker out (health checks do:
 *   `watchHealth` from `disagg/server`), `true` puts it back; `onDown` tells who waits on it.
 * - **Membership**: `add`, `drain` (no new lease; it leaves once its leases are released) and
 *   `remove` (at once; leases out stay valid) change the list at run time; `onChange` tells
 *   who follows it (KV events, health). Nothing here sets a timer or holds the process.
 *
 * Share one pool between requests; its counts are what least-in-flight chooses by. A worker
 * is any value (an object with a `url` for `httpEngine` and the health checks), compared by
 * identity.
 *
 * @throws {TypeError} from the constructor: something other than an array, a worker listed twice, an unknown selection.
 * @example
 * const prefillWorkers = new WorkerPool(
 *   [{ url: 'http://p0:8000', bootstrapPort: 8998 }, { url: 'http://p1:8000', bootstrapPort: 8998 }],
 *   { selection: cacheAware() },
 * );
 * const decodeWorkers = new WorkerPool([{ url: 'http://d0:8000' }], { selection: 'least-in-flight' });
 * await disaggregate({ ...request, connector: sglangBootstrap, prefillWorkers, decodeWorkers, prefill: httpEngine(), decode: httpEngine() });
 */
export class WorkerPool<W> {
  /** Replaced, never changed in place: a caller iterating `workers` is not disturbed by a change. */
  #workers: readonly W[];
  readonly #records = new Map<W, PoolRecord>();
  /** Who is told when a worker joins or leaves (see {@link onChange}). */
  readonly #changeListeners = new Set<() => void>();
  /** Who waits for a worker to be taken out of rotation (a migrating stream on it). */
  readonly #downWatchers = new Map<W, Set<() => void>>();
  /** The workers in rotation, derived from the records when one changes (read on every request). */
  #available: readonly W[];
  readonly #select: (candidates: readonly W[], pool: WorkerPool<W>, input: RoutingInput | undefined) => W;
  readonly #policy: RoutingPolicy<W> | undefined;
  readonly #load: LoadView<W>;
  readonly #promptTokens: ((input: RoutingInput | undefined) => number) | undefined;
  /** The prompt tokens of `worker`'s leases not yet released, as the `promptTokens` option counts them (0 without it). */
  promptTokens(worker: W): number {
    return this.#records.get(worker)?.tokens ?? 0;
  }

  /** Leases not yet released, over every worker (removed ones' included), and their prompt tokens. */
  #leasesOut = 0;
  #tokensOut = 0;

  /**
   * `workers` may be empty for a pool filled at run time ({@link add}, discovery): until then
   * `acquire` throws {@link NoWorkerError}.
   *
   * @throws {TypeError} for something other than an array, a worker listed twice, or an unknown selection.
   */
  constructor(workers: readonly W[], options: WorkerPoolOptions<W> = {}) {
    if (!Array.isArray(workers)) {
      throw new TypeError(`WorkerPool expects an array of workers, got ${describeValue(workers)}`);
    }
    if (new Set(workers).size !== workers.length) {
      throw new TypeError('WorkerPool expects each worker once: the list names one twice');
    }
    this.#workers = Object.freeze([...workers]);
    for (const worker of this.#workers)
      this.#records.set(worker, { inFlight: 0, tokens: 0, down: false, leaving: undefined });
    this.#available = this.#workers;
    // The two names are the built-in policies of the same names (one turn per pool, as before).
    const given = options.selection ?? 'round-robin';
    const selection =
      given === 'round-robin' ? roundRobin<W>() : given === 'least-in-flight' ? leastInFlight<W>() : given;
    // What a policy sees: this pool's own leases, and the other replicas' where they are shared.
    const peers = options.peerLoad;
    const load: LoadView<W> =
      peers === undefined
        ? this
        : {
            inFlight: (worker) => this.inFlight(worker) + peers.inFlight(worker),
            // The replicas share counts of requests, not of their tokens: this router's own.
            promptTokens: (worker) => this.promptTokens(worker),
          };
    this.#load = load;
    this.#promptTokens = options.promptTokens;
    if (typeof selection === 'function') this.#select = selection;
    else if (isPolicy<W>(selection)) {
      this.#policy = selection;
      this.#select = (candidates, _pool, input) => selection.select(candidates, load, input);
    } else {
      throw new TypeError(
        `Unknown worker selection ${describeValue(selection)}: expected 'round-robin', 'least-in-flight', a routing policy (such as cacheAware()) or a function`,
      );
    }
  }

  /** The workers, in the order given then added; draining ones until they leave. */
  get workers(): readonly W[] {
    return this.#workers;
  }

  /** The workers in rotation: all but those marked down or draining. */
  get available(): readonly W[] {
    return this.#available;
  }

  /** Whether `worker` is one of the pool's (draining ones included). */
  has(worker: W): boolean {
    return this.#workers.includes(worker);
  }

  /** Where `worker` stands, or undefined when it is not one of the pool's. */
  stateOf(worker: W): WorkerState | undefined {
    if (!this.has(worker)) return undefined;
    return stateOf(this.#records.get(worker) as PoolRecord);
  }

  /**
   * Adds a worker at run time, in rotation at once unless `available` is false (say, until a
   * first health probe passes).
   *
   * @throws {TypeError} for a worker already in the pool (a draining one included: it leaves first).
   */
  add(worker: W, options: { available?: boolean } = {}): void {
    if (this.has(worker)) throw new TypeError(`add: ${describeValue(worker)} is already a worker of this pool`);
    this.#workers = Object.freeze([...this.#workers, worker]);
    // A worker removed earlier with leases still out keeps its count (releasing them stays
    // exact) and is no longer leaving: whoever waited for it to leave is answered now.
    const record = this.#records.get(worker) ?? { inFlight: 0, tokens: 0, down: false, leaving: undefined };
    this.#records.set(worker, record);
    const leaving = record.leaving;
    record.leaving = undefined;
    leaving?.idle();
    if (options.available === false) record.down = true;
    this.#changed();
    this.#joinedOrLeft();
  }

  /**
   * Takes a worker out of rotation for good: no new lease; it stays listed (state `draining`)
   * until its leases are released, then leaves the pool. Resolves when it has left.
   * Draining twice returns the same promise.
   *
   * @throws {TypeError} for a worker that is not in this pool.
   */
  drain(worker: W): Promise<void> {
    const leaving = this.#records.get(worker)?.leaving;
    if (leaving?.draining) return leaving.done;
    if (!this.has(worker)) throw new TypeError(`drain: ${describeValue(worker)} is not a worker of this pool`);
    this.#policy?.forget?.(worker);
    const entry = this.#leave(worker, true);
    this.#settleIfIdle(worker);
    return entry.done;
  }

  /**
   * Removes a worker at once: it is no longer listed nor chosen; requests under way on it
   * finish (their leases stay valid). Resolves when the last of them is released.
   *
   * @throws {TypeError} for a worker that is not in this pool.
   */
  remove(worker: W): Promise<void> {
    if (!this.has(worker)) throw new TypeError(`remove: ${describeValue(worker)} is not a worker of this pool`);
    const record = this.#records.get(worker) as PoolRecord;
    const entry = record.leaving ?? this.#leave(worker, false);
    this.#policy?.forget?.(worker);
    this.#workers = Object.freeze(this.#workers.filter((w) => w !== worker));
    record.down = false;
    this.#changed();
    this.#joinedOrLeft();
    this.#settleIfIdle(worker);
    return entry.done;
  }

  #leave(worker: W, draining: boolean): Leaving {
    let idle = (): void => {};
    const done = new Promise<void>((resolve) => {
      idle = resolve;
    });
    const entry = { draining, idle, done };
    (this.#records.get(worker) as PoolRecord).leaving = entry;
    this.#changed();
    return entry;
  }

  /** A leaving worker without leases leaves for good: out of the list, its record forgotten. */
  #settleIfIdle(worker: W): void {
    const record = this.#records.get(worker);
    const entry = record?.leaving;
    if (record === undefined || entry === undefined || record.inFlight > 0) return;
    this.#records.delete(worker);
    const listed = this.has(worker);
    if (listed) this.#workers = Object.freeze(this.#workers.filter((w) => w !== worker));
    this.#changed();
    if (listed) this.#joinedOrLeft();
    entry.idle();
  }

  /**
   * Calls `listener` after each change of the pool's list of workers: one added, one removed,
   * one gone at the end of its drain (not a change of rotation: see {@link onDown}). What
   * follows the pool's workers (KV events, say) reads `workers` again then. The listener must
   * not throw: what it throws is ignored. Returns what stops the calls.
   *
   * @example
   * const stop = pool.onChange(() => follower.reconcile()); // subscribe to each worker that joins
   */
  onChange(listener: () => void): () => void {
    const own = () => listener();
    this.#changeListeners.add(own);
    return () => {
      this.#changeListeners.delete(own);
    };
  }

  #joinedOrLeft(): void {
    for (const listener of this.#changeListeners) {
      try {
        listener();
      } catch {
        // A listener's own failure is not the pool's: the change stands.
      }
    }
  }

  /** The list or a record's rotation changed: derive who is in rotation again. */
  #changed(): void {
    const all = this.#workers;
    const available = all.filter((worker) => stateOf(this.#records.get(worker) as PoolRecord) === 'ready');
    this.#available = available.length === all.length ? all : Object.freeze(available);
  }

  /**
   * Takes a worker out of rotation (`false`, say after failed health checks) or puts it back
   * (`true`). Leases already taken are not affected.
   *
   * @throws {TypeError} for a worker that is not in this pool.
   */
  setAvailable(worker: W, available: boolean): void {
    if (!this.has(worker)) {
      throw new TypeError(`setAvailable: ${describeValue(worker)} is not a worker of this pool`);
    }
    const record = this.#records.get(worker) as PoolRecord;
    if (record.down === !available) return;
    record.down = !available;
    this.#changed();
    if (!available) {
      this.#policy?.forget?.(worker);
      const watchers = this.#downWatchers.get(worker);
      this.#downWatchers.delete(worker);
      for (const watcher of watchers ?? []) watcher();
    }
  }

  /**
   * Calls `listener` once, when `worker` is next taken out of rotation (`setAvailable(worker,
   * false)`: failed health checks, an open circuit); a drain or a removal does not call it,
   * since a leaving worker finishes what it serves. Returns what stops the watch.
   *
   * @example
   * const unwatch = pool.onDown(worker, () => giveUpStreamOn(worker));
   */
  onDown(worker: W, listener: () => void): () => void {
    let watchers = this.#downWatchers.get(worker);
    if (watchers === undefined) {
      watchers = new Set();
      this.#downWatchers.set(worker, watchers);
    }
    const own = () => listener();
    watchers.add(own);
    return () => {
      const current = this.#downWatchers.get(worker);
      current?.delete(own);
      if (current?.size === 0) this.#downWatchers.delete(worker);
    };
  }

  /** Whether `worker` is in rotation. */
  isAvailable(worker: W): boolean {
    return this.has(worker) && stateOf(this.#records.get(worker) as PoolRecord) === 'ready';
  }

  /** How many leases of `worker` are not yet released. */
  inFlight(worker: W): number {
    return this.#records.get(worker)?.inFlight ?? 0;
  }

  /** Leases not yet released, over every worker (those removed with leases out too): this router's requests under way here. */
  get requestsInFlight(): number {
    return this.#leasesOut;
  }

  /** The prompt tokens of the leases not yet released, as the `promptTokens` option counts them (0 without it). */
  get promptTokensInFlight(): number {
    return this.#tokensOut;
  }

  /**
   * What the pool's routing policy sees of the load on its workers: its own leases, plus the
   * other replicas' where `peerLoad` shares them; so every replica reads the same.
   */
  get load(): LoadView<W> {
    return this.#load;
  }

  /**
   * Chooses a worker in rotation and counts one more request on it until the lease is released.
   * Workers in `avoid` (those a retry of the same request just failed on) are passed over while
   * another one is in rotation. `input` is the request, for policies that route by it.
   *
   * @throws {NoWorkerError} when every worker is out of rotation;
   *   {TypeError} when a selection function returns something that is not one of the candidates.
   */
  acquire(avoid?: readonly W[], input?: RoutingInput): Lease<W> {
    const available = this.#available;
    if (available.length === 0) throw new NoWorkerError(this.#workers.length);
    const others = avoid === undefined || avoid.length === 0 ? available : available.filter((w) => !avoid.includes(w));
    const candidates = others.length > 0 ? others : available;
    const worker = this.#select(candidates, this, input);
    if (!candidates.includes(worker)) {
      throw new TypeError(`The worker selection returned ${describeValue(worker)}, which is not a worker of this pool`);
    }
    return this.#lease(worker, input);
  }

  /**
   * Counts one more request on `worker` itself, chosen elsewhere, until the lease is released:
   * the pod a gateway reports having served a request its endpoint picker had sent to another
   * (Envoy went down its fallback list). The policy hears of it as of a choice of its own.
   *
   * @throws {TypeError} for a worker that is not in this pool.
   */
  lease(worker: W, input?: RoutingInput): Lease<W> {
    if (!this.has(worker)) throw new TypeError(`${describeValue(worker)} is not a worker of this pool`);
    return this.#lease(worker, input);
  }

  #lease(worker: W, input: RoutingInput | undefined): Lease<W> {
    // The record stays while a lease is out (settleIfIdle waits for zero), so it is this one's.
    const record = this.#records.get(worker) as PoolRecord;
    record.inFlight++;
    // Counted once at the lease and given back the same at its release, whatever the input becomes.
    const tokens = this.#promptTokens?.(input) ?? 0;
    record.tokens += tokens;
    this.#leasesOut++;
    this.#tokensOut += tokens;
    this.#policy?.routed?.(worker, input);
    let released = false;
    return {
      worker,
      release: (outcome?: LegOutcome) => {
        if (released) return;
        released = true;
        record.inFlight--;
        record.tokens -= tokens;
        this.#leasesOut--;
        this.#tokensOut -= tokens;
        this.#settleIfIdle(worker);
        if (outcome !== undefined) this.#policy?.completed?.(worker, input, outcome);
      },
    };
  }
}

function stateOf(record: PoolRecord): WorkerState {
  if (record.leaving !== undefined) return 'draining';
  return record.down ? 'down' : 'ready';
}

function isPolicy<W>(value: unknown): value is RoutingPolicy<W> {
  return typeof value === 'object' && value !== null && typeof (value as RoutingPolicy<W>).select === 'function';
}
