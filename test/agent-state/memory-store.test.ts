import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AgentStoreQuotaError,
  AgentStoreUnavailableError,
  type JsonObject,
  objectBytes,
  type StoredConversation,
  type StoredResponse,
} from '../../src/agent-state/agent-store.js';
import { MemoryAgentStore } from '../../src/agent-state/memory-store.js';
import { propertyOptions } from '../support/property.js';
import { describeStoreContract, responseOf } from './store-contract.js';

describeStoreContract('MemoryAgentStore', async (options) => {
  const store = new MemoryAgentStore(options);
  return { store, close: () => store.close() };
});

const DAY = 24 * 60 * 60 * 1000;
const item = (id: string, text = id): JsonObject => ({ id, type: 'message', role: 'user', content: [text] });
const conversation = (id: string, owner = 'alice'): StoredConversation => ({ id, owner, createdAt: 1, metadata: {} });

describe('MemoryAgentStore bounds what it holds over all owners', () => {
  it('evicts the least recently used object once it holds maxEntries, and a read counts as a use', async () => {
    const store = new MemoryAgentStore({ maxEntries: 3 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.putResponse(responseOf('resp_2', 'bob'));
    await store.putResponse(responseOf('resp_3', 'alice'));
    await store.getResponse('resp_1', 'alice');
    await store.putResponse(responseOf('resp_4', 'carol'));
    expect(await store.getResponse('resp_2', 'bob')).toBeUndefined();
    for (const [id, owner] of [
      ['resp_1', 'alice'],
      ['resp_3', 'alice'],
      ['resp_4', 'carol'],
    ] as const) {
      expect(await store.getResponse(id, owner)).toBeDefined();
    }
    expect(store.stats()).toMatchObject({ objects: 3, evictions: 1 });
    expect(await store.usage('bob')).toEqual({ objects: 0, bytes: 0 });
  });

  it('evicts the least recently used object once its bytes would pass maxBytes', async () => {
    const one = objectBytes(responseOf('resp_1', 'alice'));
    const store = new MemoryAgentStore({ maxBytes: 3 * one });
    for (const id of ['resp_1', 'resp_2', 'resp_3']) await store.putResponse(responseOf(id, 'alice'));
    await store.getResponse('resp_1', 'alice');
    await store.putResponse(responseOf('resp_4', 'alice'));
    expect(await store.getResponse('resp_2', 'alice')).toBeUndefined();
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
    expect(store.stats()).toEqual({ objects: 3, bytes: 3 * one, evictions: 1 });
    expect(await store.usage('alice')).toEqual({ objects: 3, bytes: 3 * one });
  });

  it('evicts a conversation with all its items, and every count loses exactly what they held', async () => {
    const store = new MemoryAgentStore({ maxEntries: 4 });
    await store.createConversation(conversation('conv_1'), [item('msg_1'), item('msg_2')]);
    await store.putResponse(responseOf('resp_1', 'bob'));
    const bob = await store.usage('bob');
    await store.putResponse(responseOf('resp_2', 'bob'));
    expect(await store.getConversation('conv_1', 'alice')).toBeUndefined();
    expect(await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' })).toBeUndefined();
    expect(await store.usage('alice')).toEqual({ objects: 0, bytes: 0 });
    expect(await store.usage('bob')).toEqual({ objects: 2, bytes: 2 * bob.bytes });
    expect(store.stats()).toEqual({ objects: 2, bytes: 2 * bob.bytes, evictions: 1 });
  });

  it('a conversation read is a use: listing its items keeps it over a response written before', async () => {
    const store = new MemoryAgentStore({ maxEntries: 4 });
    await store.createConversation(conversation('conv_1'), [item('msg_1')]);
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.listItems('conv_1', 'alice', { limit: 1, order: 'asc' });
    await store.putResponse(responseOf('resp_2', 'alice'));
    await store.putResponse(responseOf('resp_3', 'alice'));
    expect(await store.getResponse('resp_1', 'alice')).toBeUndefined();
    expect(await store.getItem('conv_1', 'alice', 'msg_1')).toEqual(item('msg_1'));
  });

  it('an evicted response breaks its chain: it cannot be continued', async () => {
    const store = new MemoryAgentStore({ maxEntries: 3 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
    await store.putResponse(responseOf('resp_3', 'alice', 'resp_2'));
    await store.putResponse(responseOf('resp_other', 'alice'));
    expect(await store.getResponse('resp_1', 'alice')).toBeUndefined();
    expect(await store.responseChain('resp_3', 'alice', 100)).toBeUndefined();
  });

  it("reading a chain uses its start last, so eviction takes the chain's newest turn first", async () => {
    const store = new MemoryAgentStore({ maxEntries: 3 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
    await store.putResponse(responseOf('resp_3', 'alice', 'resp_2'));
    expect((await store.responseChain('resp_3', 'alice', 100))?.complete).toBe(true);
    await store.putResponse(responseOf('resp_other', 'alice'));
    expect(await store.getResponse('resp_3', 'alice')).toBeUndefined();
    expect((await store.responseChain('resp_2', 'alice', 100))?.responses.map((r) => r.id)).toEqual([
      'resp_1',
      'resp_2',
    ]);
  });

  it('refuses an object larger than the whole store, evicting nothing for it', async () => {
    const store = new MemoryAgentStore({ maxEntries: 3, maxBytes: 2_000 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    const big = { ...responseOf('resp_big', 'alice'), response: { text: 'x'.repeat(2_000) } };
    const tooBig = await store.putResponse(big).catch((error: unknown) => error);
    expect(AgentStoreQuotaError.is(tooBig) && tooBig.limit).toBe('bytes');
    const items = [item('msg_1'), item('msg_2'), item('msg_3')];
    const tooMany = await store.createConversation(conversation('conv_1'), items).catch((error: unknown) => error);
    expect(AgentStoreQuotaError.is(tooMany) && tooMany.limit).toBe('objects');
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
    expect(store.stats()).toMatchObject({ objects: 1, evictions: 0 });
  });

  it('never counts an expired object against the bounds: a write removes it before it evicts anything', async () => {
    let now = 0;
    const store = new MemoryAgentStore({ maxEntries: 2, limits: { ttlMs: DAY }, clock: () => now });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.createConversation(conversation('conv_1', 'bob'), []);
    now = DAY + 1;
    await store.putResponse(responseOf('resp_2', 'alice'));
    await store.putResponse(responseOf('resp_3', 'alice'));
    expect(store.stats()).toMatchObject({ objects: 2, evictions: 0 });
    expect(await store.usage('bob')).toEqual({ objects: 0, bytes: 0 });
  });
});

describe('MemoryAgentStore keeps each owner apart', () => {
  it("another owner's object under the same id neither replaces nor reveals the first owner's", async () => {
    const store = new MemoryAgentStore();
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.putResponse({ ...responseOf('resp_1', 'bob'), response: { id: 'resp_1', status: 'failed' } });
    await store.createConversation(conversation('conv_1'), [item('msg_1', 'alice')]);
    await store.createConversation(conversation('conv_1', 'bob'), [item('msg_1', 'bob')]);
    expect(await store.getResponse('resp_1', 'alice')).toEqual(responseOf('resp_1', 'alice'));
    expect(await store.getItem('conv_1', 'alice', 'msg_1')).toEqual(item('msg_1', 'alice'));
    expect(await store.deleteResponse('resp_1', 'bob')).toBe(true);
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
    expect((await store.usage('alice')).objects).toBe(3);
  });
});

describe('MemoryAgentStore keeps copies: nobody changes what it stored but through the store', () => {
  it('a response passed in, or got back, changed by its caller, leaves the stored one as it was', async () => {
    const store = new MemoryAgentStore();
    const passed = responseOf('resp_1', 'alice');
    await store.putResponse(passed);
    (passed.response as { status: string }).status = 'failed';
    (passed.input[0] as { role: string }).role = 'system';
    const got = await store.getResponse('resp_1', 'alice');
    (got?.response as { status: string }).status = 'cancelled';
    const chain = await store.responseChain('resp_1', 'alice', 1);
    const inChain = chain?.responses[0] as StoredResponse;
    (inChain.input as JsonObject[]).pop();
    expect(await store.getResponse('resp_1', 'alice')).toEqual(responseOf('resp_1', 'alice'));
  });

  it('items and metadata passed in, or got back, changed by their caller, leave the stored ones as they were', async () => {
    const store = new MemoryAgentStore();
    const first = item('msg_1');
    await store.createConversation(conversation('conv_1'), [first]);
    const second = item('msg_2');
    await store.appendItems('conv_1', 'alice', [second]);
    first.role = 'assistant';
    second.role = 'assistant';
    const metadata: Record<string, string> = { topic: 'a' };
    await store.updateConversation('conv_1', 'alice', metadata);
    metadata.topic = 'b';
    const listed = await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' });
    (listed?.items[0] as JsonObject).role = 'tool';
    const one = await store.getItem('conv_1', 'alice', 'msg_2');
    (one as JsonObject).role = 'tool';
    const got = await store.getConversation('conv_1', 'alice');
    (got?.metadata as Record<string, string>).topic = 'c';
    expect((await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' }))?.items).toEqual([
      item('msg_1'),
      item('msg_2'),
    ]);
    expect((await store.getConversation('conv_1', 'alice'))?.metadata).toEqual({ topic: 'a' });
  });
});

describe('MemoryAgentStore, once closed', () => {
  it('answers every call with AgentStoreUnavailableError, and holds nothing', async () => {
    const store = new MemoryAgentStore();
    await store.putResponse(responseOf('resp_1', 'alice'));
    await store.close();
    const refused = await store.getResponse('resp_1', 'alice').catch((error: unknown) => error);
    expect(AgentStoreUnavailableError.is(refused)).toBe(true);
    expect(AgentStoreUnavailableError.is(await store.usage('alice').catch((error: unknown) => error))).toBe(true);
    expect(store.stats()).toMatchObject({ objects: 0, bytes: 0 });
  });

  it('refuses bounds that are not positive integers', () => {
    expect(() => new MemoryAgentStore({ maxEntries: 0 })).toThrow(RangeError);
    expect(() => new MemoryAgentStore({ maxBytes: 1.5 })).toThrow(RangeError);
  });
});

// One step of a workload: small id spaces so that steps meet the same objects again.
type Step =
  | { kind: 'put'; owner: number; id: number; previous: number | undefined; size: number }
  | { kind: 'create'; owner: number; id: number; items: number; size: number }
  | { kind: 'append'; owner: number; id: number; items: number; size: number }
  | { kind: 'deleteResponse' | 'deleteConversation' | 'read' | 'list'; owner: number; id: number }
  | { kind: 'deleteItem'; owner: number; id: number; item: number }
  | { kind: 'update'; owner: number; id: number; size: number }
  | { kind: 'tick'; ms: number };

const owner = fc.integer({ min: 0, max: 1 });
const id = fc.integer({ min: 0, max: 3 });
const size = fc.integer({ min: 0, max: 600 });
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('put' as const), owner, id, previous: fc.option(id, { nil: undefined }), size }),
  fc.record({ kind: fc.constant('create' as const), owner, id, items: fc.integer({ min: 0, max: 4 }), size }),
  fc.record({ kind: fc.constant('append' as const), owner, id, items: fc.integer({ min: 0, max: 4 }), size }),
  fc.record({
    kind: fc.constantFrom('deleteResponse' as const, 'deleteConversation' as const, 'read' as const, 'list' as const),
    owner,
    id,
  }),
  fc.record({ kind: fc.constant('deleteItem' as const), owner, id, item: fc.integer({ min: 0, max: 5 }) }),
  fc.record({ kind: fc.constant('update' as const), owner, id, size }),
  fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 400 }) }),
);

describe('MemoryAgentStore accounts exactly, whatever the workload', () => {
  it('after any sequence of writes, deletes, reads and expiries: within maxBytes and maxEntries, and every count is the sum of what it holds', async () => {
    const maxBytes = 3_000;
    const maxEntries = 12;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 20, maxLength: 80 }), async (steps) => {
        let now = 0;
        const store = new MemoryAgentStore({ maxBytes, maxEntries, limits: { ttlMs: 1_000 }, clock: () => now });
        let itemCount = 0;
        const items = (count: number, length: number) =>
          Array.from({ length: count }, () => item(`msg_${itemCount++ % 6}`, 'é'.repeat(length)));
        for (const one of steps) {
          const who = one.kind === 'tick' ? '' : `owner_${one.owner}`;
          const ignoreQuota = (error: unknown) => {
            if (!AgentStoreQuotaError.is(error)) throw error;
          };
          switch (one.kind) {
            case 'tick':
              now += one.ms;
              break;
            case 'put':
              await store
                .putResponse({
                  ...responseOf(`resp_${one.id}`, who, one.previous === undefined ? undefined : `resp_${one.previous}`),
                  response: { text: 'x'.repeat(one.size) },
                })
                .catch(ignoreQuota);
              break;
            case 'create':
              await store
                .createConversation(conversation(`conv_${one.id}`, who), items(one.items, one.size / 4))
                .catch(ignoreQuota);
              break;
            case 'append':
              await store.appendItems(`conv_${one.id}`, who, items(one.items, one.size / 4)).catch(ignoreQuota);
              break;
            case 'update':
              await store.updateConversation(`conv_${one.id}`, who, { note: 'y'.repeat(one.size) }).catch(ignoreQuota);
              break;
            case 'deleteResponse':
              await store.deleteResponse(`resp_${one.id}`, who);
              break;
            case 'deleteConversation':
              await store.deleteConversation(`conv_${one.id}`, who);
              break;
            case 'deleteItem':
              await store.deleteItem(`conv_${one.id}`, who, `msg_${one.item}`);
              break;
            case 'read':
              await store.responseChain(`resp_${one.id}`, who, 3);
              break;
            case 'list':
              await store.listItems(`conv_${one.id}`, who, { limit: 2, order: 'desc' });
              break;
          }
          const stats = store.stats();
          expect(stats.bytes).toBeLessThanOrEqual(maxBytes);
          expect(stats.objects).toBeLessThanOrEqual(maxEntries);
        }
        // Recount from what a reader finds: every owner's usage, and the store's, is exactly that.
        const total = { objects: 0, bytes: 0 };
        for (let o = 0; o <= 1; o++) {
          const who = `owner_${o}`;
          const found = { objects: 0, bytes: 0 };
          for (let i = 0; i <= 3; i++) {
            const response = await store.getResponse(`resp_${i}`, who);
            if (response !== undefined) {
              found.objects++;
              found.bytes += objectBytes(response);
            }
            const held = await store.getConversation(`conv_${i}`, who);
            if (held === undefined) continue;
            const page = await store.listItems(`conv_${i}`, who, { limit: 1_000, order: 'asc' });
            found.objects += 1 + (page?.items.length ?? 0);
            found.bytes += objectBytes(held) + (page?.items ?? []).reduce((sum, one) => sum + objectBytes(one), 0);
          }
          expect(await store.usage(who)).toEqual(found);
          total.objects += found.objects;
          total.bytes += found.bytes;
        }
        expect(store.stats()).toMatchObject(total);
      }),
      propertyOptions(150, 71),
    );
  });
});
