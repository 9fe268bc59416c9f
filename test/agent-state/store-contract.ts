// The rules every AgentStore backend keeps, written once and run against each (memory, Redis,
// PostgreSQL): a backend passes these or it is not a backend.

import { afterEach, describe, expect, it } from 'vitest';
import {
  type AgentStore,
  type AgentStoreOptions,
  AgentStoreQuotaError,
  type JsonObject,
  type StoredResponse,
} from '../../src/agent-state/agent-store.js';

/** A store of a test's own, empty, and how to let it go. */
export type OpenStore = (options: AgentStoreOptions) => Promise<{ store: AgentStore; close(): Promise<void> }>;

const DAY = 24 * 60 * 60 * 1000;

/** A response of `owner` continuing `previous`, stored at `at`. */
export function responseOf(id: string, owner: string, previous?: string, at = 1_000): StoredResponse {
  return {
    id,
    owner,
    storedAt: at,
    previousResponseId: previous,
    input: [
      { id: `msg_in_${id}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `ask ${id}` }] },
    ],
    response: {
      id,
      object: 'response',
      status: 'completed',
      output: [
        { id: `msg_out_${id}`, type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'ok' }] },
      ],
      usage: { input_tokens: 3, output_tokens: 1, total_tokens: 4 },
    },
  };
}

const item = (id: string, text = id): JsonObject => ({
  id,
  type: 'message',
  role: 'user',
  content: [{ type: 'input_text', text }],
});

/** Runs the contract against the backend `open` makes. */
export function describeStoreContract(name: string, open: OpenStore, options: { skip?: boolean } = {}): void {
  describe.skipIf(options.skip === true)(`${name} keeps the AgentStore contract`, () => {
    const opened: Array<() => Promise<void>> = [];
    let now = 1_000;
    const clock = () => now;
    const make = async (limits: AgentStoreOptions['limits'] = {}) => {
      now = 1_000;
      const made = await open({ limits, clock });
      opened.push(() => made.close());
      return made.store;
    };
    afterEach(async () => {
      for (const close of opened.splice(0)) await close();
    });

    it('finds a response for its owner only, as one that never existed for anyone else', async () => {
      const store = await make();
      await store.putResponse(responseOf('resp_a1', 'alice'));
      expect(await store.getResponse('resp_a1', 'alice')).toEqual(responseOf('resp_a1', 'alice'));
      expect(await store.getResponse('resp_a1', 'bob')).toBeUndefined();
      expect(await store.getResponse('resp_none', 'alice')).toBeUndefined();
    });

    it('keeps a response object exactly as given: nested items, unicode, numbers, nulls, events', async () => {
      const store = await make();
      const response: StoredResponse = {
        ...responseOf('resp_exact', 'alice'),
        conversationId: 'conv_1',
        response: {
          id: 'resp_exact',
          status: 'completed',
          output: [
            { type: 'reasoning', id: 'rs_1', encrypted_content: 'gAAAA+/=', summary: [] },
            { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'f', arguments: '{"a":[1,2.5,null]}' },
          ],
          metadata: { note: 'héllo 👋 "quoted" \\ back' },
          temperature: 0.7,
          top_p: null,
        },
        events: [
          { type: 'response.created', sequence_number: 0 },
          { type: 'response.completed', sequence_number: 1 },
        ],
      };
      await store.putResponse(response);
      expect(await store.getResponse('resp_exact', 'alice')).toEqual(response);
    });

    it('replaces a response stored again under its id (a background one as it goes)', async () => {
      const store = await make();
      const queued = { ...responseOf('resp_bg', 'alice'), response: { id: 'resp_bg', status: 'queued' } };
      await store.putResponse(queued);
      await store.putResponse(responseOf('resp_bg', 'alice'));
      expect((await store.getResponse('resp_bg', 'alice'))?.response.status).toBe('completed');
      expect((await store.usage('alice')).objects).toBe(1);
    });

    it('deletes a response for its owner alone, and a deleted one is gone', async () => {
      const store = await make();
      await store.putResponse(responseOf('resp_d', 'alice'));
      expect(await store.deleteResponse('resp_d', 'bob')).toBe(false);
      expect(await store.getResponse('resp_d', 'alice')).toBeDefined();
      expect(await store.deleteResponse('resp_d', 'alice')).toBe(true);
      expect(await store.getResponse('resp_d', 'alice')).toBeUndefined();
      expect(await store.deleteResponse('resp_d', 'alice')).toBe(false);
      expect(await store.usage('alice')).toEqual({ objects: 0, bytes: 0 });
    });

    it('walks a chain back to its start, oldest first', async () => {
      const store = await make();
      await store.putResponse(responseOf('resp_1', 'alice'));
      await store.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
      await store.putResponse(responseOf('resp_3', 'alice', 'resp_2'));
      const chain = await store.responseChain('resp_3', 'alice', 100);
      expect(chain?.complete).toBe(true);
      expect(chain?.responses.map((response) => response.id)).toEqual(['resp_1', 'resp_2', 'resp_3']);
      // A chain from the middle ends there.
      expect((await store.responseChain('resp_2', 'alice', 100))?.responses.map((r) => r.id)).toEqual([
        'resp_1',
        'resp_2',
      ]);
    });

    it('gives the newest responses of a chain longer than the limit, and says it is not complete', async () => {
      const store = await make();
      await store.putResponse(responseOf('resp_1', 'alice'));
      await store.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
      await store.putResponse(responseOf('resp_3', 'alice', 'resp_2'));
      const chain = await store.responseChain('resp_3', 'alice', 2);
      expect(chain).toEqual({
        responses: [responseOf('resp_2', 'alice', 'resp_1'), responseOf('resp_3', 'alice', 'resp_2')],
        complete: false,
      });
    });

    it("cannot continue a chain with a hole, or through another owner's response", async () => {
      const store = await make();
      await store.putResponse(responseOf('resp_1', 'alice'));
      await store.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
      await store.putResponse(responseOf('resp_3', 'alice', 'resp_2'));
      await store.putResponse(responseOf('resp_b', 'bob', 'resp_3'));
      expect(await store.responseChain('resp_3', 'bob', 100)).toBeUndefined();
      expect(await store.responseChain('resp_b', 'bob', 100)).toBeUndefined();
      await store.deleteResponse('resp_2', 'alice');
      expect(await store.responseChain('resp_3', 'alice', 100)).toBeUndefined();
      expect(await store.responseChain('resp_none', 'alice', 100)).toBeUndefined();
    });

    it('keeps a conversation for its owner: create, read, update its metadata, delete', async () => {
      const store = await make();
      const conversation = { id: 'conv_1', owner: 'alice', createdAt: 1, metadata: { topic: 'demo' } };
      await store.createConversation(conversation, [item('msg_1')]);
      expect(await store.getConversation('conv_1', 'alice')).toEqual(conversation);
      expect(await store.getConversation('conv_1', 'bob')).toBeUndefined();
      expect(await store.updateConversation('conv_1', 'bob', { topic: 'stolen' })).toBeUndefined();
      expect(await store.updateConversation('conv_1', 'alice', { topic: 'new' })).toEqual({
        ...conversation,
        metadata: { topic: 'new' },
      });
      expect(await store.deleteConversation('conv_1', 'bob')).toBe(false);
      expect(await store.deleteConversation('conv_1', 'alice')).toBe(true);
      expect(await store.getConversation('conv_1', 'alice')).toBeUndefined();
      expect(await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' })).toBeUndefined();
      expect(await store.getItem('conv_1', 'alice', 'msg_1')).toBeUndefined();
      expect(await store.usage('alice')).toEqual({ objects: 0, bytes: 0 });
    });

    it('appends items in order and pages them either way, after a cursor, saying when more follow', async () => {
      const store = await make();
      await store.createConversation({ id: 'conv_p', owner: 'alice', createdAt: 1, metadata: {} }, [
        item('msg_1'),
        item('msg_2'),
      ]);
      expect(await store.appendItems('conv_p', 'alice', [item('msg_3'), item('msg_4'), item('msg_5')])).toBe(true);
      const ids = (page: { items: readonly JsonObject[] } | undefined) => page?.items.map((one) => one.id);
      const first = await store.listItems('conv_p', 'alice', { limit: 2, order: 'asc' });
      expect(ids(first)).toEqual(['msg_1', 'msg_2']);
      expect(first?.hasMore).toBe(true);
      const rest = await store.listItems('conv_p', 'alice', { after: 'msg_2', limit: 10, order: 'asc' });
      expect(ids(rest)).toEqual(['msg_3', 'msg_4', 'msg_5']);
      expect(rest?.hasMore).toBe(false);
      const newest = await store.listItems('conv_p', 'alice', { limit: 2, order: 'desc' });
      expect(ids(newest)).toEqual(['msg_5', 'msg_4']);
      expect(newest?.hasMore).toBe(true);
      const older = await store.listItems('conv_p', 'alice', { after: 'msg_4', limit: 3, order: 'desc' });
      expect(ids(older)).toEqual(['msg_3', 'msg_2', 'msg_1']);
      expect(older?.hasMore).toBe(false);
      expect(await store.listItems('conv_p', 'alice', { after: 'msg_none', limit: 3, order: 'asc' })).toEqual({
        items: [],
        hasMore: false,
      });
      expect(await store.getItem('conv_p', 'alice', 'msg_4')).toEqual(item('msg_4'));
    });

    it("keeps another owner out of a conversation's items", async () => {
      const store = await make();
      await store.createConversation({ id: 'conv_a', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_1')]);
      expect(await store.appendItems('conv_a', 'bob', [item('msg_b')])).toBe(false);
      expect(await store.listItems('conv_a', 'bob', { limit: 10, order: 'asc' })).toBeUndefined();
      expect(await store.getItem('conv_a', 'bob', 'msg_1')).toBeUndefined();
      expect(await store.deleteItem('conv_a', 'bob', 'msg_1')).toBe(false);
      expect((await store.listItems('conv_a', 'alice', { limit: 10, order: 'asc' }))?.items).toEqual([item('msg_1')]);
      expect(await store.appendItems('conv_none', 'alice', [item('msg_x')])).toBe(false);
    });

    it('deletes one item of a conversation, leaving the others in order', async () => {
      const store = await make();
      await store.createConversation({ id: 'conv_d', owner: 'alice', createdAt: 1, metadata: {} }, [
        item('msg_1'),
        item('msg_2'),
        item('msg_3'),
      ]);
      expect(await store.deleteItem('conv_d', 'alice', 'msg_2')).toBe(true);
      expect(await store.deleteItem('conv_d', 'alice', 'msg_2')).toBe(false);
      expect(await store.getItem('conv_d', 'alice', 'msg_2')).toBeUndefined();
      const page = await store.listItems('conv_d', 'alice', { limit: 10, order: 'asc' });
      expect(page?.items.map((one) => one.id)).toEqual(['msg_1', 'msg_3']);
    });

    it('counts what an owner holds, and refuses a write past its object limit with nothing written', async () => {
      const store = await make({ maxObjectsPerOwner: 3 });
      await store.putResponse(responseOf('resp_1', 'alice'));
      await store.createConversation({ id: 'conv_q', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_1')]);
      expect((await store.usage('alice')).objects).toBe(3);
      const refused = await store.putResponse(responseOf('resp_2', 'alice')).catch((error: unknown) => error);
      expect(AgentStoreQuotaError.is(refused) && refused.limit).toBe('objects');
      expect(await store.getResponse('resp_2', 'alice')).toBeUndefined();
      // All or none: two items past the limit add neither.
      await store.deleteResponse('resp_1', 'alice');
      const both = await store.appendItems('conv_q', 'alice', [item('msg_2'), item('msg_3')]).catch((e: unknown) => e);
      expect(AgentStoreQuotaError.is(both)).toBe(true);
      expect((await store.listItems('conv_q', 'alice', { limit: 10, order: 'asc' }))?.items).toHaveLength(1);
      // Another owner has limits of its own.
      await store.putResponse(responseOf('resp_b', 'bob'));
      expect((await store.usage('bob')).objects).toBe(1);
    });

    it('refuses a write past its byte limit, and counts bytes as the JSON holds them', async () => {
      const one = responseOf('resp_1', 'alice');
      const store = await make({ maxBytesPerOwner: 10_000 });
      await store.putResponse(one);
      const held = (await store.usage('alice')).bytes;
      expect(held).toBeGreaterThan(0);
      const big = { ...responseOf('resp_big', 'alice'), response: { id: 'resp_big', text: 'x'.repeat(20_000) } };
      const refused = await store.putResponse(big).catch((error: unknown) => error);
      expect(AgentStoreQuotaError.is(refused) && refused.limit).toBe('bytes');
      expect(await store.getResponse('resp_big', 'alice')).toBeUndefined();
      expect((await store.usage('alice')).bytes).toBe(held);
    });

    it('forgets an object once its time to live has passed on the clock, and a write starts it again', async () => {
      const store = await make({ ttlMs: DAY });
      await store.putResponse(responseOf('resp_old', 'alice'));
      await store.createConversation({ id: 'conv_t', owner: 'alice', createdAt: 1, metadata: {} }, [item('msg_1')]);
      now += DAY / 2;
      await store.putResponse(responseOf('resp_new', 'alice', undefined, now));
      expect(await store.appendItems('conv_t', 'alice', [item('msg_2')])).toBe(true);
      now += DAY / 2 + 1;
      expect(await store.getResponse('resp_old', 'alice')).toBeUndefined();
      expect(await store.getResponse('resp_new', 'alice')).toBeDefined();
      // Appending kept the conversation and all its items alive.
      expect((await store.listItems('conv_t', 'alice', { limit: 10, order: 'asc' }))?.items).toHaveLength(2);
      expect((await store.usage('alice')).objects).toBe(4);
      now += DAY;
      expect(await store.getConversation('conv_t', 'alice')).toBeUndefined();
      expect(await store.usage('alice')).toEqual({ objects: 0, bytes: 0 });
    });
  });
}
