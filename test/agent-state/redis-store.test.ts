// The Redis AgentStore against one real redis-server per file: the contract every backend
// keeps, then what only a store the replicas share must: one quota for all of them, an outage
// that fails fast and heals, and keys Redis frees by itself.

import { type AddressInfo, createServer, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AgentStoreQuotaError,
  AgentStoreUnavailableError,
  type JsonObject,
} from '../../src/agent-state/agent-store.js';
import { RedisAgentStore, type RedisAgentStoreOptions } from '../../src/agent-state/redis-store.js';
import { recordingLogger } from '../support/async.js';
import { eventuallyAsync } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';
import { describeStoreContract, responseOf } from './store-contract.js';

const redisServer = tool('redis-server', 'redis-server');
let server: Awaited<ReturnType<typeof startRedis>> | undefined;
let prefixes = 0;
/** A key prefix of each store's own, so that no test sees another's keys. */
const freshPrefix = () => `test:${++prefixes}:`;

beforeAll(async () => {
  if (!redisServer.skip) server = await startRedis();
});
afterAll(async () => {
  await server?.close();
});

const serverUrl = () => {
  if (server === undefined) throw new Error('redis-server did not start');
  return server.url;
};

describeStoreContract(
  'RedisAgentStore',
  async (options) => {
    const store = new RedisAgentStore({ ...options, url: serverUrl(), keyPrefix: freshPrefix() });
    return { store, close: () => store.close() };
  },
  { skip: redisServer.skip },
);

const item = (id: string): JsonObject => ({
  id,
  type: 'message',
  role: 'user',
  content: [{ type: 'input_text', text: id }],
});

