// Recursive least squares with exponential forgetting: an online ridge regression whose update
// and prediction cost O(d²) for d features, with no history kept. The predicted-latency plugins
// fit one per worker and per pool, on every request, so it must stay that cheap.

/** Options of {@link OnlineRidge}. */
export interface OnlineRidgeOptions {
  /**
   * How much each older sample still counts per newer one, in (0, 1]: 0.98 by default, so that
   * the fit follows roughly the last 50 samples (1 / (1 − 0.98)) and forgets a relation that changed.
   */
  forgetting?: number | undefined;
  /**
   * The ridge penalty the fit starts with (the prior's precision around zero weights): 1e-3 by
   * default, weak enough that a handful of samples outweighs it.
   */
  ridge?: number | undefined;
}

/**
 * Linear regression learned one sample at a time (recursive least squares, the exact solution of
 * ridge regression over exponentially weighted samples): `learn(x, y)` and `predict(x)` each cost
 * O(d²) for d features. Older samples count `forgetting` times less per newer one, so the fit
 * tracks a relation that drifts. The inverse covariance is kept from growing without bound while
 * a feature does not vary (forgetting alone would inflate it along that direction until one new
 * sample swings the weights): it is discounted only while its trace is under the prior's.
 *
 * @example
 * const fit = new OnlineRidge(2);
 * for (let x = 0; x < 20; x++) fit.learn([1, x], 3 + 2 * x);
 * fit.predict([1, 10]); // about 23
 *
 * @throws {RangeError} for a dimension that is not a positive whole number, or options out of range.
 */
export class OnlineRidge {
  /** How many features each sample has (the bias among them, where the caller adds one). */
  readonly dimension: number;
  readonly #forgetting: number;
  /** Weights, one per feature. */
  readonly #weights: Float64Array;
  /** The inverse of the weighted covariance (plus the ridge), row-major d × d. */
  readonly #inverse: Float64Array;
  /** Its trace at the start: the bound past which forgetting no longer inflates it. */
  readonly #maxTrace: number;
  /** Scratch vectors, so that an update allocates nothing. */
  readonly #px: Float64Array;
  #samples = 0;

  constructor(dimension: number, options: OnlineRidgeOptions = {}) {
    if (!(Number.isSafeInteger(dimension) && dimension > 0)) {
      throw new RangeError(`OnlineRidge needs a positive whole number of features, got ${String(dimension)}`);
    }
    const forgetting = options.forgetting ?? 0.98;
    if (!(forgetting > 0 && forgetting <= 1)) {
      throw new RangeError(`OnlineRidge's forgetting must be above 0 and at most 1, got ${String(forgetting)}`);
    }
    const ridge = options.ridge ?? 1e-3;
    if (!(Number.isFinite(ridge) && ridge > 0)) {
      throw new RangeError(`OnlineRidge's ridge must be a positive number, got ${String(ridge)}`);
    }
    this.dimension = dimension;
    this.#forgetting = forgetting;
    this.#weights = new Float64Array(dimension);
    this.#inverse = new Float64Array(dimension * dimension);
    for (let i = 0; i < dimension; i++) this.#inverse[i * dimension + i] = 1 / ridge;
    this.#maxTrace = dimension / ridge;
    this.#px = new Float64Array(dimension);
  }

  /** How many samples it has learned (all of them, however much the older ones still count). */
  get samples(): number {
    return this.#samples;
  }

  /** The weights now, one per feature (a copy). */
  get weights(): readonly number[] {
    return [...this.#weights];
  }

  /**
   * Learns that features `x` gave `y`. A sample with a value that is not finite is ignored.
   *
   * @throws {RangeError} for `x` of another length than the dimension.
   */
  learn(x: readonly number[], y: number): void {
    const d = this.dimension;
    if (x.length !== d) throw new RangeError(`OnlineRidge expects ${d} features, got ${x.length}`);
    if (!Number.isFinite(y) || !x.every(Number.isFinite)) return;
    const p = this.#inverse;
    const px = this.#px;
    // px = P x; since P stays symmetric, xᵀP = (P x)ᵀ.
    let xpx = 0;
    for (let i = 0; i < d; i++) {
      let sum = 0;
      for (let j = 0; j < d; j++) sum += (p[i * d + j] as number) * (x[j] as number);
      px[i] = sum;
      xpx += (x[i] as number) * sum;
    }
    const lambda = this.#forgetting;
    const denominator = lambda + xpx;
    const error = y - this.#dot(x);
    // Gain k = P x / (λ + xᵀ P x); weights move by k times the error.
    for (let i = 0; i < d; i++)
      this.#weights[i] = (this.#weights[i] as number) + ((px[i] as number) / denominator) * error;
    // P ← (P − k xᵀ P) / λ, discounted only while its trace stays under the prior's (anti-windup).
    let trace = 0;
    for (let i = 0; i < d; i++) {
      for (let j = 0; j < d; j++) {
        const at = i * d + j;
        p[at] = (p[at] as number) - ((px[i] as number) * (px[j] as number)) / denominator;
      }
      trace += p[i * d + i] as number;
    }
    if (lambda < 1 && trace / lambda <= this.#maxTrace) {
      for (let at = 0; at < d * d; at++) p[at] = (p[at] as number) / lambda;
    }
    this.#samples++;
  }

  /**
   * The fit's value at `x` (not clamped: a caller predicting a duration clamps it at 0).
   *
   * @throws {RangeError} for `x` of another length than the dimension.
   */
  predict(x: readonly number[]): number {
    if (x.length !== this.dimension) {
      throw new RangeError(`OnlineRidge expects ${this.dimension} features, got ${x.length}`);
    }
    return this.#dot(x);
  }

  #dot(x: readonly number[]): number {
    let sum = 0;
    for (let i = 0; i < this.dimension; i++) sum += (this.#weights[i] as number) * (x[i] as number);
    return sum;
  }
}
