import { describeValue } from '../util/describe-value.js';
import { type Decider, reasonOf } from './decider-plugins.js';
import type { RoutingInput } from './routing-input.js';
import { type Lease, NoWorkerError, type WorkerPool } from './worker-pool.js';

/**
 * Which workers serve one attempt of a request, and how:
 * - `disaggregated`: prefill on `prefill` (none when the caller's prefill engine picks its
 *   own worker), then decode on `decode`;
 * - `aggregated`: decode alone, `reason` saying why (`'no-prefill-worker'`, or the P/D
 *   decider's: `'short-prompt'`, `'migration'`, ...).
 * The leases are the caller's to release (the flow does, by each leg's outcome).
 */
export type Decision<P, D> =
  | {
      readonly strategy: 'disaggregated';
      readonly prefill: Lease<P> | undefined;
      readonly decode: Lease<D> | undefined;
    }
  | { readonly strategy: 'aggregated'; readonly reason: string; readonly decode: Lease<D> | undefined };

/**
 * The order in which {@link Scheduler.decide} picks the legs: each pick sees the workers of the
 * legs before it (`RoutingInput.picked`), never those after.
 */
export const LEG_ORDER: readonly ('prefill' | 'decode')[] = Object.freeze(['prefill', 'decode'] as const);

/** A decision being made: its legs' leases so far and why it serves on decode alone, if it does. */
interface Picks<P, D> {
  reason: string | undefined;
  prefill: Lease<P> | undefined;
  decode: Lease<D> | undefined;
}

/** The workers of a request's earlier attempts to pass over while another is in rotation. */
export interface Avoid<P, D> {
  readonly prefill?: readonly P[] | undefined;
  readonly decode?: readonly D[] | undefined;
}

/** Options of {@link Scheduler}. */
export interface SchedulerOptions<P, D> {
  /** The prefill pool, its policy choosing one per request; or `prefillWorker`. */
  prefillWorkers?: WorkerPool<P> | undefined;
  /** The one prefill worker (no pool): every disaggregated request goes to it. */
  prefillWorker?: P | undefined;
  /** The decode pool; without one, the caller's decode engine picks its own worker. */
  decodeWorkers?: WorkerPool<D> | undefined;
  /**
   * Without a prefill worker in rotation: serve on decode alone (`'aggregate'`, the default,
   * as the reference router does) or fail with a `NoWorkerError` (`'fail'`).
   */
  noPrefillWorker?: 'aggregate' | 'fail' | undefined;
  /**
   * The model its pools serve, named with the pool in a `NoWorkerError`'s message (the proxy
   * gives each model's pools theirs); none by default.
   */
  model?: string | undefined;
  /**
   * The P/D decider: the reason to serve a request on decode alone, or undefined to
   * disaggregate it ({@link decidersFrom} makes one from registered deciders' names); asked
   * by {@link Scheduler.verdict}. None by default: every request is disaggregated while a
   * prefill worker is in rotation.
   */
  decider?: Decider | undefined;
}

/**
 * The one answer to "which workers for this request": the P/D decision (disaggregate, or serve
 * on decode alone and why) and a lease of each pool's worker, as the pools' policies choose
 * them. `disaggregate` asks it once per attempt; a router that only routes (an endpoint picker
 * that names the workers and lets a gateway send the request) asks it and sends nothing.
 *
 * @example
 * const scheduler = new Scheduler({ prefillWorkers, decodeWorkers, decider: decidersFrom([{ name: 'short-prompt' }]) });
 * const input = new RoutingInput({ prompt: 'Hi' });
 * const decision = scheduler.decide(input, {}, await scheduler.verdict(input)); // 'short-prompt': decode alone
 * const prefillWorker = decision.strategy === 'disaggregated' ? decision.prefill?.worker : undefined; // undefined
 * decision.decode?.release('success');
 */
export class Scheduler<P, D> {
  readonly #options: SchedulerOptions<P, D>;
  /** Each request's verdict, by its routing input (gone with it). */
  readonly #verdicts = new WeakMap<RoutingInput, Promise<string | undefined>>();

  constructor(options: SchedulerOptions<P, D> = {}) {
    this.#options = options;
  }

  /** The decode pool, if there is one (for migration's watch of a worker leaving it). */
  get decodeWorkers(): WorkerPool<D> | undefined {
    return this.#options.decodeWorkers;
  }

  /** Whether it has a P/D decider to ask ({@link SchedulerOptions.decider}). */
  get decides(): boolean {
    return this.#options.decider !== undefined;
  }

