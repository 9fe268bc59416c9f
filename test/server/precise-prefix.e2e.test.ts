// precise-prefix against fake workers whose KV caches publish real KV events (disagg/testing's
// kvCache): a conversation's next turn goes where its blocks are, the engine's cached_tokens
// confirm it, and a restarted worker's view starts again.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker } from '../../src/testing/fake-worker.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

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
    const endpoints = (worker: FakeWorker) => ({
      kvEvents: worker.kvCache?.publisher.endpoint as string,
      kvEventsReplay: worker.kvCache?.publisher.replayEndpoint as string,
    });
    const proxy = createProxy({
      connector: 'vllm',
      prefill: prefills.map((worker, i) => ({ url: worker.url, name: `p${i}`, ...endpoints(worker) })),
      decode: [{ url: decode.url }],
      prefillPolicy: 'precise-prefix',
      // Without speculation: what routes is what the engines said.
      routing: { speculativeTtlMs: 0 },
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
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
});
