// disagg serve, unchanged, in front of a fleet of simulated engines (fake workers with
// `simulated`): precise-prefix on both pools follows the KV events the engines' caches publish,
// so a repeated prefix goes back to the prefill and the decode worker that hold it.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { DEFAULT_PROFILE, readProfile } from '../../src/simulation/profiles.js';
import type { FakeWorker } from '../../src/testing/fake-worker.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

// Past the fakes' own answer ids (2,000-2,999), which they would read as a continuation.
const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

/** A worker's entry in the proxy's pools, with its KV event endpoints. */
const entry = (worker: FakeWorker, name: string) => ({
  url: worker.url,
  name,
  kvEvents: worker.kvCache?.publisher.endpoint as string,
  kvEventsReplay: worker.kvCache?.publisher.replayEndpoint as string,
});

describe('disagg serve in front of simulated engines', () => {
  it('precise-prefix on both pools: a repeated prefix goes to the prefill and the decode worker whose engines hold it', async () => {
    const simulated = { profile: await readProfile(DEFAULT_PROFILE), speedup: 1000 };
    const start = (role: 'prefill' | 'decode') =>
      fakes.start({ role, protocol: 'vllm', simulated, kvCache: {}, tokens: 2 });
    const prefills = await Promise.all([start('prefill'), start('prefill')]);
    const decodes = await Promise.all([start('decode'), start('decode')]);
    const proxy = createProxy({
      connector: 'vllm',
      prefill: prefills.map((worker, i) => entry(worker, `p${i}`)),
      decode: decodes.map((worker, i) => entry(worker, `d${i}`)),
      prefillPolicy: 'precise-prefix',
      decodePolicy: 'precise-prefix',
      // Without speculation: what routes is what the engines published.
      routing: { speculativeTtlMs: 0 },
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const send = async (prompt: number[]) => {
      const { data, response } = await client.completions
        .create({ model: 'fake-model', prompt, max_tokens: 2 })
        .withResponse();
      return {
        prefill: response.headers.get('x-disagg-prefill-worker') as string,
        decode: response.headers.get('x-disagg-decode-worker') as string,
        cached: data.usage?.prompt_tokens_details?.cached_tokens,
        text: data.choices[0]?.text,
      };
    };
    /** Until the proxy's index holds `blocks` blocks of each of `workers`. */
    const indexed = (workers: string[], blocks: number) =>
      eventuallyAsync(
        async () => {
          const text = await (await fetch(`${url}/metrics`)).text();
          return workers.every((worker) => text.includes(`disagg_kv_blocks{worker="${worker}"} ${blocks}`));
        },
        `${blocks} blocks of ${workers.join(', ')} in the index`,
      );

    // Two conversations of four 512-token blocks each.
    const a = ids(2048, 3000);
    const b = ids(2048, 20_000);
    // Nothing held anywhere: ties go in turn.
    const first = await send(a);
    expect(first).toEqual({ prefill: 'p0', decode: 'd0', cached: 0, text: 'tok0 tok1 ' });
    await indexed(['p0', 'd0'], 4);
    const second = await send(b);
    expect(second).toMatchObject({ prefill: 'p1', decode: 'd1', cached: 0 });
    await indexed(['p1', 'd1'], 4);
    // Each conversation's next turn follows its blocks on both pools, against the turn ties
    // would take (B's to p0 and d0, then A's to p1 and d1); its prefill reused them.
    const nextB = await send([...b, ...ids(300, 50_000)]);
    expect(nextB).toMatchObject({ prefill: 'p1', decode: 'd1', cached: 2048 });
    const nextA = await send([...a, ...ids(300, 40_000)]);
    expect(nextA).toMatchObject({ prefill: 'p0', decode: 'd0', cached: 2048 });
    // Every prefill's KV was taken by its decode, and let go on the engine.
    for (const worker of prefills) {
      expect(worker.ledger.outstanding()).toEqual([]);
      await eventuallyAsync(async () => worker.simulation?.engine.jobs === 0, 'prefill KV released');
    }
  });
});
