import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FakeKvEvent } from '../../../src/fakes/fake-kv-publisher.js';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { precisePrefix } from '../../../src/routing/kv-prefix.js';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { KvFollower } from '../../../src/server/fleet/kv-following.js';
import type { ResolvedProxyOptions } from '../../../src/server/options.js';
import { flush, recordingLogger } from '../../support/async.js';
import { FakeKvEngine } from '../../support/fake-zeromq.js';

// The real KvEventSubscriber over in-memory sockets (__mocks__/zeromq.ts, which re-exports
// ../support/fake-zeromq.ts): native zeromq crashes in the worker threads of the mutation runner,
// and real sockets deliver on their own time. Not a factory: vitest 4 hands the real module to
// a dynamic import that overlaps another of a factory-mocked one (vitest#7040), and KvFollower
// starts its subscribers together.
vi.mock('zeromq');

type Worker = { url: string; name?: string; dpRank?: number; kvEvents?: string; kvEventsReplay?: string };

const OFF: ResolvedProxyOptions['kvEvents'] = {
  port: undefined,
  replayPort: undefined,
  topic: undefined,
  silenceMs: 30_000,
};

const open: Array<KvFollower<Worker>> = [];
afterEach(async () => {
  for (const kv of open.splice(0)) await kv.close();
  FakeKvEngine.unbindAll();
});

function following(config: Partial<ResolvedProxyOptions['kvEvents']> = {}): KvFollower<Worker> {
  const kv = new KvFollower<Worker>({ ...OFF, ...config, logger: recordingLogger().logger });
  open.push(kv);
  return kv;
}

let hash = 0n;
/** One new block of two tokens. */
const store = (): FakeKvEvent => ({
  type: 'BlockStored',
  block_hashes: [++hash],
  parent_block_hash: null,
  token_ids: [1, 2],
  block_size: 2,
});

/** A worker with endpoints of its own, and the engine bound there. */
function ownEndpoints(name: string, { replay = false, topic = '' } = {}) {
  const endpoint = `tcp://${name}.test:5557`;
  const replayEndpoint = replay ? `tcp://${name}.test:5558` : undefined;
  const engine = FakeKvEngine.bind(endpoint, replayEndpoint, topic);
  const worker: Worker = {
    url: `http://${name}.test:8000`,
    name,
    kvEvents: endpoint,
    ...(replayEndpoint === undefined ? {} : { kvEventsReplay: replayEndpoint }),
  };
  return { worker, engine };
}

describe('KvFollower: whether it is on', () => {
  it('on with a port, or when any worker of either pool names its own endpoint; off otherwise', () => {
    const plain = () => new WorkerPool<Worker>([{ url: 'http://a:8000' }, { url: 'http://b:8000' }]);
    const own = new WorkerPool<Worker>([{ url: 'http://c:8000' }, { url: 'http://d:8000', kvEvents: 'tcp://d:5557' }]);
    expect(following().enabled([plain(), plain()])).toBe(false);
    expect(following().enabled([plain(), own])).toBe(true);
    expect(following({ port: 5557 }).enabled([plain(), plain()])).toBe(true);
  });

  it('off, it starts no index and follows nobody', async () => {
    const kv = following();
    await kv.start([new WorkerPool<Worker>([{ url: 'http://a:8000' }])]);
    expect(kv.index).toBeUndefined();
    expect(kv.subscribers.size).toBe(0);
  });

  it('started off, it stays off: a worker with its own endpoint that joins later is not followed', async () => {
    const kv = following();
    const pool = new WorkerPool<Worker>([{ url: 'http://a:8000' }]);
    await kv.start([pool]);
    const { worker, engine } = ownEndpoints('late');
    pool.add(worker);
    await kv.reconcile();
    expect(kv.subscribers.size).toBe(0);
    expect(engine.subscribers).toHaveLength(0);
  });

  it('closed, it follows no worker that joins afterwards', async () => {
    const kv = following();
    const first = ownEndpoints('first');
    const pool = new WorkerPool<Worker>([first.worker]);
    await kv.start([pool]);
    await kv.close();
    const late = ownEndpoints('late');
    pool.add(late.worker);
    await kv.reconcile();
    expect(kv.subscribers.size).toBe(0);
    expect(first.engine.open).toHaveLength(0);
    expect(late.engine.subscribers).toHaveLength(0);
  });
});

