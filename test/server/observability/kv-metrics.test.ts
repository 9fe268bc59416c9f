import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FakeKvEvent } from '../../../src/fakes/fake-kv-publisher.js';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { KvFollower } from '../../../src/server/fleet/kv-following.js';
import { registerKvMetrics } from '../../../src/server/observability/kv-metrics.js';
import { flush, recordingLogger } from '../../support/async.js';
import { FakeKvEngine } from '../../support/fake-zeromq.js';

// In-memory sockets under the real subscribers: see test/server/fleet/kv-following.test.ts for why.
vi.mock('zeromq');

type Worker = { url: string; name?: string; kvEvents?: string; kvEventsReplay?: string };

const open: Array<KvFollower<{ url: string }>> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const kv of open.splice(0)) await kv.close();
  FakeKvEngine.unbindAll();
});

let hash = 0n;
/** One new block of two tokens. */
const store = (): FakeKvEvent => ({
  type: 'BlockStored',
  block_hashes: [++hash],
  parent_block_hash: null,
  token_ids: [1, 2],
  block_size: 2,
});

/** p0 (an engine with a replay socket) and d0 (without), followed, and the metrics of them. */
function setup() {
  const p0Engine = FakeKvEngine.bind('tcp://p0.test:5557', 'tcp://p0.test:5558');
  const d0Engine = FakeKvEngine.bind('tcp://d0.test:5557');
  const p0: Worker = {
    url: 'http://p0.test:8000',
    name: 'p0',
    kvEvents: p0Engine.endpoint,
    kvEventsReplay: p0Engine.replayEndpoint,
  };
  const d0: Worker = { url: 'http://d0.test:8000', name: 'd0', kvEvents: d0Engine.endpoint };
  const nameOf = (worker: { url: string }) => (worker as Worker).name ?? worker.url;
  const kv = new KvFollower<{ url: string }>({ logger: recordingLogger().logger, name: nameOf });
  open.push(kv);
  const registry = new Registry();
  registerKvMetrics([registry], kv, nameOf);
  /** Each series of metric `name` at a scrape, as `labels => value`. */
  const scrape = async (name: string) => {
    const metric = (await registry.getMetricsAsJSON()).find((each) => each.name === name);
    return Object.fromEntries(
      (metric?.values ?? []).map(({ labels, value }) => [
        Object.entries(labels)
          .map(([label, v]) => `${label}=${v}`)
          .join(','),
        value,
      ]),
    );
  };
  const start = () => kv.start([new WorkerPool([p0]), new WorkerPool([d0])]);
  return { p0Engine, d0Engine, start, scrape };
}

describe('registerKvMetrics: what /metrics says of the followed workers', () => {
  it("each worker's counters are what its engine's events came to: events, batches, gaps, restarts, unreadable messages", async () => {
    const { p0Engine, d0Engine, start, scrape } = setup();
    // Before the router joined: p0's replay brings them.
    p0Engine.publish([store()]);
    p0Engine.publish([store(), store()]);
    await start();
    d0Engine.publish([store(), store()]);
    d0Engine.loseNext();
    d0Engine.publish([store()]);
    d0Engine.publish([store(), store(), store()]);
    for (let restart = 0; restart < 2; restart++) {
      d0Engine.restart();
      d0Engine.publish([store()]);
    }
    for (let bad = 0; bad < 2; bad++) d0Engine.send([Buffer.from(''), Buffer.alloc(3), Buffer.alloc(1)]);
    await flush();
    expect(await scrape('disagg_kv_events_total')).toEqual({ 'worker=p0': 3, 'worker=d0': 7 });
    expect(await scrape('disagg_kv_event_batches_total')).toEqual({ 'worker=p0': 2, 'worker=d0': 4 });
    expect(await scrape('disagg_kv_event_gaps_total')).toEqual({ 'worker=p0': 0, 'worker=d0': 1 });
    expect(await scrape('disagg_kv_engine_restarts_total')).toEqual({ 'worker=p0': 0, 'worker=d0': 2 });
    expect(await scrape('disagg_kv_events_malformed_total')).toEqual({ 'worker=p0': 0, 'worker=d0': 2 });
    // d0's view started again at its restart: only the block stored since.
    expect(await scrape('disagg_kv_blocks')).toEqual({ 'worker=p0': 3, 'worker=d0': 1 });
  });

  it('replays are counted per worker by outcome: recovered, or failed (gave up)', async () => {
    const { p0Engine, start, scrape } = setup();
    await start();
    p0Engine.publish([store()]);
    // A gap it recovers from, then one it cannot.
    for (const mode of ['answer', 'fail'] as const) {
      p0Engine.replays = mode;
      p0Engine.loseNext();
      p0Engine.publish([store()]);
      p0Engine.publish([store()]);
      await flush();
    }
    expect(await scrape('disagg_kv_replays_total')).toEqual({
      'worker=p0,outcome=recovered': 2,
      'worker=p0,outcome=failed': 1,
      'worker=d0,outcome=recovered': 0,
      'worker=d0,outcome=failed': 0,
    });
  });

  it("the lag is how old a worker's last batch was when it arrived, in seconds; none for a worker whose batches carry no time", async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(1_700_000_000_000);
    const { p0Engine, d0Engine, start, scrape } = setup();
    await start();
    p0Engine.publish([store()], 1_700_000_000 - 4);
    p0Engine.publish([store()], 1_700_000_000 - 1.5);
    d0Engine.publish([store()], 0);
    await flush();
    expect(await scrape('disagg_kv_event_lag_seconds')).toEqual({ 'worker=p0': 1.5 });
  });

  it("a worker's view counts as trusted (1) but while the events it lost are being replayed (0)", async () => {
    const { p0Engine, start, scrape } = setup();
    await start();
    p0Engine.publish([store()]);
    p0Engine.replays = 'hold';
    p0Engine.loseNext();
    p0Engine.publish([store()]);
    p0Engine.publish([store()]);
    await flush();
    expect(await scrape('disagg_kv_view_trusted')).toEqual({ 'worker=p0': 0, 'worker=d0': 1 });
    p0Engine.releaseReplays();
    await flush();
    expect(await scrape('disagg_kv_view_trusted')).toEqual({ 'worker=p0': 1, 'worker=d0': 1 });
  });
});
