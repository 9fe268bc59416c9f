// Precise routing is loud when it is blind: a followed worker that was given work and sent no
// KV event within the silence limit is untrusted (routed by load), warned of once with where
// the router listens and what to check, and counted; its next event makes it trusted again.
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FakeKvEvent } from '../../src/fakes/fake-kv-publisher.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { KvFollower } from '../../src/server/fleet/kv-following.js';
import { registerKvMetrics } from '../../src/server/observability/kv-metrics.js';
import { flush, recordingLogger } from '../support/async.js';
import { FakeKvEngine } from '../support/fake-zeromq.js';

// In-memory sockets under the real subscribers: see test/server/fleet/kv-following.test.ts for why.
vi.mock('zeromq');

type Worker = { url: string; name?: string };

const open: Array<KvFollower<Worker>> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const kv of open.splice(0)) await kv.close();
  FakeKvEngine.unbindAll();
});

const T = 30_000;

const store = (hash: bigint): FakeKvEvent => ({
  type: 'BlockStored',
  block_hashes: [hash],
  parent_block_hash: null,
  token_ids: [1, 2],
  block_size: 2,
});

/** p0, followed at --kv-events-port 5557 on its host (an engine bound there or not), with the metrics. */
async function followed(options: { silenceMs?: number; replayPort?: number; bind?: boolean } = {}) {
  // The clock is faked; setImmediate (flush) stays real.
  vi.useFakeTimers({ now: 1_000_000, toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  const engine = options.bind === false ? undefined : FakeKvEngine.bind('tcp://10.0.0.5:5557');
  const p0: Worker = { url: 'http://10.0.0.5:8000', name: 'p0' };
  const { records, logger } = recordingLogger();
  const kv = new KvFollower<Worker>({
    port: 5557,
    ...(options.replayPort === undefined ? {} : { replayPort: options.replayPort }),
    silenceMs: options.silenceMs ?? T,
    logger,
  });
  open.push(kv);
  const registry = new Registry();
  registerKvMetrics([registry], kv as KvFollower<{ url: string }>, (worker) => (worker as Worker).name ?? worker.url);
  const value = async (name: string) =>
    (await registry.getMetricsAsJSON()).find((each) => each.name === name)?.values.find((v) => v.labels.worker === 'p0')
      ?.value;
  await kv.start([new WorkerPool([p0])]);
  const warnings = () => records.filter((record) => record.level === 'warn');
  return { kv, p0, engine, records, warnings, value };
}

describe('KvFollower: a view blind after work is loud', () => {
  it('no event within T of a prompt the worker computed: untrusted, one warning naming the worker, endpoint and what to check, counted', async () => {
    const { kv, p0, warnings, value } = await followed();
    kv.sent(p0);
    vi.advanceTimersByTime(T - 1);
    expect(kv.index?.isTrusted(p0)).toBe(true);
    vi.advanceTimersByTime(1);
    expect(kv.index?.isTrusted(p0)).toBe(false);
    expect(await value('disagg_kv_view_trusted')).toBe(0);
    expect(await value('disagg_kv_views_blind_total')).toBe(1);
    // More work and more time: the same episode, no second line.
    kv.sent(p0);
    vi.advanceTimersByTime(10 * T);
    expect(warnings()).toHaveLength(1);
    const [warning] = warnings();
    expect(warning?.fields).toMatchObject({ worker: 'p0', endpoint: 'tcp://10.0.0.5:5557', silenceMs: T });
    const hint = (warning?.fields as { hint?: string } | undefined)?.hint;
    expect(hint).toContain('--kv-events-config');
    expect(hint).toContain('"publisher": "zmq"');
    expect(hint).toContain('tcp://*:5557');
    expect(hint).toContain('is port 5557 open');
    expect(hint).toContain('--kv-events-port 5557');
    expect(await value('disagg_kv_views_blind_total')).toBe(1);
  });

  it('the first event afterwards: trusted again, said at info; a later blind spell counts again', async () => {
    const { kv, p0, engine, records, value } = await followed();
    kv.sent(p0);
    vi.advanceTimersByTime(T);
    expect(kv.index?.isTrusted(p0)).toBe(false);
    engine?.publish([store(1n)]);
    await flush();
    expect(kv.index?.isTrusted(p0)).toBe(true);
    expect(await value('disagg_kv_view_trusted')).toBe(1);
    expect(
      records.find((record) => record.level === 'info' && record.message?.includes('again'))?.fields,
    ).toMatchObject({
      worker: 'p0',
      endpoint: 'tcp://10.0.0.5:5557',
    });
    vi.advanceTimersByTime(1);
    kv.sent(p0);
    vi.advanceTimersByTime(T);
    expect(await value('disagg_kv_views_blind_total')).toBe(2);
  });

  it('while events keep coming after work, it is never blind', async () => {
    const { kv, p0, engine, warnings } = await followed();
    for (let i = 1n; i <= 5n; i++) {
      kv.sent(p0);
      vi.advanceTimersByTime(T / 2);
      engine?.publish([store(i)]);
      await flush();
    }
    vi.advanceTimersByTime(10 * T);
    expect(kv.index?.isTrusted(p0)).toBe(true);
    expect(warnings()).toEqual([]);
  });

  it('a worker never given work is never blind, however long nothing comes', async () => {
    const { kv, p0, warnings, value } = await followed({ bind: false });
    vi.advanceTimersByTime(100 * T);
    expect(kv.index?.isTrusted(p0)).toBe(true);
    expect(warnings()).toEqual([]);
    expect(await value('disagg_kv_views_blind_total')).toBe(0);
  });

  it('--kv-events-silence-ms 0: never blind', async () => {
    const { kv, p0, warnings } = await followed({ silenceMs: 0 });
    kv.sent(p0);
    vi.advanceTimersByTime(100 * T);
    expect(kv.index?.isTrusted(p0)).toBe(true);
    expect(warnings()).toEqual([]);
  });

  it('a replay that fails names the worker, and says to check the engine’s replay_endpoint and --kv-events-replay-port', async () => {
    const engine = FakeKvEngine.bind('tcp://10.0.0.6:5557', 'tcp://10.0.0.6:5558');
    engine.replays = 'fail';
    const { records, logger } = recordingLogger();
    const kv = new KvFollower<Worker>({ port: 5557, replayPort: 5558, logger });
    open.push(kv);
    await kv.start([new WorkerPool([{ url: 'http://10.0.0.6:8000', name: 'p1' }])]);
    const failed = records.find((record) => record.level === 'warn' && record.message?.includes('replay failed'));
    expect(failed?.fields).toMatchObject({ worker: 'p1', endpoint: 'tcp://10.0.0.6:5558' });
    const hint = (failed?.fields as { hint?: string } | undefined)?.hint;
    expect(hint).toContain('"replay_endpoint": "tcp://*:5558"');
    expect(hint).toContain('--kv-events-replay-port 5558');
  });
});
