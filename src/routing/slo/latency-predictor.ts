// Predicted latency learned online from what the router itself observes (llm-d's sidecar-free
// predicted-latency scorer): per worker, its time to first token from the prompt it must compute
// and the work ahead of it, and its inter-token time from the requests it decodes beside. Each
// is a small recursive least squares fit with forgetting; a worker with few samples borrows its
// pool's fit, so that a new worker is predicted from the first request.
import type { EngineLoadSource, KvIndexSource, KvIndexView } from '../kv-prefix.js';
import type { RoutingInput } from '../routing-input.js';
import type { LoadView } from '../routing-policy.js';
import { OnlineRidge } from './online-regression.js';

/** Which leg a worker serves a request on: prefill, or decode (with the prompt, when aggregated). */
export type LatencyRole = 'prefill' | 'decode';

/**
 * What predicts one request's latency on one worker, read at dispatch (the state then is what
 * the latency measured later follows from): a snapshot, given back with the measurement.
 */
export interface LatencyFeatures {
  /** The leg it is served on (which pool's fit a worker with few samples borrows). */
  readonly role: LatencyRole;
  /** The prompt's tokens the worker must compute: its length less what the worker is expected to hold cached. */
  readonly uncachedTokens: number;
  /**
   * Requests under way on the worker besides this one: its engine's waiting and running (other
   * routers' included) or this router's leases on it, whichever is more (the engine's figure
   * lags by a scrape).
   */
  readonly queue: number;
  /** The prompt tokens of this router's other requests under way on the worker (0 where the pool does not count them). */
  readonly tokensInFlight: number;
  /** Requests decoding on the worker besides this one: its engine's running, or this router's leases on it, whichever is more. */
  readonly running: number;
  /** The share (0 to 1) of its KV cache in use, as its engine reports it; undefined where not known. */
  readonly kvUsage: number | undefined;
}

/** A predicted latency in ms, each part undefined while nothing has been learned to predict it. */
export interface LatencyPrediction {
  /** Time from dispatch to the request's first token. */
  readonly ttftMs: number | undefined;
  /** The mean gap between its tokens (a decode worker's; undefined for prefill features). */
  readonly itlMs: number | undefined;
}

/** Options of {@link LatencyPredictor}. */
export interface LatencyPredictorOptions<W> {
  /** The engines' KV blocks: a prompt's cached share read from them; none: nothing counts as cached but what a policy noted. */
  kvIndex?: KvIndexSource<W> | undefined;
  /** The engines' own load from their `/metrics`; none: this router's leases alone. */
  engineLoad?: EngineLoadSource<W> | undefined;
  /** Each fit's forgetting factor (see `OnlineRidge`): 0.98 by default, about the last 50 samples. */
  forgetting?: number | undefined;
  /** Each fit's starting ridge penalty: 1e-3 by default. */
  ridge?: number | undefined;
  /**
   * Samples a fit needs before it predicts: a worker's own, else its pool's (role's), else the
   * prediction is unknown. 5 by default.
   */
  minSamples?: number | undefined;
}

/** A worker's fits, or a role's (the pool's prior). */
interface Fits {
  readonly ttft: OnlineRidge;
  readonly itl: OnlineRidge;
}

/** The TTFT fit's features: a bias, thousands of uncached tokens, the queue, thousands of tokens in flight. */
const TTFT_FEATURES = 4;
/** The inter-token fit's: a bias, requests running beside, KV usage. */
const ITL_FEATURES = 3;

/**
 * Per-worker TTFT and inter-token time, learned online from the latencies the router observes
 * (no sidecar): snapshot the features at dispatch (`features`), give each measurement back with
 * its snapshot (`learnTtft`, `learnItl`), and ask `predict` per candidate. Workers are known by
 * their `url`. Each update and prediction costs O(d²) for its 3 or 4 features. A worker with
 * fewer than `minSamples` samples is predicted by its role's pool-wide fit, and while that has
 * too few as well the prediction is undefined (unknown: the SLO plugins neither favour nor drop it).
 *
 * @example
 * const predictor = new LatencyPredictor<{ url: string }>();
 * const at = predictor.features(worker, input, 'prefill', pool.load, { counted: true });
 * // ... the first token came 180 ms after dispatch:
 * predictor.learnTtft(worker, at, 180);
 * predictor.predict(worker, predictor.features(worker, next, 'prefill', pool.load)).ttftMs;
 */
