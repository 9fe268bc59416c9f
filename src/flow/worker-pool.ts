import type { RoutingInput } from '../routing/routing-input.js';
import type { RoutingPolicy } from '../routing/routing-policy.js';
import { describeValue } from '../util/describe-value.js';
import { branded, DisaggError } from '../util/disagg-error.js';

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
  selection?: Selection<W>;
}

/** One use of a worker: `release()` (idempotent) when the leg on it is over. */
export interface Lease<W> {
  readonly worker: W;
  release(): void;
}

/** Every worker of a pool is out of rotation (marked down by health checks). */
export class NoWorkerError extends DisaggError {
  static override readonly is = branded<NoWorkerError>('NoWorkerError');
  declare readonly code: 'DISAGG_NO_WORKER';
  readonly kind = 'no_worker';
  readonly retryable = true;

  constructor(size: number) {
    super('DISAGG_NO_WORKER', `No worker is available: all ${size} of the pool are out of rotation`);
  }
}

/**
 * A list of interchangeable workers (prefill or decode) and the choice among them, with a
 * count of requests in flight on each that `disaggregate` keeps: a worker is leased when its
 * leg is dispatched and released when that leg is over (a prefill leg when prefill has
 * settled, a decode leg when its stream has ended or been cleaned up).
 *
 * Share one pool between requests; its counts are what least-in-flight chooses by.
 *
 * @example
 * const prefillWorkers = new WorkerPool(
 *   [{ url: 'http://p0:8000', bootstrapHost: 'p0', bootstrapPort: 8998 }],
 *   { selection: 'least-in-flight' },
 * );
 * disaggregate({ ..., prefillWorkers, prefill: (body, context, worker) => call(worker.url, body, context) });
 */
export class WorkerPool<W> {
  readonly #workers: readonly W[];
  readonly #inFlight = new Map<W, number>();
  readonly #down = new Set<W>();
  readonly #select: (candidates: readonly W[], pool: WorkerPool<W>, input: RoutingInput | undefined) => W;
  readonly #policy: RoutingPolicy<W> | undefined;
  #turn = 0;

  /**
   * @throws {TypeError} for an empty list, or an unknown selection.
   */
  constructor(workers: readonly W[], options: WorkerPoolOptions<W> = {}) {
    if (!Array.isArray(workers) || workers.length === 0) {
      throw new TypeError(`WorkerPool expects a non-empty array of workers, got ${describeValue(workers)}`);
    }
    this.#workers = Object.freeze([...workers]);
    for (const worker of this.#workers) this.#inFlight.set(worker, 0);
    const selection = options.selection ?? 'round-robin';
    if (selection === 'round-robin') this.#select = (candidates) => this.#next(candidates);
    else if (selection === 'least-in-flight') this.#select = (candidates) => this.#leastInFlight(candidates);
    else if (typeof selection === 'function') this.#select = selection;
    else if (isPolicy<W>(selection)) {
      this.#policy = selection;
      this.#select = (candidates, pool, input) => selection.select(candidates, pool, input);
    } else {
      throw new TypeError(
        `Unknown worker selection ${describeValue(selection)}: expected 'round-robin', 'least-in-flight', a routing policy (such as cacheAware()) or a function`,
      );
    }
  }

  /** The workers, in the order given. */
  get workers(): readonly W[] {
    return this.#workers;
  }

  /** The workers in rotation: all but those marked down. */
  get available(): readonly W[] {
    return this.#down.size === 0 ? this.#workers : this.#workers.filter((worker) => !this.#down.has(worker));
  }

  /**
   * Takes a worker out of rotation (`false`, say after failed health checks) or puts it back
   * (`true`). Leases already taken are not affected.
   *
   * @throws {TypeError} for a worker that is not in this pool.
   */
  setAvailable(worker: W, available: boolean): void {
    if (!this.#inFlight.has(worker)) {
      throw new TypeError(`setAvailable: ${describeValue(worker)} is not a worker of this pool`);
    }
    if (available) this.#down.delete(worker);
    else if (!this.#down.has(worker)) {
      this.#down.add(worker);
      this.#policy?.forget?.(worker);
    }
  }

  /** Whether `worker` is in rotation. */
  isAvailable(worker: W): boolean {
    return this.#inFlight.has(worker) && !this.#down.has(worker);
  }

  /** How many leases of `worker` are not yet released. */
  inFlight(worker: W): number {
    return this.#inFlight.get(worker) ?? 0;
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
    const available = this.available;
    if (available.length === 0) throw new NoWorkerError(this.#workers.length);
    const others = avoid === undefined || avoid.length === 0 ? available : available.filter((w) => !avoid.includes(w));
    const candidates = others.length > 0 ? others : available;
    const worker = this.#select(candidates, this, input);
    if (!candidates.includes(worker)) {
      throw new TypeError(`The worker selection returned ${describeValue(worker)}, which is not a worker of this pool`);
    }
    this.#inFlight.set(worker, (this.#inFlight.get(worker) as number) + 1);
    let released = false;
    return {
      worker,
      release: () => {
        if (released) return;
        released = true;
        this.#inFlight.set(worker, (this.#inFlight.get(worker) as number) - 1);
      },
    };
  }

  #next(candidates: readonly W[]): W {
    const worker = candidates[this.#turn % candidates.length] as W;
    this.#turn = (this.#turn + 1) % candidates.length;
    return worker;
  }

  #leastInFlight(candidates: readonly W[]): W {
    // Start from the round-robin position so that ties rotate instead of piling on the first.
    const start = this.#turn % candidates.length;
    let best = candidates[start] as W;
    for (let offset = 1; offset < candidates.length; offset++) {
      const worker = candidates[(start + offset) % candidates.length] as W;
      if (this.inFlight(worker) < this.inFlight(best)) best = worker;
    }
    this.#turn = (start + 1) % candidates.length;
    return best;
  }
}

function isPolicy<W>(value: unknown): value is RoutingPolicy<W> {
  return typeof value === 'object' && value !== null && typeof (value as RoutingPolicy<W>).select === 'function';
}
