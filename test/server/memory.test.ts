// What a hostile client can make the proxy hold, measured on its heap (the security pass of
// round 5: 300 Responses requests with 500 KB ids added 261 MB to the proxy).
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { collectGarbage } from '../support/heap.js';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

describe('what clients send is not what the proxy keeps', () => {
  it("300 Responses requests with 500 KB ids of their own leave the proxy's heap within 20 MB of its start, and reach no worker", async () => {
    const { url, prefill, decode } = await setup('vllm');
    // Warm: the route, the schemas and the client's pool are loaded before the measure.
    await (
      await request(`${url}/v1/responses`, { method: 'POST', body: JSON.stringify({ model: 'm', input: 'hi' }) })
    ).body.dump();
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    const id = 'r'.repeat(500_000);
    for (let i = 0; i < 300; i++) {
      const answer = await request(`${url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', input: 'hi', request_id: `${i}${id}` }),
      });
      expect(answer.statusCode).toBe(400);
      await answer.body.dump();
    }
    collectGarbage();
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(20 * 1024 * 1024);
    expect(prefill.requests.length + decode.requests.length).toBe(2);
  });

  it('200 distinct model names of a megabyte each are refused before any worker, and the proxy keeps none of them', async () => {
    const { url, prefill, decode } = await setup('sglang');
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 200; i++) {
      const answer = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: `${i}${'m'.repeat(1_000_000)}`, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(answer.statusCode).toBe(400);
      await answer.body.dump();
    }
    collectGarbage();
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(20 * 1024 * 1024);
    expect(prefill.requests.length + decode.requests.length).toBe(0);
  });
});
