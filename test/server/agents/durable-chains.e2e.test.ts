// A chain kept in PostgreSQL (a real server of the test's own) outlives the router: a proxy
// restarted between turns continues it. While the store is down, the turns that need it fail
// with a clear 503 and nothing else does; once it is back the chain goes on, whole.
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../../src/server/proxy.js';
import type { FakeWorker } from '../../../src/testing/index.js';
import { recordingLogger } from '../../support/async.js';
import { fakeWorkers } from '../../support/http.js';
import { postgresTool, startPostgres, type TestPostgres } from '../../support/postgres.js';

const postgres = postgresTool();
const fakes = fakeWorkers();
let server: TestPostgres | undefined;
const proxies: ProxyServer[] = [];
beforeAll(async () => {
  if (!postgres.skip) server = await startPostgres();
});
afterAll(async () => {
  await server?.close();
});
afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
});

async function fleet() {
  return {
    prefill: await fakes.start({ role: 'prefill', protocol: 'vllm' }),
    decode: await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 4 }),
  };
}

async function router(workers: { prefill: FakeWorker; decode: FakeWorker }, store: string) {
  const proxy = createProxy({
    connector: 'vllm',
    prefill: [{ url: workers.prefill.url }],
    decode: [{ url: workers.decode.url }],
    responses: { store },
    logger: recordingLogger().logger,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  return { proxy, client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-agent', maxRetries: 0 }) };
}

const turn = (text: string, previous?: string) => ({
  model: 'm',
  input: text,
  max_output_tokens: 8,
  ...(previous === undefined ? {} : { previous_response_id: previous }),
});

describe.skipIf(postgres.skip)(`chains kept in PostgreSQL (${postgres.why})`, () => {
  it('a proxy restarted between turns continues the chain: the next turn is sent with the whole chain before it', async () => {
    const store = await (server as TestPostgres).database();
    const workers = await fleet();
    const first = await router(workers, store);
    const one = await first.client.responses.create(turn('first question'));
    const two = await first.client.responses.create(turn('second question', one.id));
    await first.proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    proxies.splice(proxies.indexOf(first.proxy), 1);
    const second = await router(workers, store);
    const three = await second.client.responses.create(turn('third question', two.id));
    expect(three.status).toBe('completed');
    expect(three).toHaveProperty('previous_response_id', two.id);
    const sent = workers.decode.requests.at(-1)?.body.input as Array<Record<string, unknown>>;
    // A text input is kept as OpenAI lists it: one user message of one input_text part.
    const textOf = (content: unknown) =>
      typeof content === 'string' ? content : (content as Array<{ text: string }>).map((part) => part.text).join('');
    const texts = sent.map((item) => (item.role === 'user' ? textOf(item.content) : `${item.role} ${item.type}`));
    expect(texts).toEqual([
      'first question',
      'assistant message',
      'second question',
      'assistant message',
      'third question',
    ]);
    expect((await second.client.responses.retrieve(one.id)).id).toBe(one.id);
  });

  it('while PostgreSQL is down a turn that needs it is a 503 before any worker, a stateless one is served; once it is back the chain goes on whole', async () => {
    const store = await (server as TestPostgres).database();
    const workers = await fleet();
    const { client } = await router(workers, store);
    const one = await client.responses.create(turn('first question'));
    const calls = () => workers.prefill.requests.length + workers.decode.requests.length;
    await (server as TestPostgres).stop();
    try {
      const before = calls();
      for (const body of [turn('again', one.id), turn('a new chain')]) {
        const error = await client.responses
          .create(body)
          .catch((e: unknown) => e as { status?: number; message?: string });
        expect(error).toMatchObject({ status: 503 });
        expect((error as { message: string }).message).toContain('PostgreSQL');
        expect((error as { message: string }).message).not.toContain('sekret');
      }
      expect((await client.responses.retrieve(one.id).catch((e: unknown) => e as { status?: number })).status).toBe(
        503,
      );
      expect(calls()).toBe(before);
      expect((await client.responses.create({ ...turn('stateless'), store: false })).status).toBe('completed');
    } finally {
      await (server as TestPostgres).start();
    }
    const two = await client.responses.create(turn('second question', one.id));
    expect(two.status).toBe('completed');
    expect(workers.decode.requests.at(-1)?.body.input).toHaveLength(3);
  });
});