describe('KvFollower: where it follows each worker', () => {
  it('a worker without endpoints of its own is followed at the port on its host plus its DP rank, and replayed at the replay port plus its rank (an IPv6 host in brackets)', async () => {
    const workers: Worker[] = [
      { url: 'http://10.0.0.5:8000' },
      { url: 'http://10.0.0.5:8001', dpRank: 1 },
      { url: 'http://[fd00::7]:8000', dpRank: 2 },
    ];
    const engines = [
      FakeKvEngine.bind('tcp://10.0.0.5:5557', 'tcp://10.0.0.5:5600'),
      FakeKvEngine.bind('tcp://10.0.0.5:5558', 'tcp://10.0.0.5:5601'),
      FakeKvEngine.bind('tcp://[fd00::7]:5559', 'tcp://[fd00::7]:5602'),
    ];
    // Published before the router joined: only a replay brings them.
    engines.forEach((engine, i) => {
      for (let n = 0; n <= i; n++) engine.publish([store()]);
    });
    const kv = following({ port: 5557, replayPort: 5600 });
    await kv.start([new WorkerPool(workers.slice(0, 2)), new WorkerPool(workers.slice(2))]);
    expect(engines.map((engine) => engine.open.length)).toEqual([1, 1, 1]);
    expect(engines.map((engine) => engine.replayRequests)).toEqual([[0n], [0n], [0n]]);
    expect(workers.map((worker) => kv.index?.blocks(worker))).toEqual([1, 2, 3]);
  });

  it('without a replay port, a worker that names no replay endpoint of its own is never asked for a replay', async () => {
    const worker: Worker = { url: 'http://10.0.0.5:8000' };
    const engine = FakeKvEngine.bind('tcp://10.0.0.5:5557');
    const kv = following({ port: 5557 });
    await kv.start([new WorkerPool([worker])]);
    engine.publish([store()]);
    await flush();
    expect(kv.index?.blocks(worker)).toBe(1);
    expect(kv.subscribers.get(worker)?.stats.replays).toEqual({ recovered: 0, failed: 0 });
  });

  it("with a topic, only that topic's events are applied", async () => {
    const kv = following({ topic: 'kv@' });
    const ours = ownEndpoints('ours', { topic: 'kv@ours' });
    const other = ownEndpoints('other', { topic: 'metrics' });
    await kv.start([new WorkerPool([ours.worker, other.worker])]);
    ours.engine.publish([store()]);
    other.engine.publish([store()]);
    await flush();
    expect(kv.index?.blocks(ours.worker)).toBe(1);
    expect(kv.index?.blocks(other.worker)).toBe(0);
  });
});

describe('KvFollower: the index it feeds', () => {
  it("a worker's view is untrusted while its replay is under way, and trusted again once it is in", async () => {
    const { worker, engine } = ownEndpoints('slow', { replay: true });
    engine.replays = 'hold';
    const kv = following();
    const started = kv.start([new WorkerPool([worker])]);
    await flush();
    expect(kv.index?.isTrusted(worker)).toBe(false);
    engine.releaseReplays();
    await started;
    expect(kv.index?.isTrusted(worker)).toBe(true);
  });

  it('as the pool changes, workers that joined are followed, those that left dropped with their blocks, the others kept as they are', async () => {
    const stays = ownEndpoints('stays');
    const leaves = ownEndpoints('leaves');
    const joins = ownEndpoints('joins');
    const pool = new WorkerPool<Worker>([stays.worker, leaves.worker]);
    const kv = following();
    await kv.start([pool]);
    stays.engine.publish([store()]);
    leaves.engine.publish([store()]);
    await flush();
    const kept = kv.subscribers.get(stays.worker);
    await pool.remove(leaves.worker);
    pool.add(joins.worker);
    // No call: the follower watches its pools (pool.onChange).
    await flush();
    expect([...kv.subscribers.keys()]).toEqual([stays.worker, joins.worker]);
    expect(kv.subscribers.get(stays.worker)).toBe(kept);
    expect(stays.engine.subscribers).toHaveLength(1);
    expect(kv.index?.blocks(stays.worker)).toBe(1);
    expect(leaves.engine.open).toHaveLength(0);
    expect(kv.index?.blocks(leaves.worker)).toBe(0);
    expect(joins.engine.open).toHaveLength(1);
  });

  it('closed, it follows the pools no more: a worker that joins then is not subscribed to', async () => {
    const first = ownEndpoints('first');
    const pool = new WorkerPool<Worker>([first.worker]);
    const kv = following();
    await kv.start([pool]);
    await kv.close();
    const late = ownEndpoints('late-after-close');
    pool.add(late.worker);
    await flush();
    expect(kv.subscribers.size).toBe(0);
    expect(late.engine.subscribers).toHaveLength(0);
  });

  it('precisePrefix reads the index of a follower given whole, once it has one', async () => {
    const { worker, engine } = ownEndpoints('scored');
    const pool = new WorkerPool<Worker>([worker]);
    const kv = following();
    const policy = precisePrefix(kv);
    const input = new RoutingInput({ prompt: [1, 2] });
    expect(policy.cachedShare?.([worker], input)).toBe(0); // not started: no index yet
    await kv.start([pool]);
    engine.publish([store()]);
    await flush();
    expect(policy.cachedShare?.([worker], input)).toBe(1);
  });
});
