// LoRA affinity through `disagg serve`: the proxy reads each vLLM engine's adapters from its
// /metrics (vllm:lora_requests_info) and the scored policy's lora-affinity scorer sends an
// adapter's requests (the adapter named in `model`) to the worker that has it loaded.
import { describe, expect, it } from 'vitest';
import { eventuallyAsync } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { cluster } = proxyHarness();

describe('LoRA adapters: requests go to the worker that has theirs loaded', () => {
  it('an adapter running on one worker: all its requests there; one running on a full worker: there too', async () => {
    const { url, client, decode } = await cluster(
      'vllm',
      {
        prefill: [{}],
        decode: [
          // Listed first and idle: a pick by order or load alone would choose it.
          { lora: { max: 2, running: [] } },
          { lora: { max: 2, running: ['sql-lora'] } },
          { lora: { max: 1, running: ['math-lora'] } },
        ],
      },
      {
        decodePolicy: 'scored',
        routing: { scorers: [{ name: 'lora-affinity', weight: 2 }, { name: 'load' }], engineLoadIntervalMs: 50 },
      },
    );
    // The proxy has read every engine's adapters.
    await eventuallyAsync(async () => {
      const { response } = await client.completions
        .create({ model: 'sql-lora', prompt: 'SELECT', max_tokens: 1 })
        .withResponse();
      return response.headers.get('x-disagg-decode-worker') === 'decode-1';
    }, "the engines' adapters read");
    const servedBy = async (model: string) => {
      const { response } = await client.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 })
        .withResponse();
      return response.headers.get('x-disagg-decode-worker');
    };
    for (let i = 0; i < 5; i++) expect(await servedBy('sql-lora')).toBe('decode-1');
    // Its worker is full, but it runs this adapter: still the best place.
    for (let i = 0; i < 3; i++) expect(await servedBy('math-lora')).toBe('decode-2');
    // The decode workers were asked for the adapter by name: the body's model, unchanged.
    expect(decode[1]?.requests.every((record) => record.body.model === 'sql-lora')).toBe(true);
    expect(url).toMatch(/^http:/);
  });
});