describe.skipIf(redisServer.skip)(`RedisAgentStore in a shared Redis (${redisServer.why})`, () => {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  const open = (options: Partial<RedisAgentStoreOptions> = {}) => {
    const store = new RedisAgentStore({ url: serverUrl(), ...options });
    cleanups.push(() => store.close());
    return store;
  };
  const raw = (url = serverUrl()) => {
    const client = new Redis(url);
    cleanups.push(() => client.disconnect());
    return client;
  };

  it("two replicas on one Redis see each other's responses and conversations", async () => {
    const keyPrefix = freshPrefix();
    const [a, b] = [open({ keyPrefix }), open({ keyPrefix })];
    await a.putResponse(responseOf('resp_1', 'alice'));
    await b.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
    expect((await a.responseChain('resp_2', 'alice', 10))?.responses.map((one) => one.id)).toEqual([
      'resp_1',
      'resp_2',
    ]);
    await a.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_1')]);
    expect(await b.appendItems('conv_1', 'alice', [item('msg_2')])).toBe(true);
    const page = await a.listItems('conv_1', 'alice', { limit: 10, order: 'asc' });
    expect(page?.items.map((one) => one.id)).toEqual(['msg_1', 'msg_2']);
    expect(await b.usage('alice')).toEqual(await a.usage('alice'));
  });

  it("two replicas racing for an owner's last object slot: exactly one wins", async () => {
    const keyPrefix = freshPrefix();
    const limits = { maxObjectsPerOwner: 2 };
    const [a, b] = [open({ keyPrefix, limits }), open({ keyPrefix, limits })];
    await a.putResponse(responseOf('resp_0', 'alice'));
    for (let round = 0; round < 20; round++) {
      const results = await Promise.allSettled([
        a.putResponse(responseOf(`resp_a${round}`, 'alice')),
        b.putResponse(responseOf(`resp_b${round}`, 'alice')),
      ]);
      const won = results.filter((result) => result.status === 'fulfilled');
      const refused = results.flatMap((result) => (result.status === 'rejected' ? [result.reason] : []));
      expect(won).toHaveLength(1);
      expect(refused.every((error) => AgentStoreQuotaError.is(error) && error.limit === 'objects')).toBe(true);
      expect((await a.usage('alice')).objects).toBe(2);
      // Free the slot for the next round.
      expect(
        (await a.deleteResponse(`resp_a${round}`, 'alice')) || (await a.deleteResponse(`resp_b${round}`, 'alice')),
      ).toBe(true);
    }
  });

  it('two replicas appending to one conversation at its object limit: one append is whole, the other absent', async () => {
    const keyPrefix = freshPrefix();
    const limits = { maxObjectsPerOwner: 4 };
    const [a, b] = [open({ keyPrefix, limits }), open({ keyPrefix, limits })];
    await a.createConversation({ id: 'conv_r', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_0')]);
    const results = await Promise.allSettled([
      a.appendItems('conv_r', 'alice', [item('msg_a1'), item('msg_a2')]),
      b.appendItems('conv_r', 'alice', [item('msg_b1'), item('msg_b2')]),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const ids = (await a.listItems('conv_r', 'alice', { limit: 10, order: 'asc' }))?.items.map((one) => one.id);
    expect([
      ['msg_0', 'msg_a1', 'msg_a2'],
      ['msg_0', 'msg_b1', 'msg_b2'],
    ]).toContainEqual(ids);
    expect(await a.usage('alice')).toMatchObject({ objects: 4 });
  });

  it('every key it writes carries an expiry, so Redis frees the objects by itself', async () => {
    const keyPrefix = freshPrefix();
    const ttlMs = 60_000;
    const store = open({ keyPrefix, limits: { ttlMs } });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_1')]);
    await store.appendItems('conv_1', 'alice', [item('msg_2')]);
    await store.updateConversation('conv_1', 'alice', { topic: 'x' });
    const client = raw();
    const keys = await client.keys(`${keyPrefix}*`);
    // The response, the conversation, its items, their order, and the owner's accounting.
    expect(keys.length).toBe(8);
    for (const key of keys) {
      const pttl = await client.pttl(key);
      expect(pttl, key).toBeGreaterThan(0);
      expect(pttl, key).toBeLessThanOrEqual(ttlMs);
    }
  });

  it('keeps usage exact when Redis freed expired objects before the store saw them', async () => {
    const keyPrefix = freshPrefix();
    let now = 1_000;
    const store = open({ keyPrefix, clock: () => now, limits: { ttlMs: 1_000, maxObjectsPerOwner: 2 } });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, []);
    // Redis expires the objects' keys on its own clock: here, all at once.
    const client = raw();
    const objects = (await client.keys(`${keyPrefix}*`)).filter((key) => /:(r|c):/.test(key));
    expect(objects).toHaveLength(2);
    await client.del(...objects);
    now += 1_001;
    expect(await store.usage('alice')).toEqual({ objects: 0, bytes: 0 });
    await store.putResponse(responseOf('resp_2', 'alice', undefined, now));
    await store.putResponse(responseOf('resp_3', 'alice', undefined, now));
    expect((await store.usage('alice')).objects).toBe(2);
  });

  it('an object Redis freed early is stored again as a replacement, not counted twice', async () => {
    const keyPrefix = freshPrefix();
    const store = open({ keyPrefix });
    await store.putResponse(responseOf('resp_1', 'alice'));
    const before = await store.usage('alice');
    await raw().del(`${keyPrefix}{alice}:r:resp_1`);
    expect(await store.getResponse('resp_1', 'alice')).toBeUndefined();
    await store.putResponse(responseOf('resp_1', 'alice'));
    expect(await store.usage('alice')).toEqual(before);
  });

  it("frees an expired object's slot for the next write of its owner", async () => {
    let now = 1_000;
    const store = open({ keyPrefix: freshPrefix(), clock: () => now, limits: { ttlMs: 1_000, maxObjectsPerOwner: 2 } });
    await store.putResponse(responseOf('resp_1', 'alice'));
    now += 600;
    await store.putResponse(responseOf('resp_2', 'alice', undefined, now));
    now += 600;
    await store.putResponse(responseOf('resp_3', 'alice', undefined, now));
    expect((await store.usage('alice')).objects).toBe(2);
    expect(await store.getResponse('resp_2', 'alice')).toBeDefined();
  });

  it('counts each item by its JSON, and a conversation by its own', async () => {
    const store = open({ keyPrefix: freshPrefix() });
    const conversation = { id: 'conv_b', owner: 'alice', createdAt: 7, metadata: { topic: 'héllo' } };
    const items = [item('msg_1'), item('msg_2')];
    await store.createConversation(conversation, items);
    const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value));
    expect(await store.usage('alice')).toEqual({
      objects: 3,
      bytes: bytes(conversation) + bytes(items[0]) + bytes(items[1]),
    });
    await store.updateConversation('conv_b', 'alice', { topic: 'a longer topic' });
    await store.deleteItem('conv_b', 'alice', 'msg_1');
    expect(await store.usage('alice')).toEqual({
      objects: 2,
      bytes: bytes({ ...conversation, metadata: { topic: 'a longer topic' } }) + bytes(items[1]),
    });
  });

  it('an item id the conversation holds already is replaced in place, not added twice', async () => {
    const store = open({ keyPrefix: freshPrefix() });
    await store.createConversation({ id: 'conv_u', owner: 'alice', createdAt: 1, metadata: {} }, [
      item('msg_1'),
      item('msg_2'),
    ]);
    const changed = { ...item('msg_1'), status: 'completed' };
    expect(await store.appendItems('conv_u', 'alice', [changed, item('msg_3')])).toBe(true);
    const page = await store.listItems('conv_u', 'alice', { limit: 10, order: 'asc' });
    expect(page?.items).toEqual([changed, item('msg_2'), item('msg_3')]);
    expect((await store.usage('alice')).objects).toBe(4);
  });

  it('creating a conversation under an id its owner holds replaces it, items and all', async () => {
    const store = open({ keyPrefix: freshPrefix() });
    await store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: { v: '1' } }, [
      item('msg_1'),
      item('msg_2'),
    ]);
    const again = { id: 'conv_1', owner: 'alice', createdAt: 2, metadata: { v: '2' } };
    await store.createConversation(again, [item('msg_3')]);
    expect(await store.getConversation('conv_1', 'alice')).toEqual(again);
    expect((await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' }))?.items).toEqual([item('msg_3')]);
    const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value));
    expect(await store.usage('alice')).toEqual({ objects: 2, bytes: bytes(again) + bytes(item('msg_3')) });
  });

  it('takes limits without a bound: no time to live, no quota', async () => {
    const store = open({
      keyPrefix: freshPrefix(),
      limits: { ttlMs: Number.POSITIVE_INFINITY, maxObjectsPerOwner: Number.POSITIVE_INFINITY },
    });
    await store.putResponse(responseOf('resp_1', 'alice'));
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
  });

  it("keeps an owner's ids apart from another's: the same id is two objects", async () => {
    const store = open({ keyPrefix: freshPrefix() });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.putResponse(responseOf('resp_1', 'bob'));
    expect((await store.getResponse('resp_1', 'alice'))?.owner).toBe('alice');
    expect(await store.deleteResponse('resp_1', 'bob')).toBe(true);
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
  });

  it('an owner name with braces, or a long one, keeps its objects apart from the others', async () => {
    const store = open({ keyPrefix: freshPrefix() });
    const long = `key-${'k'.repeat(500)}`;
    await store.putResponse(responseOf('resp_1', 'a}b{c'));
    await store.putResponse(responseOf('resp_1', long));
    expect((await store.getResponse('resp_1', 'a}b{c'))?.owner).toBe('a}b{c');
    expect((await store.getResponse('resp_1', long))?.owner).toBe(long);
    expect(await store.getResponse('resp_1', `key-${'k'.repeat(499)}x`)).toBeUndefined();
  });

  it('fails every call with AgentStoreUnavailableError while Redis is down, and works again once it is back', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { logger, records } = recordingLogger();
    const store = open({ url: redis.url, keyPrefix: freshPrefix(), timeoutMs: 300, logger });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await redis.stop();
    const calls: Array<() => Promise<unknown>> = [
      () => store.putResponse(responseOf('resp_2', 'alice')),
      () => store.getResponse('resp_1', 'alice'),
      () => store.deleteResponse('resp_1', 'alice'),
      () => store.responseChain('resp_1', 'alice', 10),
      () => store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, []),
      () => store.getConversation('conv_1', 'alice'),
      () => store.updateConversation('conv_1', 'alice', {}),
      () => store.deleteConversation('conv_1', 'alice'),
      () => store.appendItems('conv_1', 'alice', [item('msg_1')]),
      () => store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' }),
      () => store.getItem('conv_1', 'alice', 'msg_1'),
      () => store.deleteItem('conv_1', 'alice', 'msg_1'),
      () => store.usage('alice'),
    ];
    const host = redis.url.slice('redis://'.length);
    for (const call of calls) {
      const error = await call().then(
        () => undefined,
        (failure: unknown) => failure,
      );
      expect(AgentStoreUnavailableError.is(error), String(error)).toBe(true);
      expect((error as Error).message).toContain(`Redis at ${host}`);
      expect((error as Error).cause).toBeDefined();
    }
    expect(records.filter((record) => record.level === 'error')).toHaveLength(1);
    await redis.start();
    await eventuallyAsync(
      () =>
        store.usage('alice').then(
          () => true,
          () => false,
        ),
      'Redis answers again',
    );
    await store.putResponse(responseOf('resp_3', 'alice'));
    expect((await store.getResponse('resp_3', 'alice'))?.id).toBe('resp_3');
    expect(
      records.some((record) =>
        String(record.message).startsWith('The stored Responses and Conversations answer again'),
      ),
    ).toBe(true);
  });

  it('a Redis that stops answering is unavailable after the timeout, not a wait until it answers', async () => {
    const store = open({ keyPrefix: freshPrefix(), timeoutMs: 200 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    const client = raw();
    // Redis takes no command for 2 s (nor can it be told to stop sooner): a call that waited
    // for it would be answered, and fail this test.
    await client.call('CLIENT', 'PAUSE', '2000', 'ALL');
    const read = await store.getResponse('resp_1', 'alice').catch((failure: unknown) => failure);
    expect(AgentStoreUnavailableError.is(read)).toBe(true);
    const write = await store.putResponse(responseOf('resp_2', 'alice')).catch((failure: unknown) => failure);
    expect(AgentStoreUnavailableError.is(write)).toBe(true);
    // The write given up on may still be done once Redis answers, but whole or not at all.
    await client.ping();
    const stored = (await store.getResponse('resp_2', 'alice')) === undefined ? 1 : 2;
    expect((await store.usage('alice')).objects).toBe(stored);
  });

  it('a server that accepts the connection and never answers is unavailable after the timeout', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => silent.close(resolve));
    });
    const { port } = silent.address() as AddressInfo;
    const store = open({ url: `redis://127.0.0.1:${port}`, keyPrefix: freshPrefix(), timeoutMs: 200 });
    const error = await store.usage('alice').catch((failure: unknown) => failure);
    expect(AgentStoreUnavailableError.is(error)).toBe(true);
    expect((error as Error).message).toContain(`127.0.0.1:${port}`);
    // A guard against the wait, not a measure: the driver alone gives up after seconds.
  }, 1_500);

  it("never puts Redis's password in a message or its description", async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    await redis.stop();
    const url = redis.url.replace('redis://', 'redis://agent:hunter2%21secret@');
    const store = open({ url, keyPrefix: freshPrefix(), timeoutMs: 200 });
    const error = (await store.getResponse('resp_1', 'alice').catch((failure: unknown) => failure)) as Error;
    expect(AgentStoreUnavailableError.is(error)).toBe(true);
    expect(error.message).toContain(redis.url.slice('redis://'.length));
    for (const secret of ['hunter2', 'secret']) {
      expect(error.message).not.toContain(secret);
      expect(store.description).not.toContain(secret);
    }
    expect(store.description).toBe(redis.url.replace('redis://', 'redis://agent@'));
  });

  it('refuses a URL that is not Redis', () => {
    expect(() => new RedisAgentStore({ url: 'postgres://db/agents' })).toThrow(TypeError);
  });
});
