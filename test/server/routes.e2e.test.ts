import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { createProxy } from '../../src/server/proxy.js';
import { eventuallyAsync } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

describe('disagg serve routes as clients and orchestrators use them', () => {
  it('HEAD /health and HEAD /ready answer as GET does, without a body', async () => {
    const { url } = await setup('vllm');
    for (const path of ['/health', '/ready']) {
      const answer = await request(`${url}${path}`, { method: 'HEAD' });
      expect(answer.statusCode).toBe(200);
      expect(await answer.body.text()).toBe('');
    }
  });

  it('a method a route does not take is a 405 naming the allowed ones (Allow), not a 404', async () => {
    const { url } = await setup('vllm');
    const get = await request(`${url}/v1/completions`);
    expect(get.statusCode).toBe(405);
    expect(get.headers.allow).toBe('POST');
    expect(((await get.body.json()) as { error: { message: string } }).error.message).toBe(
      'GET is not allowed on /v1/completions: use POST',
    );
    const post = await request(`${url}/health`, { method: 'POST', body: '{}' });
    expect(post.statusCode).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    await post.body.dump();
    expect((await request(`${url}/v2/nothing`)).statusCode).toBe(404);
  });

  it("GET /v1/models/{id} (the SDK's models.retrieve) answers the model from the decode workers' list", async () => {
    const { client, url } = await setup('vllm', { decode: { model: 'llama-fake' } });
    // No id at all is no model route: the path is unknown.
    const bare = await request(`${url}/v1/models/`);
    expect(bare.statusCode).toBe(404);
    expect(((await bare.body.json()) as { error: { message: string } }).error.message).toBe('No route GET /v1/models/');
    expect(await client.models.retrieve('llama-fake')).toMatchObject({ id: 'llama-fake', object: 'model' });
    const missing = await client.models.retrieve('gpt-nothing').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('GET /v1/models with no decode worker in rotation is a 503; with one that cannot be reached a 502 naming it, not its address', async () => {
    const { url, proxy, decode } = await setup('vllm');
    const worker = proxy.decodeWorkers.workers[0] as { url: string };
    proxy.decodeWorkers.setAvailable(worker, false);
    const none = await request(`${url}/v1/models`);
    expect(none.statusCode).toBe(503);
    expect(((await none.body.json()) as { error: { type: string } }).error.type).toBe('service_unavailable');
    proxy.decodeWorkers.setAvailable(worker, true);
    await decode.close();
    const gone = await request(`${url}/v1/models`);
    expect(gone.statusCode).toBe(502);
    const text = await gone.body.text();
    expect(JSON.parse(text).error).toMatchObject({ type: 'upstream_error', leg: 'decode' });
    expect(text).toContain('decode-0');
    expect(text).not.toContain(new URL(decode.url).host);
  });

  it('/ready is 200 with no prefill worker in rotation (decode serves alone) and says so; 503 with no decode worker', async () => {
    const { url, proxy } = await setup('vllm');
    proxy.prefillWorkers.setAvailable(proxy.prefillWorkers.workers[0] as { url: string }, false);
    const aggregated = await request(`${url}/ready`);
    expect(aggregated.statusCode).toBe(200);
    expect(await aggregated.body.json()).toMatchObject({
      ready: true,
      prefill_workers: 0,
      decode_workers: 1,
      mode: 'aggregated (no prefill worker in rotation)',
    });
    proxy.decodeWorkers.setAvailable(proxy.decodeWorkers.workers[0] as { url: string }, false);
    const none = await request(`${url}/ready`);
    expect(none.statusCode).toBe(503);
    // Nothing in rotation at all: no mode to speak of.
    expect(await none.body.json()).toStrictEqual({
      ready: false,
      reason: 'no decode worker in rotation',
      prefill_workers: 0,
      decode_workers: 0,
    });
  });

  it('with requireDisaggregation and no prefill worker in rotation, /ready is 503 saying why and a request is a 503, never served on decode alone', async () => {
    const { url, proxy, client, decode } = await setup('vllm', {}, { requireDisaggregation: true });
    expect((await request(`${url}/ready`)).statusCode).toBe(200);
    proxy.prefillWorkers.setAvailable(proxy.prefillWorkers.workers[0] as { url: string }, false);
    const notReady = await request(`${url}/ready`);
    expect(notReady.statusCode).toBe(503);
    expect(await notReady.body.json()).toStrictEqual({
      ready: false,
      reason: 'no prefill worker in rotation (--require-disaggregation)',
      prefill_workers: 0,
      decode_workers: 1,
    });
    const refused = await client.completions
      .create({ model: 'fake-model', prompt: 'hi', max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((refused as InstanceType<typeof OpenAI.APIError>).message).toContain('No prefill worker is available');
    expect(decode.requests).toHaveLength(0);
  });

  it("GET /v1/models/{id}: a worker's refusal passes through as it answered", async () => {
    const { url } = await setup('vllm', { decode: { apiKey: 'worker-only' } });
    const answer = await request(`${url}/v1/models/fake-model`);
    expect(answer.statusCode).toBe(401);
    await answer.body.dump();
  });

  it("the proxy's own routes, word for word: health, ready, metrics, 405 and 404, a model that is not there", async () => {
    const { url } = await setup('vllm', { decode: { model: 'llama-fake' } }, { apiKey: 'k' });
    const json = async (path: string, init: Parameters<typeof request>[1] = {}) => {
      const answer = await request(`${url}${path}`, init);
      return { status: answer.statusCode, headers: answer.headers, body: (await answer.body.json()) as unknown };
    };
    // Probes and metrics need no key; the API does.
    expect(await json('/health')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await json('/ready')).toMatchObject({
      status: 200,
      body: { ready: true, prefill_workers: 1, decode_workers: 1 },
    });
    expect(((await json('/ready')).body as Record<string, unknown>).mode).toBeUndefined();
    expect(((await json('/ready')).body as Record<string, unknown>).reason).toBeUndefined();
    const metrics = await request(`${url}/metrics`);
    expect(metrics.statusCode).toBe(200);
    expect(metrics.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    await metrics.body.dump();
    expect(await json('/v1/models')).toMatchObject({
      status: 401,
      body: {
        error: {
          message: 'Incorrect or missing API key: send it as "Authorization: Bearer <key>" (or "x-api-key: <key>")',
        },
      },
    });
    // The key guards the API, not an unknown path: that is a 404 with or without it.
    expect((await json('/v2/nothing')).status).toBe(404);
    const keyed = { headers: { authorization: 'Bearer k' } };
    for (const path of ['/ready', '/metrics', '/v1/models']) {
      expect(await json(path, { ...keyed, method: 'POST', body: '{}' }), path).toMatchObject({
        status: 405,
        headers: { allow: 'GET, HEAD' },
      });
    }
    // Percent-encoding that does not decode is the client's mistake.
    expect(await json('/v1/models/%E0%A4%A', keyed)).toMatchObject({
      status: 400,
      body: { error: { message: 'The path holds "%E0%A4%A", which is not valid percent-encoding' } },
    });
    expect(await json('/health', { method: 'POST', body: '{}' })).toMatchObject({
      status: 405,
      body: { error: { message: 'POST is not allowed on /health: use GET or HEAD' } },
    });
    expect(await json('/v1/models/llama-fake', { ...keyed, method: 'POST', body: '{}' })).toMatchObject({
      status: 405,
      headers: { allow: 'GET' },
    });
    expect(await json('/v1/chat/completions', keyed)).toMatchObject({ status: 405, headers: { allow: 'POST' } });
    expect(await json('/v2/nothing', keyed)).toMatchObject({
      status: 404,
      body: { error: { message: 'No route GET /v2/nothing' } },
    });
    expect(await json('/v1/models/gpt-nothing', keyed)).toEqual({
      status: 404,
      headers: expect.anything(),
      body: {
        error: {
          message: "The model 'gpt-nothing' does not exist",
          type: 'invalid_request_error',
          code: 'model_not_found',
          param: 'model',
        },
      },
    });
  });

  it('close(): /ready fails for the drain delay while requests are still served, then the listener closes', async () => {
    const { url, proxy, client } = await setup('vllm');
    const closing = proxy.close({ gracePeriodMs: 0, drainDelayMs: 300 });
    const draining = await request(`${url}/ready`);
    expect(draining.statusCode).toBe(503);
    expect(await draining.body.json()).toMatchObject({ ready: false, reason: 'shutting down' });
    const completion = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect(completion.choices[0]?.text).toBe('tok0 tok1 ');
    await closing;
    await expect(request(`${url}/health`)).rejects.toThrow();
  });

  it('a failed probe says why: the status or error code, and a hint for the usual mistakes', async () => {
    const { logs } = await setup('vllm', {}, ({ prefill, decode }) => ({
      prefill: [{ url: prefill.url }],
      decode: [{ url: `${decode.url}/api` }, { url: 'http://127.0.0.1:1' }],
      healthFailureThreshold: 1,
    }));
    const failed = logs.filter((record) => String(record.message).startsWith('Worker failed its health check'));
    // Each line names the worker and gives its address (`url`).
    const byWorker = Object.fromEntries(failed.map((record) => [(record.fields as { url: string }).url, record]));
    const wrongPath = Object.entries(byWorker).find(([worker]) => worker.endsWith('/api'))?.[1];
    expect(wrongPath?.message).toBe('Worker failed its health check (GET /health answered 404); out of rotation');
    expect(wrongPath?.fields).toMatchObject({ status: 404, hint: expect.stringContaining('has no /health') });
    const refused = byWorker['http://127.0.0.1:1'];
    expect(refused?.message).toBe('Worker failed its health check (ECONNREFUSED); out of rotation');
    expect(refused?.fields).toMatchObject({
      code: 'ECONNREFUSED',
      hint: expect.stringContaining('nothing listens there'),
    });
  });
});

describe('--metrics-port', () => {
  it('serves /metrics on a port of its own and nowhere else: the API port answers it 404, with or without the API key', async () => {
    const { url, proxy } = await setup('vllm', {}, { metricsPort: 0, apiKey: 'k' });
    const metricsUrl = proxy.metricsUrl as string;
    expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(metricsUrl).not.toBe(url);
    await new OpenAI({ baseURL: `${url}/v1`, apiKey: 'k', maxRetries: 0 }).completions.create({
      model: 'fake-model',
      prompt: 'x',
      max_tokens: 2,
    });
    const scrape = await request(`${metricsUrl}/metrics`);
    expect(scrape.statusCode).toBe(200);
    expect(await scrape.body.text()).toContain(
      'disagg_requests_total{route="completions",status="200",outcome="success",leg=""} 1',
    );
    const onApi = await request(`${url}/metrics`, { headers: { authorization: 'Bearer k' } });
    expect(onApi.statusCode).toBe(404);
    await onApi.body.dump();
    const head = await request(`${metricsUrl}/metrics`, { method: 'HEAD' });
    expect(head.statusCode).toBe(200);
    expect(await head.body.text()).toBe('');
    const posted = await request(`${metricsUrl}/metrics`, { method: 'POST', body: '{}' });
    expect(posted.statusCode).toBe(404);
    await posted.body.dump();
    const other = await request(`${metricsUrl}/v1/completions`, { method: 'POST', body: '{}' });
    expect(other.statusCode).toBe(404);
    expect(((await other.body.json()) as { error: { message: string } }).error.message).toBe(
      'This port serves GET /metrics only',
    );
    await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    expect(proxy.metricsUrl).toBeUndefined();
    await expect(request(`${metricsUrl}/metrics`)).rejects.toThrow();
  });

  it('a metrics port in use fails listen, and the API port is not taken', async () => {
    const first = await setup('vllm', {}, { metricsPort: 0 });
    const taken = Number(new URL(first.proxy.metricsUrl as string).port);
    const second = createProxy({
      connector: 'vllm',
      prefill: [{ url: first.prefill.url }],
      decode: [{ url: first.decode.url }],
      metricsPort: taken,
    });
    await expect(second.listen(0)).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(second.server.listening).toBe(false);
    await second.close({ gracePeriodMs: 0, drainDelayMs: 0 });
  });
});

describe('who may use which route', () => {
  it('without an admin key the admin API is not there (404), and with one a tenant key does not open it', async () => {
    const { url } = await setup('vllm');
    for (const path of ['/admin/workers', '/admin/tenants']) {
      const absent = await request(`${url}${path}`);
      expect(absent.statusCode).toBe(404);
      await absent.body.dump();
    }
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: t, keys: [sk-t-00000001] }\n');
    const guarded = await setup('vllm', {}, { adminKey: 'sk-admin-000001', tenantsFile: file });
    for (const path of ['/admin/workers', '/admin/tenants']) {
      const refused = await request(`${guarded.url}${path}`, { headers: { authorization: 'Bearer sk-t-00000001' } });
      expect(refused.statusCode).toBe(401);
      await refused.body.dump();
      const admitted = await request(`${guarded.url}${path}`, { headers: { authorization: 'Bearer sk-admin-000001' } });
      expect(admitted.statusCode).toBe(200);
      await admitted.body.dump();
    }
    // The tenant's key opens the API, as it should.
    const completion = await request(`${guarded.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-t-00000001' },
      body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
    });
    expect(completion.statusCode).toBe(200);
    await completion.body.dump();
  });

  it('/ready with --require-disaggregation: ready with a prefill worker and no reason given; 503 naming the flag without one', async () => {
    const { url, proxy } = await setup('vllm', {}, { requireDisaggregation: true });
    const ready = await request(`${url}/ready`);
    expect(ready.statusCode).toBe(200);
    expect(await ready.body.json()).toStrictEqual({ ready: true, prefill_workers: 1, decode_workers: 1 });
    proxy.prefillWorkers.setAvailable(proxy.prefillWorkers.workers[0] as { url: string }, false);
    const unready = await request(`${url}/ready`);
    expect(unready.statusCode).toBe(503);
    expect(await unready.body.json()).toStrictEqual({
      ready: false,
      reason: 'no prefill worker in rotation (--require-disaggregation)',
      prefill_workers: 0,
      decode_workers: 1,
    });
  });
});

describe('a request as /metrics measures it', () => {
  it('its duration is in seconds, from its arrival to its answer: within what the client waited', async () => {
    const { url, client } = await setup('vllm');
    const started = performance.now();
    await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
    const series = /^disagg_request_duration_seconds_sum\{route="completions",outcome="success"\} (\S+)$/m;
    let sum: number | undefined;
    // Counted when the answer closes, which may come just after the client has read it.
    await eventuallyAsync(async () => {
      const found = series.exec(await (await request(`${url}/metrics`)).body.text());
      sum = found === null ? undefined : Number(found[1]);
      return sum !== undefined;
    }, 'the request counted');
    const waited = (performance.now() - started) / 1000;
    expect(sum).toBeGreaterThan(0);
    expect(sum).toBeLessThanOrEqual(waited);
  });
});

describe('docs/monitoring.md documents every metric', () => {
  it("docs/monitoring.md's metrics table lists exactly the disagg_ metrics /metrics exposes", async () => {
    const { url } = await setup('vllm');
    const exposed = new Set(
      [...(await (await request(`${url}/metrics`)).body.text()).matchAll(/^# TYPE (disagg_\w+) /gm)].map((m) => m[1]),
    );
    const page = readFileSync(fileURLToPath(new URL('../../docs/monitoring.md', import.meta.url)), 'utf8');
    const documented = new Set([...page.matchAll(/^\| `(disagg_(?!epp_)\w+)` \|/gm)].map((m) => m[1]));
    expect([...documented].sort()).toEqual([...exposed].sort());
  });
});

describe('probes with thresholds', () => {
  it('--health-failure-threshold failed probes in a row take a worker out, --health-success-threshold bring it back', async () => {
    const { proxy, decode } = await setup('vllm', {}, { healthFailureThreshold: 3, healthSuccessThreshold: 2 });
    const health = (proxy as unknown as { core: { health: { check(): Promise<void> } } }).core.health;
    const worker = proxy.decodeWorkers.workers[0] as { url: string };
    decode.setHealthy(false);
    const seen: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      await health.check();
      seen.push(proxy.decodeWorkers.isAvailable(worker));
    }
    decode.setHealthy(true);
    for (let i = 0; i < 2; i++) {
      await health.check();
      seen.push(proxy.decodeWorkers.isAvailable(worker));
    }
    expect(seen).toEqual([true, true, false, false, true]);
  });
});
