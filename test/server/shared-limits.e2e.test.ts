// Tenants' limits that hold across replicas: two proxies counting in one real redis-server,
// and what each does while that Redis is down (--redis-failure).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function proxyWith(redisUrl: string, options: Partial<ProxyOptions> = {}) {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
  writeFileSync(file, 'tenants:\n  - { name: batch, keys: [sk-batch-0000001], requestsPerMinute: 10 }\n');
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 1 });
  const logger = recordingLogger();
  const proxy: ProxyServer = createProxy({
    connector: 'vllm',
    prefill: [{ url: prefill.url }],
    decode: [{ url: decode.url }],
    logger: logger.logger,
    tenantsFile: file,
    redisUrl,
    ...options,
  });
  cleanups.push(() => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }));
  const url = await proxy.listen(0);
  return { url, logs: logger.records };
}

const ask = async (url: string) => {
  const answer = await request(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-batch-0000001' },
    body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 1 }),
  });
  await answer.body.text();
  return answer.statusCode;
};

const metric = async (url: string, name: string) =>
  Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(await (await request(`${url}/metrics`)).body.text())?.[1] ?? 0);

describe.skipIf(redisServer.skip)(`limits shared through Redis (${redisServer.why})`, () => {
  it('two proxies sharing one Redis enforce one per-minute limit: 10 a minute in all, not 10 each', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const one = await proxyWith(redis.url);
    const two = await proxyWith(redis.url);
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push(await ask(i % 2 === 0 ? one.url : two.url));
    // Requests are counted exactly (one atomic script each): the tolerance is none.
    expect(statuses.filter((status) => status === 200)).toHaveLength(10);
    expect(statuses.filter((status) => status === 429)).toHaveLength(20);
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(200));
  });

  it('--redis-failure open: while Redis is down requests go in without the limit, logged once and counted; back up, the limit holds again', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { url, logs } = await proxyWith(redis.url);
    for (let i = 0; i < 10; i++) expect(await ask(url)).toBe(200);
    expect(await ask(url)).toBe(429);
    await redis.stop();
    const whileDown = [];
    for (let i = 0; i < 5; i++) whileDown.push(await ask(url));
    expect(whileDown).toEqual([200, 200, 200, 200, 200]);
    expect(await metric(url, 'disagg_redis_failures_total')).toBe(5);
    expect(logs.filter((log) => log.message?.startsWith('Redis is unreachable') === true)).toHaveLength(1);
    // A new Redis without the old counts: once the proxy has reconnected (until then it still
    // lets requests in), the limit counts again from nothing, and holds.
    await redis.start();
    const recovered = () => logs.some((log) => log.message === "Redis answers again: the tenants' limits are enforced");
    for (let i = 0; i < 200 && !recovered(); i++) expect(await ask(url)).toBe(200);
    expect(recovered()).toBe(true);
    // The request that found Redis back was counted: nine more, then the limit.
    const after: number[] = [];
    for (let i = 0; i < 10; i++) after.push(await ask(url));
    expect(after).toEqual([...Array(9).fill(200), 429]);
  });

  it('--redis-failure closed: while Redis is down a limited tenant is refused with a 503 that says why', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const { url } = await proxyWith(redis.url, { redisFailure: 'closed' });
    expect(await ask(url)).toBe(200);
    await redis.stop();
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-batch-0000001' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 1 }),
    });
    expect(answer.statusCode).toBe(503);
    expect(((await answer.body.json()) as { error: { message: string } }).error.message).toBe(
      'The rate limits cannot be checked (Redis is unreachable); try again later',
    );
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="batch",outcome="limits_unavailable"} 1');
    // A tenant without limits is not asked about: it goes in.
    const open = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 1 }),
    });
    expect(open.statusCode).toBe(200);
    await open.body.text();
  });
});
