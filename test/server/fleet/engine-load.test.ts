import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { Agent } from '../../../src/http/undici-parts.js';
import type { EngineLoad, EngineLoadMetrics } from '../../../src/protocol/engines/load-metrics.js';
import { SGLANG_LOAD_METRICS } from '../../../src/protocol/engines/sglang.js';
import { VLLM_LOAD_METRICS } from '../../../src/protocol/engines/vllm.js';
import { EngineLoadScraper } from '../../../src/server/fleet/engine-load.js';
import { type Deferred, deferred } from '../../support/async.js';

type Worker = { url: string };

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A Prometheus exposition of `load` under `names`, as the fake workers serve it. */
function exposition(names: EngineLoadMetrics, load: EngineLoad): string {
  const model = 'model_name="m"';
  return [
    `# TYPE ${names.running} gauge`,
    `${names.running}{${model}} ${load.running}`,
    `# TYPE ${names.waiting} gauge`,
    `${names.waiting}{${model}} ${load.waiting}`,
    `# TYPE ${names.kvUsage} gauge`,
    `${names.kvUsage}{${model}} ${load.kvUsage}`,
    '',
  ].join('\n');
}

const vllm = (load: EngineLoad) => exposition(VLLM_LOAD_METRICS, load);

/**
 * An engine's `GET /metrics` on a loopback server: each scrape is answered with what `answer`
 * last set, or waits while `hold` holds it; `scrapes` keeps each scrape's headers.
 */
