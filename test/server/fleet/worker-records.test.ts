import { MockAgent } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { UpstreamError } from '../../../src/http/upstream-error.js';
import { VLLM_LOAD_METRICS } from '../../../src/protocol/engines/vllm.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';
import { EngineLoadScraper } from '../../../src/server/fleet/engine-load.js';
import { HealthChecker } from '../../../src/server/fleet/health.js';
import { KvFollower } from '../../../src/server/fleet/kv-following.js';
import { Membership } from '../../../src/server/fleet/membership.js';
import { inFlightOf, stateOf, WorkerRecords } from '../../../src/server/fleet/worker-records.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../../src/server/settings/worker-entries.js';
import { FakeKvEngine } from '../../support/fake-zeromq.js';

// The real KvEventSubscriber over in-memory sockets (__mocks__/zeromq.ts), as kv-following's tests.
vi.mock('zeromq');

type AnyWorker = ProxyPrefillWorker | ProxyDecodeWorker;
const silent = { error: () => {}, warn: () => {}, info: () => {}, debug: () => {} };
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Membership, health and an engine-load scraper over one pool, sharing one book of workers. */
function fleet() {
  const agent = new MockAgent();
  agent.disableNetConnect();
  cleanups.push(() => agent.close());
  const d0: ProxyDecodeWorker = { url: 'http://d0' };
  const d1: ProxyDecodeWorker = { url: 'http://d1' };
  const prefill = new WorkerPool<ProxyPrefillWorker>([{ url: 'http://p0' }]);
  const decode = new WorkerPool<ProxyDecodeWorker>([d0, d1]);
  const records = new WorkerRecords<AnyWorker>();
  const pools = [
    { role: 'prefill', pool: prefill as WorkerPool<{ url: string }> },
    { role: 'decode', pool: decode as WorkerPool<{ url: string }> },
  ];
  const health = new HealthChecker(pools, {
    logger: silent,
    dispatcher: agent,
    breaker: { failureThreshold: 1, successThreshold: 1, openMs: 60_000 },
    records,
  });
  cleanups.push(() => health.stop());
  const membership = new Membership({ prefill, decode }, health, silent, () => {}, records);
  const load = new EngineLoadScraper({
    metrics: VLLM_LOAD_METRICS,
    pools: [prefill, decode],
    intervalMs: 1000,
    staleMs: 60_000,
    dispatcher: agent,
    records,
  });
  const metrics = (running: number) =>
    `${VLLM_LOAD_METRICS.running}{model_name="m"} ${running}\n${VLLM_LOAD_METRICS.waiting}{model_name="m"} 0\n${VLLM_LOAD_METRICS.kvUsage}{model_name="m"} 0.5\n`;
  for (const url of ['http://p0', 'http://d0', 'http://d1']) {
    agent.get(url).intercept({ path: '/metrics' }).reply(200, metrics(3)).persist();
  }
  return { records, membership, health, load, decode, d0, d1 };
}

const failure = (url: string) => UpstreamError.fromStatus(`${url}/v1/completions`, 500, '{"message":"boom"}');