export class LatencyPredictor<W extends { url: string }> {
  readonly #kvIndex: (() => KvIndexView<W> | undefined) | undefined;
  readonly #engineLoad: EngineLoadSource<W> | undefined;
  readonly #fit: { forgetting?: number | undefined; ridge?: number | undefined };
  readonly #minSamples: number;
  readonly #workers = new Map<string, Fits>();
  readonly #pools = new Map<LatencyRole, Fits>();

  /**
   * @throws {RangeError} for a `minSamples` that is not a positive whole number, or a fit's options out of range.
   */
  constructor(options: LatencyPredictorOptions<W> = {}) {
    const { kvIndex } = options;
    this.#kvIndex = kvIndex === undefined ? undefined : typeof kvIndex === 'function' ? kvIndex : () => kvIndex.index;
    this.#engineLoad = options.engineLoad;
    this.#fit = { forgetting: options.forgetting, ridge: options.ridge };
    this.#minSamples = options.minSamples ?? 5;
    if (!(Number.isSafeInteger(this.#minSamples) && this.#minSamples > 0)) {
      throw new RangeError(
        `LatencyPredictor's minSamples must be a positive whole number, got ${String(options.minSamples)}`,
      );
    }
    // Checks the fit's options now rather than at the first sample.
    this.#fits();
  }

  /**
   * The features of serving `input` on `worker` as `role`, read now. `load` is the worker's pool's
   * load view (its leases, and the prompt tokens they carry where it counts them); without it,
   * only the engine's load counts. `counted`: whether `load` already counts this request on
   * the worker (read after its lease, at dispatch: `true`; while scoring candidates: `false`,
   * the default), so that the snapshot means the same either way: the work besides this request.
   */
  features(
    worker: W,
    input: RoutingInput | undefined,
    role: LatencyRole,
    load?: LoadView<W>,
    options: { counted?: boolean } = {},
  ): LatencyFeatures {
    const own = options.counted === true ? 1 : 0;
    const prompt = input?.promptTokens ?? 0;
    const leases = Math.max(0, (load?.inFlight(worker) ?? 0) - own);
    const tokens = Math.max(0, (load?.promptTokens?.(worker) ?? 0) - own * prompt);
    const engine = this.#engineLoad?.(worker);
    return {
      role,
      uncachedTokens: Math.max(0, prompt - this.#cached(worker, input)),
      queue: Math.max(leases, engine === undefined ? 0 : engine.waiting + engine.running),
      tokensInFlight: tokens,
      running: Math.max(leases, engine?.running ?? 0),
      kvUsage: engine?.kvUsage,
    };
  }

  /** Learns that a request dispatched to `worker` with `features` had its first token `ms` later. A negative or non-finite `ms` is ignored. */
  learnTtft(worker: W, features: LatencyFeatures, ms: number): void {
    if (!(Number.isFinite(ms) && ms >= 0)) return;
    const x = ttftVector(features);
    this.#worker(worker).ttft.learn(x, ms);
    this.#pool(features.role).ttft.learn(x, ms);
  }

  /** Learns that a request decoded on `worker`, dispatched with `features`, had a mean gap of `ms` between its tokens. A negative or non-finite `ms` is ignored. */
  learnItl(worker: W, features: LatencyFeatures, ms: number): void {
    if (!(Number.isFinite(ms) && ms >= 0)) return;
    const x = itlVector(features);
    this.#worker(worker).itl.learn(x, ms);
    this.#pool(features.role).itl.learn(x, ms);
  }

  /**
   * The latency of a request with `features` on `worker`, never below 0: by the worker's own fit
   * once it has `minSamples` samples, else by its role's pool-wide fit, else undefined. The
   * inter-token time is a decode worker's only.
   */
  predict(worker: W, features: LatencyFeatures): LatencyPrediction {
    const own = this.#workers.get(worker.url);
    const pool = this.#pools.get(features.role);
    const ttft = this.#trusted(own?.ttft, pool?.ttft);
    const itl = features.role === 'decode' ? this.#trusted(own?.itl, pool?.itl) : undefined;
    return {
      ttftMs: ttft === undefined ? undefined : Math.max(0, ttft.predict(ttftVector(features))),
      itlMs: itl === undefined ? undefined : Math.max(0, itl.predict(itlVector(features))),
    };
  }

  /**
   * The latency of a request with `features` by `role`'s pool-wide fit alone (every worker of
   * that leg, whatever its own fit says), undefined while that fit has too few samples: what a
   * worker of that leg would take, for a worker that has not served the leg (a decode worker
   * computing a prompt it never computed before).
   */
  predictPool(role: LatencyRole, features: LatencyFeatures): LatencyPrediction {
    const fits = this.#pools.get(role);
    const ttft = this.#trusted(undefined, fits?.ttft);
    const itl = role === 'decode' ? this.#trusted(undefined, fits?.itl) : undefined;
    return {
      ttftMs: ttft === undefined ? undefined : Math.max(0, ttft.predict(ttftVector(features))),
      itlMs: itl === undefined ? undefined : Math.max(0, itl.predict(itlVector(features))),
    };
  }

  /** How many TTFT and inter-token samples `worker` has given. */
  samples(worker: W): { ttft: number; itl: number } {
    const own = this.#workers.get(worker.url);
    return { ttft: own?.ttft.samples ?? 0, itl: own?.itl.samples ?? 0 };
  }

  /** Forgets what `worker` taught its own fits (it left the fleet); the pool's fits keep it. */
  forget(worker: W): void {
    this.#workers.delete(worker.url);
  }

  /** The fit to predict by: the worker's, once it has enough samples, else the pool's, else none. */
  #trusted(own: OnlineRidge | undefined, pool: OnlineRidge | undefined): OnlineRidge | undefined {
    if (own !== undefined && own.samples >= this.#minSamples) return own;
    if (pool !== undefined && pool.samples >= this.#minSamples) return pool;
    return undefined;
  }

  /**
   * The prompt tokens `worker` is expected to hold: what a policy noted for it (precise-prefix
   * does, before its speculative entry makes the index count the whole prompt), else the
   * engines' KV index's overlap, else none.
   */
  #cached(worker: W, input: RoutingInput | undefined): number {
    if (input === undefined) return 0;
    const noted = input.predictedCached(worker);
    if (noted !== undefined) return noted;
    const index = this.#kvIndex?.();
    const tokens = index === undefined ? undefined : input.tokenIds;
    if (index === undefined || tokens === undefined || tokens.length === 0) return 0;
    return index.overlap(tokens, [worker], index.scopeOf(input.body)).get(worker) ?? 0;
  }

  #worker(worker: W): Fits {
    let fits = this.#workers.get(worker.url);
    if (fits === undefined) {
      fits = this.#fits();
      this.#workers.set(worker.url, fits);
    }
    return fits;
  }

  #pool(role: LatencyRole): Fits {
    let fits = this.#pools.get(role);
    if (fits === undefined) {
      fits = this.#fits();
      this.#pools.set(role, fits);
    }
    return fits;
  }

  #fits(): Fits {
    return { ttft: new OnlineRidge(TTFT_FEATURES, this.#fit), itl: new OnlineRidge(ITL_FEATURES, this.#fit) };
  }
}

/** The TTFT fit's features, in thousands of tokens where tokens, so that the weights are of one scale. */
function ttftVector(features: LatencyFeatures): number[] {
  return [1, features.uncachedTokens / 1000, features.queue, features.tokensInFlight / 1000];
}

/** The inter-token fit's features (KV usage 0 where not known). */
function itlVector(features: LatencyFeatures): number[] {
  return [1, features.running, features.kvUsage ?? 0];
}
