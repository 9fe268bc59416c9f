// The Responses ids the router hands out and stores, tried as a hostile client would (the
// security pass of round 5): a client's id is short or refused before any worker (and refused
// on a stored turn: the router names what it stores), the router's own are random, another
// tenant's id is a 404 without a worker call, and no request may take an id the router
// already knows.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../src/testing/index.js';
import { proxyHarness } from '../support/proxy.js';

const { cluster } = proxyHarness();

const TENANTS = `
tenants:
  - name: alice
    keys: [sk-alice-0000001]
  - name: bob
    keys: [sk-bob-00000001]
`;

const BODY = { model: 'm', input: [{ role: 'user' as const, content: 'Hello?' }], max_output_tokens: 8 };
/** A turn the router does not store: a client may name its id then. */
const UNSTORED = { ...BODY, store: false };

/** Two decode workers behind a proxy that knows alice and bob by their keys. */
async function fleet() {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-ids-')), 'tenants.yaml');
  writeFileSync(file, TENANTS);
  const made = await cluster(
    'vllm',
    { prefill: [{}], decode: [{}, {}] },
    { tenantsFile: file, apiKey: 'sk-admin-key-01' },
  );
  const as = (key: string) => new OpenAI({ baseURL: `${made.url}/v1`, apiKey: key, maxRetries: 0 });
  return { ...made, alice: as('sk-alice-0000001'), bob: as('sk-bob-00000001') };
}

const calls = (workers: readonly FakeWorker[]) => workers.reduce((sum, worker) => sum + worker.requests.length, 0);
const clear = (workers: readonly FakeWorker[]) => {
  for (const worker of workers) worker.requests.splice(0);
};
const statusOf = async (promise: Promise<unknown>) =>
  (
    (await promise.then(
      () => undefined,
      (error: unknown) => error,
    )) as { status?: number } | undefined
  )?.status;

describe("a client's own response id (request_id)", () => {
  it('longer than 64 characters, or of other characters, is a 400 naming request_id before any worker', async () => {
    const { prefill, decode, alice } = await fleet();
    for (const id of ['x'.repeat(65), 'y'.repeat(1_000_000), 'has space', 'line\r\nbreak', '../../admin']) {
      const error = await alice.responses.create({ ...BODY, request_id: id } as never).catch((e: unknown) => e);
      expect((error as { status?: number }).status, id.slice(0, 20)).toBe(400);
      expect((error as { param?: string }).param).toBe('request_id');
    }
    expect(calls([...prefill, ...decode])).toBe(0);
  });

  it("a short one is the answer's id, sent to both legs, on a turn not stored", async () => {
    const { prefill, decode, alice } = await fleet();
    const answer = await alice.responses.create({ ...UNSTORED, request_id: 'resp_mine-1' } as never);
    expect(answer.id).toBe('resp_mine-1');
    expect(prefill[0]?.requests[0]?.body.request_id).toBe('resp_mine-1');
    expect(decode.flatMap((worker) => worker.requests).map((record) => record.body.request_id)).toEqual([
      'resp_mine-1',
    ]);
  });

  it('on a stored turn it is a 400 naming request_id before any worker: the router names what it stores', async () => {
    const { prefill, decode, alice } = await fleet();
    const error = await alice.responses
      .create({ ...BODY, request_id: 'resp_mine-2' } as never)
      .catch((e: unknown) => e);
    expect((error as { status?: number; param?: string }).status).toBe(400);
    expect((error as { param?: string }).param).toBe('request_id');
    expect(calls([...prefill, ...decode])).toBe(0);
  });
});

describe("the router's own response ids", () => {
  it('a request without request_id gets one of the router: resp_ and 128 random bits, the same on both legs and in the answer', async () => {
    const { prefill, decode, alice } = await fleet();
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const answer = await alice.responses.create(BODY);
      expect(answer.id).toMatch(/^resp_[0-9a-f]{32}$/);
      ids.add(answer.id);
    }
    expect(ids.size).toBe(5);
    expect(new Set(prefill[0]?.requests.map((record) => record.body.request_id))).toEqual(ids);
    expect(new Set(decode.flatMap((worker) => worker.requests).map((record) => record.body.request_id))).toEqual(ids);
  });

  it('a streamed answer carries it from response.created on', async () => {
    const { alice } = await fleet();
    const seen = new Set<string>();
    for await (const event of await alice.responses.create({ ...BODY, stream: true })) {
      if ('response' in event) seen.add(event.response.id);
    }
    expect(seen.size).toBe(1);
    expect([...seen][0]).toMatch(/^resp_[0-9a-f]{32}$/);
  });
});