async function engine(text: string) {
  let answer = { status: 200, text };
  let held: Deferred<void> | undefined;
  const scrapes: IncomingHttpHeaders[] = [];
  const arrivals: Array<Deferred<void>> = [];
  const respond = (res: ServerResponse, { status, text }: { status: number; text: string }) => {
    res.writeHead(status, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(text);
  };
  const server = createServer((req, res) => {
    scrapes.push(req.headers);
    arrivals.shift()?.resolve();
    const current = answer;
    if (held === undefined) respond(res, current);
    else void held.promise.then(() => respond(res, current));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  cleanups.push(close);
  return {
    worker: { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` } as Worker,
    scrapes,
    answer(text: string, status = 200): void {
      answer = { status, text };
    },
    /** Holds the answers to scrapes from now on until the returned function is called. */
    hold(): () => void {
      const gate = deferred();
      held = gate;
      return () => {
        held = undefined;
        gate.resolve();
      };
    },
    /** Resolves when the next scrape arrives. */
    nextScrape(): Promise<void> {
      const arrival = deferred();
      arrivals.push(arrival);
      return arrival.promise;
    },
    /** Stops listening: later scrapes are refused. */
    close,
  };
}

/** A scraper over `pools` on a clock the test moves (`clock.at`). */
function scraper(pools: WorkerPool<Worker>[], options: { staleMs?: number; intervalMs?: number } = {}) {
  const clock = { at: 1000 };
  const scraping = new EngineLoadScraper({
    metrics: VLLM_LOAD_METRICS,
    pools,
    intervalMs: options.intervalMs ?? 10_000,
    staleMs: options.staleMs ?? 500,
    now: () => clock.at,
  });
  cleanups.push(() => scraping.stop());
  return { scraping, clock };
}

describe('EngineLoadScraper: what a scrape reads', () => {
  it("each worker of every pool has its engine's load, read under the engine's metric names", async () => {
    const prefill = await engine(vllm({ waiting: 2, running: 5, kvUsage: 0.25 }));
    const decode = await engine(vllm({ waiting: 0, running: 1, kvUsage: 0.5 }));
    const { scraping } = scraper([new WorkerPool([prefill.worker]), new WorkerPool([decode.worker])]);
    await scraping.scrape();
    expect(scraping.loadOf(prefill.worker)).toEqual({ waiting: 2, running: 5, kvUsage: 0.25 });
    expect(scraping.loadOf(decode.worker)).toEqual({ waiting: 0, running: 1, kvUsage: 0.5 });
  });

  it('the scrapes carry the configured headers (the worker key) and go through the given dispatcher', async () => {
    const served = await engine(vllm({ waiting: 1, running: 0, kvUsage: 0 }));
    const agent = new Agent();
    cleanups.push(() => agent.close());
    let dispatched = 0;
    const counting = agent.compose((dispatch) => (options, handler) => {
      dispatched++;
      return dispatch(options, handler);
    });
    const scraping = new EngineLoadScraper({
      metrics: VLLM_LOAD_METRICS,
      pools: [new WorkerPool([served.worker])],
      intervalMs: 10_000,
      staleMs: 500,
      headers: { authorization: 'Bearer worker-key' },
      dispatcher: counting,
    });
    await scraping.scrape();
    expect(served.scrapes.map((headers) => headers.authorization)).toEqual(['Bearer worker-key']);
    expect(dispatched).toBe(1);
    expect(scraping.loadOf(served.worker)).toMatchObject({ waiting: 1 });
  });

  it("with pools of two engines, each worker's load is read by its own engine's names", async () => {
    const onVllm = await engine(vllm({ waiting: 3, running: 1, kvUsage: 0.1 }));
    const onSglang = await engine(exposition(SGLANG_LOAD_METRICS, { waiting: 5, running: 2, kvUsage: 0.4 }));
    const scraping = new EngineLoadScraper({
      metrics: [VLLM_LOAD_METRICS, SGLANG_LOAD_METRICS],
      pools: [new WorkerPool([onVllm.worker]), new WorkerPool([onSglang.worker])],
      intervalMs: 10_000,
      staleMs: 10_000,
    });
    await scraping.scrape();
    expect(scraping.loadOf(onVllm.worker)).toEqual({ waiting: 3, running: 1, kvUsage: 0.1 });
    expect(scraping.loadOf(onSglang.worker)).toEqual({ waiting: 5, running: 2, kvUsage: 0.4 });
  });

  it('a worker never read has no load; a reading is good for staleMs and unknown after', async () => {
    const served = await engine(vllm({ waiting: 3, running: 1, kvUsage: 0.1 }));
    const { scraping, clock } = scraper([new WorkerPool([served.worker])], { staleMs: 500 });
    expect(scraping.loadOf(served.worker)).toBeUndefined();
    await scraping.scrape();
    clock.at += 500;
    expect(scraping.loadOf(served.worker)).toEqual({ waiting: 3, running: 1, kvUsage: 0.1 });
    clock.at += 1;
    expect(scraping.loadOf(served.worker)).toBeUndefined();
    expect(scraping.loadOf({ url: 'http://127.0.0.1:9' })).toBeUndefined();
  });

  it('without an injected clock, readings age on performance.now()', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    const served = await engine(vllm({ waiting: 3, running: 1, kvUsage: 0.1 }));
    const scraping = new EngineLoadScraper({
      metrics: VLLM_LOAD_METRICS,
      pools: [new WorkerPool([served.worker])],
      intervalMs: 10_000,
      staleMs: 500,
    });
    await scraping.scrape();
    expect(scraping.loadOf(served.worker)).toMatchObject({ waiting: 3 });
    vi.advanceTimersByTime(501);
    expect(scraping.loadOf(served.worker)).toBeUndefined();
  });

  it.each([
    ['a refused connection', (served: Awaited<ReturnType<typeof engine>>) => served.close()],
    // A sidecar or an engine in trouble may answer an error with a body that looks like metrics.
    [
      'an answer other than 200, even one with metrics',
      (served: Awaited<ReturnType<typeof engine>>) =>
        served.answer(vllm({ waiting: 9, running: 9, kvUsage: 0.9 }), 503),
    ],
    [
      "an answer without the engine's metrics (another engine's, or one not up yet)",
      (served: Awaited<ReturnType<typeof engine>>) =>
        served.answer(exposition(SGLANG_LOAD_METRICS, { waiting: 9, running: 9, kvUsage: 0.9 })),
    ],
  ])('after %s the last reading stands until it goes stale', async (_, fail) => {
    const served = await engine(vllm({ waiting: 1, running: 2, kvUsage: 0.3 }));
    const { scraping, clock } = scraper([new WorkerPool([served.worker])], { staleMs: 500 });
    await scraping.scrape();
    clock.at += 400;
    await fail(served);
    await scraping.scrape();
    expect(scraping.loadOf(served.worker)).toEqual({ waiting: 1, running: 2, kvUsage: 0.3 });
    clock.at += 101;
    expect(scraping.loadOf(served.worker)).toBeUndefined();
  });

  it('a worker that left the pools loses its reading at the next round, however fresh', async () => {
    const staying = await engine(vllm({ waiting: 0, running: 0, kvUsage: 0 }));
    const leaving = await engine(vllm({ waiting: 4, running: 4, kvUsage: 0.4 }));
    const pool = new WorkerPool([staying.worker, leaving.worker]);
    const { scraping } = scraper([pool]);
    await scraping.scrape();
    expect(scraping.loadOf(leaving.worker)).toMatchObject({ waiting: 4 });
    await pool.remove(leaving.worker);
    await scraping.scrape();
    expect(scraping.loadOf(leaving.worker)).toBeUndefined();
  });
});

describe('EngineLoadScraper: rounds', () => {
  it('a worker is scraped one at a time: a round while its scrape is out passes it over, the next after it answered does not', async () => {
    const served = await engine(vllm({ waiting: 1, running: 0, kvUsage: 0 }));
    const { scraping } = scraper([new WorkerPool([served.worker])]);
    const release = served.hold();
    const arrived = served.nextScrape();
    const first = scraping.scrape();
    await arrived;
    // Answered at once, so that a second scrape of the same worker would show in `scrapes`.
    release();
    served.answer(vllm({ waiting: 2, running: 0, kvUsage: 0 }));
    await scraping.scrape();
    await first;
    expect(served.scrapes).toHaveLength(1);
    expect(scraping.loadOf(served.worker)).toMatchObject({ waiting: 1 });
    await scraping.scrape();
    expect(served.scrapes).toHaveLength(2);
    expect(scraping.loadOf(served.worker)).toMatchObject({ waiting: 2 });
  });

  it("start scrapes the construction's pools at once, then every interval; stop leaves no timer", async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const served = await engine(vllm({ waiting: 1, running: 0, kvUsage: 0 }));
    const { scraping } = scraper([new WorkerPool([served.worker])], { intervalMs: 50 });
    await scraping.start();
    expect(served.scrapes).toHaveLength(1);
    expect(scraping.loadOf(served.worker)).toMatchObject({ waiting: 1 });
    const again = served.nextScrape();
    vi.advanceTimersByTime(50);
    await again;
    expect(served.scrapes).toHaveLength(2);
    scraping.stop();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('start with pools scrapes those instead of the ones given at construction', async () => {
    const before = await engine(vllm({ waiting: 1, running: 0, kvUsage: 0 }));
    const after = await engine(vllm({ waiting: 2, running: 0, kvUsage: 0 }));
    const { scraping } = scraper([new WorkerPool([before.worker])]);
    await scraping.start([new WorkerPool([after.worker])]);
    expect(before.scrapes).toHaveLength(0);
    expect(scraping.loadOf(after.worker)).toMatchObject({ waiting: 2 });
  });
});
