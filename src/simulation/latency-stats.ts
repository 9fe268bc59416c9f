// Percentiles of what users feel, kept cheaply: a replay's inter-token gaps run to millions, so
// they go into buckets 1 % wide (a percentile read from them is within 1 % of the exact one);
// times to first token, one per request, are kept and sorted.

/** The percentiles a summary reports, in ms. */
export interface Percentiles {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly mean: number;
}

const GROWTH = Math.log(1.01);

/**
 * A histogram of durations in buckets 1 % wide (from 1 µs), for percentiles of millions of
 * samples in constant memory.
 *
 * @example
 * const gaps = new LatencyHistogram();
 * gaps.add(12.5);
 * gaps.percentiles().p50; // ≈ 12.5 (within 1 %)
 */
export class LatencyHistogram {
  readonly #counts = new Map<number, number>();
  #count = 0;
  #sum = 0;

  /** Samples added. */
  get count(): number {
    return this.#count;
  }

  /** Adds one duration (ms); non-positive ones count in the lowest bucket. */
  add(ms: number): void {
    const bucket = ms <= 0.001 ? 0 : Math.floor(Math.log(ms / 0.001) / GROWTH);
    this.#counts.set(bucket, (this.#counts.get(bucket) ?? 0) + 1);
    this.#count++;
    this.#sum += ms;
  }

  /** p50, p90, p99 (each its bucket's middle) and the exact mean; all 0 without samples. */
  percentiles(): Percentiles {
    if (this.#count === 0) return { p50: 0, p90: 0, p99: 0, mean: 0 };
    const buckets = [...this.#counts.keys()].sort((a, b) => a - b);
    const at = (q: number): number => {
      const rank = Math.ceil(q * this.#count);
      let seen = 0;
      for (const bucket of buckets) {
        seen += this.#counts.get(bucket) as number;
        if (seen >= rank) return 0.001 * Math.exp((bucket + 0.5) * GROWTH);
      }
      return 0;
    };
    return { p50: at(0.5), p90: at(0.9), p99: at(0.99), mean: this.#sum / this.#count };
  }
}

/**
 * Exact percentiles (nearest rank) and mean of `values`; all 0 for none.
 *
 * @example
 * percentilesOf([1, 2, 3, 4]).p50; // 2
 */
export function percentilesOf(values: readonly number[]): Percentiles {
  if (values.length === 0) return { p50: 0, p90: 0, p99: 0, mean: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] as number;
  let sum = 0;
  for (const value of sorted) sum += value;
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99), mean: sum / sorted.length };
}
