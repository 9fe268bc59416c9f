import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { eventually, eventuallyAsync } from '../../support/http.js';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

const body = JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: true });
const post = (url: string, signal?: AbortSignal) =>
  request(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    ...(signal === undefined ? {} : { signal }),
  });
const gauge = async (url: string, name: string) => {
  const text = await (await request(`${url}/metrics`)).body.text();
  return Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
};

describe('admission: --max-concurrent-requests, --queue-size, --queue-timeout-ms', () => {
  it('beyond the slots requests wait in the queue and are served in turn; beyond the queue a 429 with Retry-After', async () => {
    const { url, decode, logs } = await setup(
      'vllm',
      { decode: { tokenIntervalMs: 60 } },
      { maxConcurrentRequests: 1, queueSize: 1, queueTimeoutMs: 10_000 },
    );
    const first = post(url);
    await eventually(() => decode.requests.length === 1, 'the first request reached decode');
    const second = post(url);
    await eventuallyAsync(async () => (await gauge(url, 'disagg_queue_depth')) === 1, 'the second request is queued');
    const third = await post(url);
    expect(third.statusCode).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(((await third.body.json()) as { error: { type: string; message: string } }).error).toMatchObject({
      type: 'rate_limit_exceeded',
      message: 'The proxy is at capacity: 1 requests under way and 1 waiting; try again later',
    });
    for (const answer of [await first, await second]) {
      expect(answer.statusCode).toBe(200);
      expect(await answer.body.text()).toContain('data: [DONE]');
    }
    expect(decode.requests).toHaveLength(2);
    expect(await gauge(url, 'disagg_queue_depth')).toBe(0);
    const refused = logs.filter((record) => record.message === 'request rejected').map((record) => record.fields);
    expect(refused).toStrictEqual([
      {
        requestId: expect.any(String),
        route: 'completions',
        tenant: 'default',
        status: 429,
        error: expect.stringContaining('at capacity'),
        code: expect.any(String),
      },
    ]);
  });

  it('a request that waits past --queue-timeout-ms gets a 429 and never reaches a worker', async () => {
    const { url, decode, prefill } = await setup(
      'vllm',
      { decode: { tokenIntervalMs: 100 } },
      { maxConcurrentRequests: 1, queueSize: 4, queueTimeoutMs: 50 },
    );
    const first = post(url);
    await eventually(() => decode.requests.length === 1, 'the first request reached decode');
    const late = await post(url);
    expect(late.statusCode).toBe(429);
    expect(((await late.body.json()) as { error: { message: string } }).error.message).toBe(
      'The request waited 50 ms for one of 1 slots; try again later',
    );
    expect((await first).statusCode).toBe(200);
    await (await first).body.dump();
    expect(prefill.requests).toHaveLength(1);
  });

  it('a client that leaves while queued leaves the queue: its place is free, no worker is called for it', async () => {
    const { url, decode, prefill } = await setup(
      'vllm',
      { decode: { tokenIntervalMs: 60 } },
      { maxConcurrentRequests: 1, queueSize: 1, queueTimeoutMs: 10_000 },
    );
    const first = post(url);
    await eventually(() => decode.requests.length === 1, 'the first request reached decode');
    const leaves = new AbortController();
    const gone = post(url, leaves.signal).catch((e: unknown) => e);
    await eventuallyAsync(async () => (await gauge(url, 'disagg_queue_depth')) === 1, 'the second request is queued');
    leaves.abort();
    await gone;
    await eventuallyAsync(async () => (await gauge(url, 'disagg_queue_depth')) === 0, 'it left the queue');
    const next = post(url); // takes the freed place instead of a 429
    expect((await first).statusCode).toBe(200);
    await (await first).body.dump();
    const answer = await next;
    expect(answer.statusCode).toBe(200);
    await answer.body.dump();
    expect(prefill.requests).toHaveLength(2);
  });
});
