import type { Dispatcher } from 'undici';
import { type EngineName, engineOf } from '../engines/registry.js';
import { request } from '../http/undici-parts.js';
import { type EngineLoad, type EngineLoadMetrics, readEngineLoad } from '../protocol/engines/load-metrics.js';
import type { Consumption } from '../routing/services.js';
import type { WorkerPool } from '../routing/worker-pool.js';
import { joinUrl } from '../util/url.js';

type Worker = { url: string };

/**
 * Each worker's own load, scraped from its `/metrics` every `intervalMs` (llm-d scrapes every
 * 50 ms): requests waiting and running and KV cache usage, by the engine's names. A reading
 * older than `staleMs` counts as unknown (a worker that stopped answering is not taken for an
 * idle one). Scrapes run one at a time per worker, each bounded by the interval.
 *
 * @internal
 */
export class EngineLoadScraper {
  readonly #metrics: EngineLoadMetrics;
  #pools: ReadonlyArray<WorkerPool<Worker>>;
  readonly #intervalMs: number;
  readonly #staleMs: number;
  readonly #headers: Record<string, string>;
  readonly #dispatcher: Dispatcher | undefined;
  readonly #now: () => number;
  readonly #readings = new Map<Worker, { load: EngineLoad; at: number }>();
  readonly #scraping = new Set<Worker>();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: {
    metrics: EngineLoadMetrics;
    pools: ReadonlyArray<WorkerPool<Worker>>;
    intervalMs: number;
    staleMs: number;
    headers?: Record<string, string>;
    dispatcher?: Dispatcher;
    now?: () => number;
  }) {
    this.#metrics = options.metrics;
    this.#pools = options.pools;
    this.#intervalMs = options.intervalMs;
    this.#staleMs = options.staleMs;
    this.#headers = options.headers ?? {};
    this.#dispatcher = options.dispatcher;
    this.#now = options.now ?? (() => performance.now());
  }

  /** `worker`'s load, if read within `staleMs`. */
  loadOf(worker: Worker): EngineLoad | undefined {
    const reading = this.#readings.get(worker);
    if (reading === undefined || this.#now() - reading.at > this.#staleMs) return undefined;
    return reading.load;
  }

  /** Scrapes every worker of `pools` (those given at construction by default) once now, then every interval. */
  async start(pools?: ReadonlyArray<WorkerPool<Worker>>): Promise<void> {
    if (pools !== undefined) this.#pools = pools;
    await this.scrape();
    this.#timer = setInterval(() => void this.scrape(), this.#intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One round: every worker of the pools not already being scraped. */
  async scrape(): Promise<void> {
    const workers = new Set(this.#pools.flatMap((pool) => pool.workers));
    for (const worker of this.#readings.keys()) if (!workers.has(worker)) this.#readings.delete(worker);
    await Promise.all(
      [...workers].filter((worker) => !this.#scraping.has(worker)).map((worker) => this.#scrapeOne(worker)),
    );
  }

  async #scrapeOne(worker: Worker): Promise<void> {
    this.#scraping.add(worker);
    try {
      const answer = await request(joinUrl(worker.url, '/metrics'), {
        headers: this.#headers,
        headersTimeout: this.#intervalMs,
        bodyTimeout: this.#intervalMs,
        ...(this.#dispatcher === undefined ? {} : { dispatcher: this.#dispatcher }),
      });
      const text = await answer.body.text();
      if (answer.statusCode !== 200) return;
      const load = readEngineLoad(text, this.#metrics);
      if (load !== undefined) this.#readings.set(worker, { load, at: this.#now() });
    } catch {
      // Unreachable now: its last reading ages into unknown; health checks say why.
    } finally {
      this.#scraping.delete(worker);
    }
  }
}

/**
 * The proxy's scraper, when a configured policy reads the engines' load (`consumed`), its
 * interval is set and the engine names its load metrics; else undefined (no scrape at all).
 *
 * @internal
 */
export function engineLoadScraper(
  consumed: Consumption,
  options: { connector: EngineName; routing: { engineLoadIntervalMs: number; engineLoadStaleMs: number } },
  headers: Record<string, string>,
  dispatcher: Dispatcher,
): EngineLoadScraper | undefined {
  const metrics = engineOf(options.connector).loadMetrics;
  const { engineLoadIntervalMs, engineLoadStaleMs } = options.routing;
  if (consumed['engine-load'] === undefined || engineLoadIntervalMs === 0 || metrics === undefined) return undefined;
  // The pools are given at start, once they exist.
  return new EngineLoadScraper({
    metrics,
    pools: [],
    intervalMs: engineLoadIntervalMs,
    staleMs: engineLoadStaleMs,
    headers,
    dispatcher,
  });
}
