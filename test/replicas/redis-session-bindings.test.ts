// Session bindings in one real redis-server, and the session policy that follows them.

import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisSessionBindings, storedSessionKey } from '../../src/replicas/redis-session-bindings.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { sessionAffinity } from '../../src/routing/session-affinity.js';
import type { SessionBindingStore } from '../../src/routing/session-bindings.js';
import { WorkerPool } from '../../src/routing/worker-pool.js';
import { recordingLogger } from '../support/async.js';
import { eventuallyAsync } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function store(url: string) {
  const logger = recordingLogger();
  const bindings = new RedisSessionBindings({ url, logger: logger.logger });
  cleanups.push(() => bindings.close());
  return { bindings, logs: logger.records };
}

describe.skipIf(redisServer.skip)(`RedisSessionBindings (${redisServer.why})`, () => {
  it('binds a session once: the first binding wins, another replica’s later one does not replace it', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const [a, b] = [store(redis.url).bindings, store(redis.url).bindings];
    expect(await a.lookup('s1')).toEqual({});
    a.bind('s1', 'prefill', 'http://p0', undefined);
    await eventuallyAsync(async () => (await b.lookup('s1')).prefill === 'http://p0', 'bound');
    b.bind('s1', 'prefill', 'http://p1', undefined);
    b.bind('s1', 'decode', 'http://d1', undefined);
    await eventuallyAsync(async () => (await a.lookup('s1')).decode === 'http://d1', 'decode bound');
    expect(await a.lookup('s1')).toEqual({ prefill: 'http://p0', decode: 'http://d1' });
  });

  it("a client's long session key costs Redis a digest, not its size; short plain keys stay readable", async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { bindings } = store(redis.url);
    const long = `s-${'k'.repeat(16_000)}`;
    bindings.bind(long, 'prefill', 'http://p0', undefined);
    bindings.bind('conv-42', 'prefill', 'http://p1', undefined);
    bindings.bind('a}b{c', 'prefill', 'http://p2', undefined);
    await eventuallyAsync(async () => (await bindings.lookup(long)).prefill === 'http://p0', 'long key bound');
    await eventuallyAsync(async () => (await bindings.lookup('a}b{c')).prefill === 'http://p2', 'braced key bound');
    const client = new Redis(redis.url);
    cleanups.push(() => client.disconnect());
    const keys = (await client.keys('disagg:sessions:*')).sort();
    expect(keys).toEqual(
      [
        `disagg:sessions:{${storedSessionKey(long)}}:prefill`,
        `disagg:sessions:{${storedSessionKey('a}b{c')}}:prefill`,
        'disagg:sessions:{conv-42}:prefill',
      ].sort(),
    );
    expect(Math.max(...keys.map((key) => key.length))).toBeLessThan(120);
    // Another long key is another session.
    expect(await bindings.lookup(`s-${'k'.repeat(15_999)}x`)).toEqual({});
  });

  it('replaces a binding only while it still names the worker that left', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { bindings } = store(redis.url);
    bindings.bind('s1', 'prefill', 'http://p0', undefined);
    await eventuallyAsync(async () => (await bindings.lookup('s1')).prefill === 'http://p0', 'bound');
    // Two replicas saw p0 leave and chose differently: the first replacement wins.
    bindings.bind('s1', 'prefill', 'http://p1', 'http://p0');
    bindings.bind('s1', 'prefill', 'http://p2', 'http://p0');
    await eventuallyAsync(async () => (await bindings.lookup('s1')).prefill === 'http://p1', 'replaced once');
    expect((await bindings.lookup('s1')).prefill).toBe('http://p1');
  });

  it('answers no binding while Redis is gone, saying so once', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { bindings, logs } = store(redis.url);
    await bindings.lookup('s1');
    await redis.stop();
    expect(await bindings.lookup('s1')).toEqual({});
    expect(await bindings.lookup('s2')).toEqual({});
    expect(logs.filter((r) => String(r.message).startsWith('Cannot read or write session bindings'))).toHaveLength(1);
  });
});

describe('the session policy with bindings', () => {
  const workers = ['http://p0', 'http://p1', 'http://p2'];
  function bound(binding: Record<string, string>) {
    const binds: string[] = [];
    const storeOf: SessionBindingStore = {
      lookup: async () => binding,
      bind: (key, role, worker, replacing) => binds.push(`${key} ${role} ${worker} ${replacing ?? '-'}`),
    };
    const pool = new WorkerPool(workers, {
      selection: sessionAffinity<string>({ bindings: { role: 'prefill', store: storeOf, keyOf: (w) => w } }),
    });
    const input = new RoutingInput({ prompt: 'x' }, 's1');
    input.sessionBindings = binding;
    return { pool, input, binds };
  }

  it('sends a bound session to its worker, and binds nothing more', () => {
    for (const worker of workers) {
      const { pool, input, binds } = bound({ prefill: worker });
      expect(pool.acquire(undefined, input).worker).toBe(worker);
      expect(binds).toEqual([]);
    }
  });

  it('binds an unbound session to the worker hashing chose, and rebinds one whose worker left', () => {
    const fresh = bound({});
    const chosen = fresh.pool.acquire(undefined, fresh.input).worker;
    expect(fresh.binds).toEqual([`s1 prefill ${chosen} -`]);
    const stale = bound({ prefill: 'http://gone' });
    const again = stale.pool.acquire(undefined, stale.input).worker;
    expect(again).toBe(chosen);
    expect(stale.binds).toEqual([`s1 prefill ${chosen} http://gone`]);
  });

  it('without a lookup (no shared bindings) routes and binds as before: by hashing, nothing written', () => {
    const { pool, binds } = bound({});
    pool.acquire(undefined, new RoutingInput({ prompt: 'x' }, 's1'));
    expect(binds).toEqual([]);
  });
});
