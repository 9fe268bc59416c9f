import type { Dispatcher } from 'undici';
import { type EngineName, engineOf } from '../../engines/registry.js';
import { request } from '../../http/undici-parts.js';
import { type EngineLoad, type EngineLoadMetrics, readEngineLoad } from '../../protocol/engines/load-metrics.js';
import type { Consumption } from '../../routing/services.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import { joinUrl } from '../../util/url.js';
import { WorkerRecords } from './worker-records.js';

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
  /** The engines' names for their load, tried in order: each pool's engine may be another. */
  readonly #metrics: readonly EngineLoadMetrics[];
  #pools: ReadonlyArray<WorkerPool<Worker>>;
  readonly #intervalMs: number;
  readonly #staleMs: number;
  readonly #headers: Record<string, string>;
  readonly #dispatcher: Dispatcher | undefined;
  readonly #now: () => number;
  /** Its part of each worker's record (`load`, `scraping`): the fleet's book, or its own. */
  readonly #records: WorkerRecords<Worker>;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: {
    /** The names of the load metrics, or several engines' (the first that a worker's text has is its). */
    metrics: EngineLoadMetrics | readonly EngineLoadMetrics[];
    pools: ReadonlyArray<WorkerPool<Worker>>;
    intervalMs: number;
    staleMs: number;
    headers?: Record<string, string>;
    dispatcher?: Dispatcher;
    now?: () => number;
    /** The fleet's book of workers, shared with membership and health; one of its own by default. */
    records?: WorkerRecords<Worker>;
  }) {
    this.#records = options.records ?? new WorkerRecords();
    this.#metrics = Array.isArray(options.metrics)
      ? (options.metrics as readonly EngineLoadMetrics[])
      : [options.metrics as EngineLoadMetrics];
    this.#pools = options.pools;
    this.#intervalMs = options.intervalMs;
    this.#staleMs = options.staleMs;
    this.#headers = options.headers ?? {};
    this.#dispatcher = options.dispatcher;
    this.#now = options.now ?? (() => performance.now());
  }

  /** `worker`'s load, if read within `staleMs`. */
  loadOf(worker: Worker): EngineLoad | undefined {
    const load = this.#records.get(worker)?.load;
    if (load === undefined || this.#now() - load.at > this.#staleMs) return undefined;
    return load.reading;
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
    // A worker that left takes its reading with it (and its record, when nothing else is kept
    // there); one still being scraped is cleared by the next round.
    for (const record of [...this.#records.values()]) {
      if (workers.has(record.worker) || record.scraping) continue;
      record.load = undefined;
      this.#records.release(record.worker);
    }
    await Promise.all(
      [...workers]
        .filter((worker) => this.#records.get(worker)?.scraping !== true)
        .map((worker) => this.#scrapeOne(this.#records.of(worker).worker)),
    );
  }

  async #scrapeOne(worker: Worker): Promise<void> {
    const record = this.#records.of(worker);
    record.scraping = true;
    try {
      const answer = await request(joinUrl(worker.url, '/metrics'), {
        headers: this.#headers,
        headersTimeout: this.#intervalMs,
        bodyTimeout: this.#intervalMs,
        ...(this.#dispatcher === undefined ? {} : { dispatcher: this.#dispatcher }),
      });
      const text = await answer.body.text();
      if (answer.statusCode !== 200) return;
      for (const metrics of this.#metrics) {
        const load = readEngineLoad(text, metrics);
        if (load === undefined) continue;
        record.load = { reading: load, at: this.#now() };
        break;
      }
    } catch {
      // Unreachable now: its last reading ages into unknown; health checks say why.
    } finally {
      record.scraping = false;
    }
  }
}

/**
 * The proxy's scraper, when a configured policy reads the engines' load (`consumed`) or the
 * stages' saturation is to be read from them (`--saturation-source engine`), its interval is
 * set and the engine names its load metrics; else undefined (no scrape at all).
 *
 * @internal
 */
export function engineLoadScraper(
  consumed: Consumption,
  options: {
    connector: EngineName;
    pools?: ReadonlyArray<{ connector?: EngineName | undefined }> | undefined;
    routing: { engineLoadIntervalMs: number; engineLoadStaleMs: number };
    scaling?: { saturationSource: 'auto' | 'engine' | 'in-flight' } | undefined;
  },
  headers: Record<string, string>,
  dispatcher: Dispatcher,
  records?: WorkerRecords<Worker>,
): EngineLoadScraper | undefined {
  // The top level's engine first, then each pool's own.
  const engines = new Set([options.connector, ...(options.pools ?? []).flatMap((pool) => pool.connector ?? [])]);
  const metrics = [...engines].flatMap((engine) => engineOf(engine).loadMetrics ?? []);
  const { engineLoadIntervalMs, engineLoadStaleMs } = options.routing;
  const wanted = consumed['engine-load'] !== undefined || options.scaling?.saturationSource === 'engine';
  if (!wanted || engineLoadIntervalMs === 0 || metrics.length === 0) return undefined;
  // The pools are given at start, once they exist.
  return new EngineLoadScraper({
    metrics,
    pools: [],
    intervalMs: engineLoadIntervalMs,
    staleMs: engineLoadStaleMs,
    headers,
    dispatcher,
    ...(records === undefined ? {} : { records }),
  });
}