  /**
   * The P/D decider's verdict for one request: the reason to serve it on decode alone
   * (`'short-prompt'`), or undefined to disaggregate it (always, without a decider). The
   * decider is asked once per routing input, before the request's first attempt (it may wait
   * on a cache lookup); asked again for the same input, the same answer comes back. Each
   * attempt's {@link decide} then takes it.
   *
   * @example
   * const scheduler = new Scheduler({ decodeWorkers, decider: (input) => (input.promptText.length < 64 ? 'short-prompt' : undefined) });
   * const input = new RoutingInput({ prompt: 'Hi' });
   * const because = await scheduler.verdict(input); // 'short-prompt'
   * const decision = scheduler.decide(input, {}, because);
   *
   * @throws (rejects with) whatever the decider throws (the flow logs it and disaggregates the request).
   */
  verdict(input: RoutingInput): Promise<string | undefined> {
    const { decider } = this.#options;
    if (decider === undefined) return Promise.resolve(undefined);
    // One answer per request, whoever asks (a pipeline's prepare stage, then the flow).
    let verdict = this.#verdicts.get(input);
    if (verdict === undefined) {
      verdict = (async () => reasonOf(await decider(input)))();
      this.#verdicts.set(input, verdict);
    }
    return verdict;
  }

  /**
   * The workers for one attempt, passing over `avoid` while others are in rotation.
   * `aggregatedBecause` is the P/D decider's verdict for the request ({@link verdict}, or a
   * caller's own): given, the request goes to decode alone. The legs are picked one after
   * another in {@link LEG_ORDER}, each pick noted in `input.picked`, so that a later leg's
   * filter sees the earlier legs' workers (`same-label` pairs decode with prefill).
   *
   * @throws {NoWorkerError} when no decode worker is in rotation, or no prefill worker with
   *   `noPrefillWorker: 'fail'` (its `pool` says which, `prefill` or `decode`); nothing is
   *   leased then.
   */
  decide(input: RoutingInput, avoid: Avoid<P, D> = {}, aggregatedBecause?: string): Decision<P, D> {
    // A decider's later answer passed on unawaited would read as a reason and aggregate every request.
    if (typeof aggregatedBecause !== 'string' && aggregatedBecause !== undefined) {
      throw new TypeError(
        `decide's aggregatedBecause must be a reason or undefined, got ${describeValue(aggregatedBecause)}: await scheduler.verdict(input) first`,
      );
    }
    input.clearPicked();
    const picks: Picks<P, D> = { reason: aggregatedBecause, prefill: undefined, decode: undefined };
    try {
      for (const leg of LEG_ORDER) {
        if (leg === 'prefill') picks.prefill = this.#pickPrefill(picks, avoid.prefill, input);
        else picks.decode = this.#pickDecode(avoid.decode, input);
        input.notePicked(leg, picks[leg]?.worker);
      }
    } catch (error) {
      picks.prefill?.release();
      picks.decode?.release();
      throw error;
    }
    const { reason, prefill, decode } = picks;
    return reason === undefined
      ? { strategy: 'disaggregated', prefill, decode }
      : { strategy: 'aggregated', reason, decode };
  }

  /**
   * The prefill lease, unless the request goes to decode alone: `picks.reason` given, or set
   * here to `'no-prefill-worker'` when none is in rotation.
   */
  #pickPrefill(picks: Picks<P, D>, avoid: readonly P[] | undefined, input: RoutingInput): Lease<P> | undefined {
    const { prefillWorkers, prefillWorker } = this.#options;
    if (picks.reason !== undefined) return undefined;
    if (prefillWorkers === undefined) return prefillWorker === undefined ? undefined : fixedLease(prefillWorker);
    if (prefillWorkers.available.length > 0) return prefillWorkers.acquire(avoid, input);
    if (this.#options.noPrefillWorker === 'fail')
      throw new NoWorkerError(prefillWorkers.workers.length, 'prefill', this.#options.model);
    picks.reason = 'no-prefill-worker';
    return undefined;
  }

  /** The decode lease; none without a decode pool. */
  #pickDecode(avoid: readonly D[] | undefined, input: RoutingInput): Lease<D> | undefined {
    const { decodeWorkers } = this.#options;
    return decodeWorkers === undefined ? undefined : this.#acquireDecode(decodeWorkers, avoid, input);
  }

  /**
   * Another decode worker for the same request (a sequential handoff sent again, a migration),
   * passing over `avoid`; undefined without a decode pool.
   *
   * @throws {NoWorkerError} when none is left in rotation (its `pool` is `decode`).
   */
  decodeElsewhere(avoid: readonly D[], input: RoutingInput): Lease<D> | undefined {
    // The decision's other picks stay in view (a decode paired with its prefill stays paired).
    input.notePicked('decode', undefined);
    const lease = this.#pickDecode(avoid, input);
    input.notePicked('decode', lease?.worker);
    return lease;
  }

  /** A decode lease; the pool's NoWorkerError told again naming the pool and the model. */
  #acquireDecode(pool: WorkerPool<D>, avoid: readonly D[] | undefined, input: RoutingInput): Lease<D> {
    try {
      return pool.acquire(avoid, input);
    } catch (error) {
      if (!NoWorkerError.is(error)) throw error;
      throw new NoWorkerError(pool.workers.length, 'decode', this.#options.model, error.why);
    }
  }
}

/** A lease of a worker that belongs to no pool: nothing to count, nothing to release. */
function fixedLease<W>(worker: W): Lease<W> {
  return { worker, release: () => {} };
}
