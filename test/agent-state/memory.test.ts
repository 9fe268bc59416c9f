// What the in-memory AgentStore really holds on the heap, measured after a full GC: a million
// objects written through a store bounded at 64 MiB, the oldest evicted on the way. The
// store counts each object's JSON bytes; the heap holds those (one byte a character: the
// text here is ASCII) and each object's bookkeeping besides: its entry, its map slot, its id.
// Measured on Node 20, x64: a 336-byte response took 606 bytes of heap (1.77 times the bytes
// counted, 113 MiB for 64 MiB); a 114-byte conversation item took 246 (2.17 times, 139 MiB).
// The bounds leave a quarter more than that, for another Node or another allocator.
import { describe, expect, it } from 'vitest';
import type { JsonObject, StoredResponse } from '../../src/agent-state/agent-store.js';
import { MemoryAgentStore } from '../../src/agent-state/memory-store.js';
import { collectGarbage } from '../support/heap.js';

const MiB = 1024 * 1024;
const OBJECTS = 1_000_000;
const MAX_BYTES = 64 * MiB;
const ITEMS_EACH = 100;
const CONVERSATIONS = OBJECTS / ITEMS_EACH;

const hex = (i: number) => i.toString(16).padStart(24, '0');

function response(i: number): StoredResponse {
  const id = `resp_${hex(i)}`;
  return {
    id,
    owner: `tenant_${i % 100}`,
    storedAt: i,
    input: [{ id: `msg_${hex(i)}`, type: 'message', role: 'user', content: 'hi' }],
    response: {
      id,
      object: 'response',
      status: 'completed',
      output_text: 'ok',
      usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 },
    },
  };
}

const item = (i: number): JsonObject => ({
  id: `msg_${hex(i)}`,
  type: 'message',
  role: 'user',
  content: [{ type: 'input_text', text: 'hi' }],
});

function heldNow(): number {
  collectGarbage();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

describe('the in-memory AgentStore holds what its bounds say', () => {
  it(`${OBJECTS.toLocaleString('en')} responses stored under maxBytes 64 MiB: it counts at most 64 MiB, and the heap grows by less than 2.25 times that (measured 1.77)`, async () => {
    const store = new MemoryAgentStore({ maxBytes: MAX_BYTES });
    const before = heldNow();
    for (let i = 0; i < OBJECTS; i++) await store.putResponse(response(i));
    const grown = heldNow() - before;
    const stats = store.stats();
    expect(stats.bytes).toBeLessThanOrEqual(MAX_BYTES);
    expect(stats.objects + stats.evictions).toBe(OBJECTS);
    expect(grown).toBeLessThan(2.25 * MAX_BYTES);
    // The newest are held, the oldest evicted.
    expect(await store.getResponse(response(OBJECTS - 1).id, response(OBJECTS - 1).owner)).toBeDefined();
    expect(await store.getResponse(response(0).id, response(0).owner)).toBeUndefined();
    await store.close();
  }, 60_000);

  it(`${OBJECTS.toLocaleString('en')} conversation items (${CONVERSATIONS.toLocaleString('en')} conversations of ${ITEMS_EACH}) under maxBytes 64 MiB: it counts at most 64 MiB, and the heap grows by less than 2.75 times that (measured 2.17)`, async () => {
    const store = new MemoryAgentStore({ maxBytes: MAX_BYTES });
    const before = heldNow();
    for (let c = 0; c < CONVERSATIONS; c++) {
      const owner = `tenant_${c % 100}`;
      const id = `conv_${hex(c)}`;
      await store.createConversation({ id, owner, createdAt: c, metadata: {} }, []);
      for (let first = 0; first < ITEMS_EACH; first += 10) {
        await store.appendItems(
          id,
          owner,
          Array.from({ length: 10 }, (_, k) => item(c * ITEMS_EACH + first + k)),
        );
      }
    }
    const grown = heldNow() - before;
    const stats = store.stats();
    expect(stats.bytes).toBeLessThanOrEqual(MAX_BYTES);
    expect(grown).toBeLessThan(2.75 * MAX_BYTES);
    const newest = CONVERSATIONS - 1;
    const page = await store.listItems(`conv_${hex(newest)}`, `tenant_${newest % 100}`, { limit: 1_000, order: 'asc' });
    expect(page?.items).toHaveLength(ITEMS_EACH);
    expect(await store.getConversation(`conv_${hex(0)}`, 'tenant_0')).toBeUndefined();
    await store.close();
  }, 60_000);
});
