import OpenAI from 'openai';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxy: ProxyServer | undefined;
afterEach(async () => {
  await proxy?.close({ gracePeriodMs: 0, drainDelayMs: 0 });
  proxy = undefined;
});

const CONCURRENT = 500;

describe('the proxy under load', () => {
  for (const protocol of ['vllm', 'sglang'] as const) {
    it(`${protocol}: ${CONCURRENT} concurrent streaming requests, zero errors, no KV left on any worker`, async () => {
      const prefill = [
        await fakes.start({ role: 'prefill', protocol }),
        await fakes.start({ role: 'prefill', protocol }),
      ];
      const decode = [
        await fakes.start({ role: 'decode', protocol, tokens: 16, tokenIntervalMs: 2 }),
        await fakes.start({ role: 'decode', protocol, tokens: 16, tokenIntervalMs: 2 }),
      ];
      proxy = createProxy({
        connector: protocol,
        prefill: prefill.map((worker) => ({ url: worker.url, bootstrapPort: worker.bootstrapPort })),
        decode: decode.map((worker) => ({ url: worker.url })),
        logger: recordingLogger().logger,
        dispatcher: new Agent({ connections: 256 }),
        // Every request disaggregated and spread by load: the ledgers below count each handoff.
        selection: 'least-in-flight',
        routing: { deciders: [] },
      });
      const url = await proxy.listen(0);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60_000 });
      const results = await Promise.allSettled(
        Array.from({ length: CONCURRENT }, async (_, i) => {
          const stream = await client.chat.completions.create({
            model: 'fake-model',
            messages: [{ role: 'user', content: `request ${i}` }],
            stream: true,
          });
          let text = '';
          for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
          return text;
        }),
      );
      const failures = results.filter((result) => result.status === 'rejected');
      expect(failures.map((failure) => String((failure as PromiseRejectedResult).reason)).slice(0, 3)).toEqual([]);
      const expected = Array.from({ length: 16 }, (_, i) => `tok${i} `).join('');
      expect(results.every((result) => result.status === 'fulfilled' && result.value === expected)).toBe(true);
      const claimed = prefill.reduce((sum, worker) => sum + worker.ledger.claimed().length, 0);
      expect(claimed).toBe(CONCURRENT);
      // Both workers of each role took a share (least-in-flight).
      expect(decode.every((worker) => worker.requests.length > 0)).toBe(true);
      expect(proxy.decodeWorkers.workers.map((worker) => proxy?.decodeWorkers.inFlight(worker))).toEqual([0, 0]);
    }, 120_000);
  }
});
