// The randomness of the built-in workloads: one seeded generator, so that a workload is the
// same array for the same seed on every machine and Node version (Math.random is neither
// seedable nor specified), and the few distributions the workloads draw from.

/**
 * A seeded pseudo-random generator (mulberry32: 32 bits of state, fast, and good enough for
 * workload shapes; not for anything secret), with the distributions the workloads draw from.
 *
 * @example
 * const random = new SeededRandom(7);
 * const gapMs = random.exponential(250); // a Poisson process's gap, 250 ms on average
 */
export class SeededRandom {
  private state: number;

  /** @param seed any safe integer; its low 32 bits pick the stream. */
  constructor(seed: number) {
    // Mixed once, so that neighbouring seeds (1, 2, 3) start far apart.
    this.state = Math.imul((seed | 0) ^ 0x9e3779b9, 0x85ebca6b) >>> 0;
  }

  /** A uniform draw in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** A whole number from `low` to `high`, both included. */
  integer(low: number, high: number): number {
    return low + Math.floor(this.next() * (high - low + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** An exponential draw of mean `mean` (a Poisson process's gap). */
  exponential(mean: number): number {
    // 1 - next() is in (0, 1]: never log(0).
    return -mean * Math.log(1 - this.next());
  }

  /** A standard normal draw (Box-Muller). */
  normal(): number {
    const u = 1 - this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }

  /**
   * A lognormal draw of median `median` and log-spread `sigma`, rounded to a whole number and
   * held within [min, max]: token counts, which published traces report as lognormal-like.
   */
  tokens(median: number, sigma: number, min: number, max: number): number {
    const value = Math.round(median * Math.exp(sigma * this.normal()));
    return Math.min(max, Math.max(min, value));
  }

  /** A lognormal draw of median `median` and log-spread `sigma`, not rounded (a duration). */
  lognormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal());
  }
}

/**
 * Zipf's law over `n` items (item 0 the most popular, item i drawn with weight 1/(i+1)^s): the
 * popularity of documents, prompts and queries in the workloads.
 *
 * @example
 * const popular = new Zipf(1000, 1.1);
 * const item = popular.draw(new SeededRandom(1)); // 0 far more often than 999
 */
export class Zipf {
  private readonly cumulative: Float64Array;

  constructor(
    /** The items. */
    readonly n: number,
    /** The exponent: 0 uniform, about 1 for most measured popularity. */
    readonly s: number,
  ) {
    this.cumulative = new Float64Array(n);
    let total = 0;
    for (let i = 0; i < n; i++) {
      total += 1 / (i + 1) ** s;
      this.cumulative[i] = total;
    }
  }

  /** One item, 0 to n - 1. */
  draw(random: SeededRandom): number {
    const target = random.next() * (this.cumulative[this.n - 1] as number);
    let low = 0;
    let high = this.n - 1;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if ((this.cumulative[middle] as number) > target) high = middle;
      else low = middle + 1;
    }
    return low;
  }
}
