import type { Metric, Registry } from 'prom-client';

/** One line of a histogram as prom-client's registry reads it (`get()`). */
interface HistogramValue {
  labels: { le?: number | '+Inf' };
  value: number;
  metricName: string;
  exemplar?: null;
}

/**
 * An unlabelled histogram for a value recorded per token (the gap between two streamed
 * chunks). prom-client's `Histogram.observe` checks the labels, hashes them and looks the
 * series up on every call: a few hundred nanoseconds, paid per token by every stream. Here an
 * observation is a search of the bounds and three additions. prom-client still writes it:
 * the registry reads it through `get()`, in the shape prom-client's own histograms give, so
 * `/metrics` and `getMetricsAsJSON()` show what a prom-client `Histogram` with the same name,
 * help and buckets would (a test holds the two equal).
 *
 * @example
 * const gaps = new CountedHistogram('x_seconds', 'Gaps', [0.001, 0.01], [registry]);
 * gaps.observe(0.004); // x_seconds_bucket{le="0.01"} 1, x_seconds_sum 0.004, x_seconds_count 1
 *
 * @internal
 */
export class CountedHistogram {
  readonly type = 'histogram' as const;
  readonly aggregator = 'sum' as const;
  readonly name: string;
  readonly help: string;
  readonly #bounds: readonly number[];
  /** Observations per bucket (not cumulative); the last slot is above every bound. */
  readonly #counts: Float64Array;
  #sum = 0;
  #count = 0;
  /** prom-client's unlabelled histogram shows zeros until a reset, then nothing until an observation. */
  #shown = true;

  /** Registers itself in `registers`; `buckets` are upper bounds, ascending. */
  constructor(name: string, help: string, buckets: readonly number[], registers: readonly Registry[]) {
    this.name = name;
    this.help = help;
    this.#bounds = [...buckets];
    this.#counts = new Float64Array(buckets.length + 1);
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  /** Counts `value`; throws a `TypeError` for a value that is not a finite number, as prom-client does. */
  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const bounds = this.#bounds;
    let bucket = 0;
    while (bucket < bounds.length && value > (bounds[bucket] as number)) bucket++;
    this.#counts[bucket] = (this.#counts[bucket] as number) + 1;
    this.#sum += value;
    this.#count++;
    this.#shown = true;
  }

  /** The lines of a scrape: cumulative buckets, `+Inf`, sum and count (prom-client's `get()`). */
  async get(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: HistogramValue[] }> {
    const bucketName = `${this.name}_bucket`;
    const values: HistogramValue[] = [];
    const done = { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
    if (!this.#shown) return done;
    let cumulative = 0;
    this.#bounds.forEach((le, bucket) => {
      cumulative += this.#counts[bucket] as number;
      values.push({ labels: { le }, value: cumulative, metricName: bucketName, exemplar: null });
    });
    values.push(
      { labels: { le: '+Inf' }, value: this.#count, metricName: bucketName, exemplar: null },
      { labels: {}, value: this.#sum, metricName: `${this.name}_sum` },
      { labels: {}, value: this.#count, metricName: `${this.name}_count` },
    );
    return done;
  }

  /** Back to no observations (`registry.resetMetrics()`). */
  reset(): void {
    this.#counts.fill(0);
    this.#sum = 0;
    this.#count = 0;
    this.#shown = false;
  }
}