describe("another tenant's response", () => {
  it("bob's GET, input items, cancel and DELETE of alice's id are a 404 with no worker call, in the words of an id never served; alice's GET is the router's own", async () => {
    const { prefill, decode, alice, bob } = await fleet();
    const { id } = await alice.responses.create(BODY);
    clear([...prefill, ...decode]);
    const bobs = await bob.responses.retrieve(id).catch((e: unknown) => e as Error);
    const never = await bob.responses.retrieve('resp_never').catch((e: unknown) => e as Error);
    expect((bobs as { status?: number }).status).toBe(404);
    expect((bobs as Error).message.replace(id, '<id>')).toBe((never as Error).message.replace('resp_never', '<id>'));
    expect(await statusOf(bob.responses.cancel(id))).toBe(404);
    expect(await statusOf(bob.responses.inputItems.list(id))).toBe(404);
    expect(await statusOf(bob.responses.delete(id))).toBe(404);
    // Alice's own, from the router's store: no worker holds it.
    expect((await alice.responses.retrieve(id)).status).toBe('completed');
    expect(calls([...prefill, ...decode])).toBe(0);
  });

  it("a caller without a tenant's key (the API key) is no owner of alice's answer either", async () => {
    const { decode, url, alice } = await fleet();
    const { id } = await alice.responses.create(BODY);
    clear(decode);
    const answer = await request(`${url}/v1/responses/${id}`, { headers: { authorization: 'Bearer sk-admin-key-01' } });
    expect(answer.statusCode).toBe(404);
    await answer.body.dump();
    expect(calls(decode)).toBe(0);
  });

  it("bob may not take alice's id as his request_id: a 400 before any worker, and alice's answer stays hers", async () => {
    const { prefill, decode, alice, bob } = await fleet();
    const { id } = await alice.responses.create(BODY);
    clear([...prefill, ...decode]);
    for (let i = 0; i < 4; i++) {
      const error = await bob.responses.create({ ...UNSTORED, request_id: id } as never).catch((e: unknown) => e);
      expect((error as { status?: number }).status).toBe(400);
      expect((error as { param?: string }).param).toBe('request_id');
    }
    // Alice may not reuse it either: an id names one answer.
    expect(await statusOf(alice.responses.create({ ...UNSTORED, request_id: id } as never))).toBe(400);
    expect(calls([...prefill, ...decode])).toBe(0);
    expect((await alice.responses.retrieve(id)).id).toBe(id);
  });

  it('an id under way is taken: a second request naming it meanwhile is refused', async () => {
    const { alice, bob, decode } = await fleet();
    for (const worker of decode) worker.setFault({ type: 'slow', tokenIntervalMs: 100 });
    const first = alice.responses.create({ ...UNSTORED, request_id: 'resp_shared-1' } as never);
    // Until the first is answered, its id is claimed.
    const second = await bob.responses
      .create({ ...UNSTORED, request_id: 'resp_shared-1' } as never)
      .catch((e: unknown) => e);
    expect((second as { status?: number }).status).toBe(400);
    expect((await first).id).toBe('resp_shared-1');
  });

  it('a request that failed leaves its id free to send again', async () => {
    const { alice, prefill } = await fleet();
    prefill[0]?.setFault({ type: 'status', status: 400, message: 'bad prompt' });
    expect(await statusOf(alice.responses.create({ ...UNSTORED, request_id: 'resp_retry-1' } as never))).toBe(400);
    prefill[0]?.setFault(undefined);
    expect((await alice.responses.create({ ...UNSTORED, request_id: 'resp_retry-1' } as never)).id).toBe(
      'resp_retry-1',
    );
  });
});
