// Replicas' requests in flight shared through one real redis-server.
import { afterEach, describe, expect, it } from 'vitest';
import { SharedInFlight, SUSPECT_LOAD } from '../../src/replicas/shared-in-flight.js';
import { recordingLogger } from '../support/async.js';
import { eventuallyAsync } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A replica: its own counts (set by the test) and its share of the others'. */
function replica(url: string, id: string, options: { ttlMs?: number } = {}) {
  const counts = new Map<string, number>();
  const down = new Set<string>();
  const logger = recordingLogger();
  const outcomes: string[] = [];
  const shared = new SharedInFlight({
    url,
    replicaId: id,
    local: () => counts,
    down: () => down,
    intervalMs: 50,
    ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
    logger: logger.logger,
    onSync: (outcome) => outcomes.push(outcome),
  });
  cleanups.push(() => shared.close());
  const view = shared.viewOf((worker: string) => worker);
  return { shared, counts, down, view, logs: logger.records, outcomes };
}

describe.skipIf(redisServer.skip)(`SharedInFlight (${redisServer.why})`, () => {
  it("sums the other replicas' counts per worker, never its own", async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const [a, b, c] = [replica(redis.url, 'a'), replica(redis.url, 'b'), replica(redis.url, 'c')];
    a.counts.set('decode-0', 2);
    b.counts.set('decode-0', 3).set('decode-1', 1);
    c.counts.set('decode-1', 4);
    for (const each of [a, b, c]) await each.shared.sync();
    await a.shared.sync();
    expect([a.view.inFlight('decode-0'), a.view.inFlight('decode-1'), a.view.inFlight('decode-9')]).toEqual([3, 5, 0]);
    await b.shared.sync();
    expect([b.view.inFlight('decode-0'), b.view.inFlight('decode-1')]).toEqual([2, 4]);
    expect(a.shared.replicas).toBe(3);
    // A count that drops to zero is gone at the next round.
    b.counts.clear();
    await b.shared.sync();
    await a.shared.sync();
    expect([a.view.inFlight('decode-0'), a.view.inFlight('decode-1')]).toEqual([0, 4]);
  });

  it("counts a worker another replica's health found down as SUSPECT_LOAD busier, once however many said so, until they take it back", async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const [a, b, c] = [replica(redis.url, 'a'), replica(redis.url, 'b'), replica(redis.url, 'c')];
    b.down.add('decode-1');
    c.down.add('decode-1');
    c.counts.set('decode-1', 2);
    for (const each of [b, c, a]) await each.shared.sync();
    expect([a.view.inFlight('decode-0'), a.view.inFlight('decode-1')]).toEqual([0, SUSPECT_LOAD + 2]);
    b.down.clear();
    c.down.clear();
    for (const each of [b, c, a]) await each.shared.sync();
    expect(a.view.inFlight('decode-1')).toBe(2);
  });

  it('forgets a replica that stops writing within its time to live', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const a = replica(redis.url, 'a', { ttlMs: 200 });
    const b = replica(redis.url, 'b', { ttlMs: 200 });
    b.counts.set('decode-0', 7);
    await b.shared.sync();
    await a.shared.sync();
    expect(a.view.inFlight('decode-0')).toBe(7);
    // b dies without a word (no close): a still counts it until its entry ages out.
    await eventuallyAsync(async () => {
      await a.shared.sync();
      return a.view.inFlight('decode-0') === 0 && a.shared.replicas === 1;
    }, 'b aged out');
  });

  it('routes on its own view while Redis is gone, says so once, and shares again once it is back', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const a = replica(redis.url, 'a');
    const b = replica(redis.url, 'b');
    b.counts.set('decode-0', 1);
    await b.shared.sync();
    await a.shared.sync();
    expect(a.view.inFlight('decode-0')).toBe(1);
    await redis.stop();
    await a.shared.sync();
    await a.shared.sync();
    expect(a.view.inFlight('decode-0')).toBe(0);
    expect(a.outcomes.slice(-2)).toEqual(['failed', 'failed']);
    expect(
      a.logs.filter((record) => String(record.message).startsWith('Cannot share requests in flight')),
    ).toHaveLength(1);
    await redis.start();
    await eventuallyAsync(async () => {
      await b.shared.sync();
      await a.shared.sync();
      return a.view.inFlight('decode-0') === 1;
    }, 'shared again');
    expect(
      a.logs.some((record) =>
        String(record.message).startsWith('Sharing requests in flight with the other replicas again'),
      ),
    ).toBe(true);
  });

  it('runs its rounds on its own once started, and takes its counts out of Redis when closed', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const a = replica(redis.url, 'a');
    const b = replica(redis.url, 'b');
    a.counts.set('decode-0', 2);
    a.shared.start();
    b.shared.start();
    await eventuallyAsync(async () => b.view.inFlight('decode-0') === 2, 'a seen by b');
    await a.shared.close();
    await eventuallyAsync(async () => b.view.inFlight('decode-0') === 0 && b.shared.replicas === 1, 'a gone at once');
  });
});