describe('WorkerRecords: one record per worker', () => {
  it('membership, health and the engine-load scraper write their parts into the same record', async () => {
    const { records, health, load, d0 } = fleet();
    await load.scrape();
    health.noteFailure(failure('http://d0'), { decode: d0 });
    const record = records.get(d0);
    expect(record?.member).toMatchObject({ name: 'decode-0', role: 'decode', source: 'config' });
    expect(record?.circuit?.state).toBe('open');
    expect(record?.load?.reading.running).toBe(3);
    expect(load.loadOf(d0)).toEqual(record?.load?.reading);
    expect(health.circuit(d0)).toBe('open');
    expect([...records.values()].map((each) => each.member?.name)).toEqual(['prefill-0', 'decode-0', 'decode-1']);
  });

  it("a worker's record holds its attributes as the worker carries them (its labels, its well-known ones); none is an empty map", () => {
    const labelled: ProxyDecodeWorker = { url: 'http://d2', attributes: { 'disagg.ai/revision': 'v2', zone: 'a' } };
    const decode = new WorkerPool<ProxyDecodeWorker>([labelled, { url: 'http://d3' }]);
    const records = new WorkerRecords<AnyWorker>();
    const health = new HealthChecker([{ role: 'decode', pool: decode as WorkerPool<{ url: string }> }], {
      logger: silent,
      records,
    });
    cleanups.push(() => health.stop());
    new Membership({ prefill: new WorkerPool<ProxyPrefillWorker>([]), decode }, health, silent, () => {}, records);
    expect([...records.values()].map((record) => [record.member?.name, record.attributes])).toEqual([
      ['decode-0', { 'disagg.ai/revision': 'v2', zone: 'a' }],
      ['decode-1', {}],
    ]);
  });

  it("its rotation and leases are read through the record's pool, and read left once it has left", () => {
    const { records, decode, d0 } = fleet();
    const record = records.of(d0);
    const lease = decode.acquire([], undefined);
    expect(lease.worker).toBe(d0);
    expect([stateOf(record), inFlightOf(record)]).toEqual(['ready', 1]);
    decode.setAvailable(d0, false);
    expect(stateOf(record)).toBe('down');
    lease.release();
    void decode.remove(d0);
    expect([stateOf(record), inFlightOf(record)]).toEqual(['left', 0]);
    expect(stateOf(records.of({ url: 'http://never' }))).toBe('left');
  });

  it('a worker that leaves the fleet takes every part with it, its open circuit timer included', async () => {
    const { records, membership, health, load, decode, d0, d1 } = fleet();
    await load.scrape();
    health.noteFailure(failure('http://d0'), { decode: d0 });
    const timer = records.get(d0)?.circuit?.timer;
    expect(timer).toBeDefined();
    const cleared = vi.spyOn(globalThis, 'clearTimeout');
    cleanups.push(() => cleared.mockRestore());
    const lease = decode.acquire([d0], undefined);
    expect(lease.worker).toBe(d1);
    membership.remove('decode', d0, 'admin');
    membership.drain('decode', d1, 'admin');
    // Removed: gone once its pool says so; draining with a lease out: still known, by name.
    await vi.waitFor(() => expect(records.get(d0)).toBeUndefined());
    expect(cleared).toHaveBeenCalledWith(timer);
    expect(records.get(d1)?.member?.name).toBe('decode-1');
    lease.release();
    await vi.waitFor(() => expect(records.get(d1)).toBeUndefined());
    expect(membership.nameOf(d1)).toBe('worker');
    expect([...records.values()].map((each) => each.member?.name)).toEqual(['prefill-0']);
  });

  it("health's forget keeps the fleet's record (membership forgets it) and drops one only health kept", () => {
    const { records, health, d0 } = fleet();
    health.noteFailure(failure('http://d0'), { decode: d0 });
    health.forget(d0);
    expect(records.get(d0)).toMatchObject({ circuit: undefined, member: { name: 'decode-0' } });
    const alone = new WorkerRecords();
    const own = new HealthChecker([{ role: 'decode', pool: new WorkerPool([d0]) }], {
      logger: silent,
      breaker: { failureThreshold: 1, successThreshold: 1, openMs: 60_000 },
      records: alone,
    });
    own.noteFailure(failure('http://d0'), { decode: d0 });
    expect(alone.get(d0)?.circuit?.state).toBe('open');
    own.forget(d0);
    expect(alone.get(d0)).toBeUndefined();
  });

  it('release drops a record only once no part holds anything', () => {
    const records = new WorkerRecords();
    const worker = { url: 'http://w' };
    records.of(worker).probes.streak = 1;
    records.release(worker);
    expect(records.get(worker)).toBeDefined();
    records.of(worker).probes.streak = 0;
    records.of(worker).scraping = true;
    records.release(worker);
    expect(records.get(worker)).toBeDefined();
    records.of(worker).scraping = false;
    records.release(worker);
    expect(records.get(worker)).toBeUndefined();
    records.release(worker);
    records.forget(worker);
    expect([...records.values()]).toEqual([]);
  });

  it('the scraper drops the reading of a worker that left, and its record when nothing else is kept', async () => {
    const { records, load, decode, d0, d1 } = fleet();
    await load.scrape();
    void decode.remove(d1);
    await load.scrape();
    expect(records.get(d1)?.load).toBeUndefined();
    expect(records.get(d0)?.load).toBeDefined();
    const alone = new WorkerRecords();
    const pool = new WorkerPool([d0]);
    const own = new EngineLoadScraper({
      metrics: VLLM_LOAD_METRICS,
      pools: [pool],
      intervalMs: 1000,
      staleMs: 60_000,
      dispatcher: new MockAgent(),
      records: alone,
    });
    alone.of(d0).load = { reading: { running: 1, waiting: 0, kvUsage: 0 }, at: 0 };
    void pool.remove(d0);
    await own.scrape();
    expect(alone.get(d0)).toBeUndefined();
  });
});

describe('WorkerRecords: the KV follower keeps its subscriber and its view in the same record', () => {
  it("a followed worker's record holds its subscriber and silence watch; forgotten by membership first, the record keeps that part until the follower drops it", async () => {
    const endpoint = 'tcp://kv-record.test:5557';
    FakeKvEngine.bind(endpoint, undefined, '');
    cleanups.push(() => FakeKvEngine.unbindAll());
    const worker = { url: 'http://kv-record.test:8000', kvEvents: endpoint };
    const pool = new WorkerPool([worker]);
    const records = new WorkerRecords<typeof worker>();
    const kv = new KvFollower({ logger: silent, records });
    cleanups.push(() => kv.close());
    await kv.start([pool]);
    const following = records.get(worker)?.kv;
    expect(following?.subscriber).toBeDefined();
    expect(kv.subscribers.get(worker)).toBe(following?.subscriber);
    // The view is the record's: work sent with no event since counts there once the watch runs out.
    expect(following).toMatchObject({ replaying: false });
    expect(kv.blindCount(worker)).toBe(following?.watch.blindCount);
    records.of(worker).load = { reading: { running: 1, waiting: 0, kvUsage: 0 }, at: 0 };
    records.forget(worker);
    expect(records.get(worker)).toMatchObject({ kv: following, load: undefined, member: undefined });
    void pool.remove(worker);
    await vi.waitFor(() => expect(records.get(worker)).toBeUndefined());
    expect(kv.subscribers.size).toBe(0);
  });
});
