// Stored responses and conversations belong to whoever created them: tried as bob against
// alice's, through the openai client. Every read, continuation, listing, cancel and delete of
// another's object reads as one that never existed, and costs no worker a call.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../../src/testing/index.js';
import { proxyHarness } from '../../support/proxy.js';

const { cluster } = proxyHarness();

const TENANTS = `
tenants:
  - name: alice
    keys: [sk-alice-0000001]
  - name: bob
    keys: [sk-bob-00000001]
`;

const BODY = { model: 'm', input: 'Hello?', max_output_tokens: 8 };

async function fleet(options: Record<string, unknown> = {}) {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-owners-')), 'tenants.yaml');
  writeFileSync(file, TENANTS);
  const made = await cluster('vllm', { prefill: [{}], decode: [{}] }, { tenantsFile: file, ...options });
  const as = (key: string) => new OpenAI({ baseURL: `${made.url}/v1`, apiKey: key, maxRetries: 0 });
  return { ...made, alice: as('sk-alice-0000001'), bob: as('sk-bob-00000001'), other: as('sk-someone-else') };
}

const calls = (workers: readonly FakeWorker[]) => workers.reduce((sum, worker) => sum + worker.requests.length, 0);
const failure = async (promise: Promise<unknown>) =>
  (await promise.then(
    () => undefined,
    (error: unknown) => error,
  )) as { status?: number; code?: string; param?: string; message?: string } | undefined;

describe("another owner's stored response", () => {
  it("bob cannot read, list, continue, cancel or delete alice's response: 404s (a continuation OpenAI's 400 previous_response_not_found), in the words of one never stored, with no worker call", async () => {
    const { prefill, decode, alice, bob } = await fleet();
    const { id } = await alice.responses.create(BODY);
    const before = calls([...prefill, ...decode]);
    for (const [own, never] of [
      [() => bob.responses.retrieve(id), () => bob.responses.retrieve('resp_never')],
      [() => bob.responses.inputItems.list(id), () => bob.responses.inputItems.list('resp_never')],
      [() => bob.responses.cancel(id), () => bob.responses.cancel('resp_never')],
      [() => bob.responses.delete(id), () => bob.responses.delete('resp_never')],
    ] as const) {
      const [a, b] = [await failure(own()), await failure(never())];
      expect(a?.status).toBe(404);
      expect(a?.message?.replace(id, '<id>')).toBe(b?.message?.replace('resp_never', '<id>'));
    }
    const continued = await failure(bob.responses.create({ ...BODY, previous_response_id: id }));
    expect(continued).toMatchObject({
      status: 400,
      code: 'previous_response_not_found',
      param: 'previous_response_id',
    });
    const unknown = await failure(bob.responses.create({ ...BODY, previous_response_id: 'resp_never' }));
    expect(unknown?.message?.replace('resp_never', '<id>')).toBe(continued?.message?.replace(id, '<id>'));
    expect(calls([...prefill, ...decode])).toBe(before);
    // Still alice's, whole.
    expect((await alice.responses.retrieve(id)).status).toBe('completed');
    expect((await alice.responses.inputItems.list(id)).data).toHaveLength(1);
  });

  it("a client of no tenant is the owner of its own key's responses only", async () => {
    const { alice, other, url } = await fleet();
    const { id } = await alice.responses.create(BODY);
    expect((await failure(other.responses.retrieve(id)))?.status).toBe(404);
    const mine = await other.responses.create(BODY);
    expect((await other.responses.retrieve(mine.id)).id).toBe(mine.id);
    const elsewhere = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-another-key', maxRetries: 0 });
    expect((await failure(elsewhere.responses.retrieve(mine.id)))?.status).toBe(404);
  });

  it('DELETE really deletes: the response is gone for its owner, and cannot be continued', async () => {
    const { alice } = await fleet();
    const { id } = await alice.responses.create(BODY);
    await alice.responses.delete(id);
    expect((await failure(alice.responses.retrieve(id)))?.status).toBe(404);
    expect((await failure(alice.responses.create({ ...BODY, previous_response_id: id })))?.code).toBe(
      'previous_response_not_found',
    );
  });

  it('store: false keeps nothing: the answer cannot be read again or continued', async () => {
    const { alice } = await fleet();
    const { id } = await alice.responses.create({ ...BODY, store: false });
    expect((await failure(alice.responses.retrieve(id)))?.status).toBe(404);
    expect((await failure(alice.responses.create({ ...BODY, previous_response_id: id })))?.status).toBe(400);
  });
});

describe("another owner's conversation", () => {
  it("bob cannot read, update, list, add to, continue in, read an item of, or delete alice's conversation: 404s with no worker call", async () => {
    const { prefill, decode, alice, bob } = await fleet();
    const conversation = await alice.conversations.create({
      items: [{ type: 'message', role: 'user', content: 'first' }],
    });
    const items = await alice.conversations.items.list(conversation.id);
    const itemId = items.data[0]?.id as string;
    const before = calls([...prefill, ...decode]);
    const attempts = [
      () => bob.conversations.retrieve(conversation.id),
      () => bob.conversations.update(conversation.id, { metadata: { taken: 'yes' } }),
      () => bob.conversations.items.list(conversation.id),
      () =>
        bob.conversations.items.create(conversation.id, { items: [{ type: 'message', role: 'user', content: 'x' }] }),
      () => bob.conversations.items.retrieve(itemId, { conversation_id: conversation.id }),
      () => bob.conversations.items.delete(itemId, { conversation_id: conversation.id }),
      () => bob.responses.create({ ...BODY, conversation: conversation.id }),
      () => bob.conversations.delete(conversation.id),
    ];
    for (const attempt of attempts) expect((await failure(attempt()))?.status).toBe(404);
    expect(calls([...prefill, ...decode])).toBe(before);
    expect((await alice.conversations.retrieve(conversation.id)).metadata).toEqual({});
    expect((await alice.conversations.items.list(conversation.id)).data).toHaveLength(1);
  });
});

describe('limits of what an owner stores', () => {
  it("a tenant at its object limit gets OpenAI's 429 insufficient_quota before any worker; another tenant is not held by it; deleting frees room", async () => {
    const { prefill, decode, alice, bob } = await fleet({ responses: { maxObjects: 2 } });
    const first = await alice.responses.create(BODY);
    await alice.responses.create(BODY);
    const before = calls([...prefill, ...decode]);
    const refused = await failure(alice.responses.create(BODY));
    expect(refused?.status).toBe(429);
    expect(refused?.code).toBe('insufficient_quota');
    expect(refused?.message).toContain('the most allowed is 2');
    expect(calls([...prefill, ...decode])).toBe(before);
    expect((await bob.responses.create(BODY)).status).toBe('completed');
    // Stateless turns are not stored, so not held by the limit.
    expect((await alice.responses.create({ ...BODY, store: false })).status).toBe('completed');
    await alice.responses.delete(first.id);
    expect((await alice.responses.create(BODY)).status).toBe('completed');
  });
});
