import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { Agent, type Dispatcher, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { createProxy } from '../../src/server/proxy.js';
import { eventually } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup, fakes } = proxyHarness();

async function text(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>): Promise<string> {
  let out = '';
  for await (const chunk of stream) out += chunk.choices[0]?.delta?.content ?? '';
  return out;
}

describe('disagg proxy, with the official openai client', () => {
  for (const protocol of ['vllm', 'sglang'] as const) {
    it(`${protocol}: a streaming chat completion, with how it was served in the headers`, async () => {
      const { client, prefill, decode } = await setup(protocol);
      const { data: stream, response } = await client.chat.completions
        .create({ model: 'fake-model', messages: [{ role: 'user', content: 'Hi' }], stream: true })
        .withResponse();
      expect(await text(stream)).toBe('tok0 tok1 tok2 tok3 ');
      expect(response.headers.get('x-disagg-strategy')).toBe(
        protocol === 'vllm' ? 'disaggregated-sequential' : 'disaggregated-concurrent',
      );
      // Workers are named to clients, never addressed.
      expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-0');
      expect(response.headers.get('x-disagg-decode-worker')).toBe('decode-0');
      const requestId = response.headers.get('x-request-id');
      expect([prefill.requests[0]?.requestId, decode.requests[0]?.requestId]).toEqual([requestId, requestId]);
      expect(prefill.ledger.claimed()).toHaveLength(1);
    });
  }

  it('a non-streamed completion, with usage', async () => {
    const { client } = await setup('vllm');
    const completion = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 });
    expect(completion.choices[0]).toMatchObject({ text: 'tok0 tok1 tok2 ', finish_reason: 'length' });
    expect(completion.usage?.completion_tokens).toBe(3);
  });

  it('a streamed completion with include_usage ends with the usage chunk', async () => {
    const { client } = await setup('vllm');
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: 'Say',
      max_tokens: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((chunk) => chunk.choices[0]?.text ?? null)).toEqual(['tok0 ', 'tok1 ', '', null]);
    expect(chunks.at(-1)?.usage?.prompt_tokens_details?.cached_tokens).toEqual(expect.any(Number));
  });

  it("a decode worker's 400 is the client's BadRequestError with the worker's words; never an empty 200", async () => {
    const { client, prefill } = await setup('vllm', {
      decode: { fault: { type: 'status', status: 400, message: 'context too long' } },
    });
    const call = client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    });
    await expect(call).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(call).rejects.toThrow('context too long');
    fakes.leaveKv(prefill); // refused before taking the KV: the prefill worker's own timeout frees it
  });

  it('a prefill failure before the first byte is a real 502 saying the prefill leg failed', async () => {
    const { client } = await setup('vllm', {
      prefill: { fault: { type: 'status', status: 503, message: 'prefill down' } },
    });
    const error = await client.completions.create({ model: 'm', prompt: 'x', stream: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((error as Error).message).toContain('prefill down');
    expect((error as { error?: { leg?: string } }).error?.leg).toBe('prefill');
  });

  it('a decode failure after streaming started is one SSE error event naming the leg, then the end', async () => {
    const { url } = await setup('vllm', {
      decode: { fault: { type: 'error-event', afterTokens: 2, message: 'decode OOM' } },
    });
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', stream: true }),
    });
    expect(answer.statusCode).toBe(200);
    const body = await answer.body.text();
    const events = body.trim().split('\n\n');
    expect(events.slice(0, 2).every((event) => event.startsWith('data: {'))).toBe(true);
    expect(events[2]).toMatch(
      /^event: error\ndata: \{"error":\{"message":".*decode OOM.*","type":"upstream_error","code":502,"param":null,"leg":"decode"\}\}$/,
    );
    expect(events).toHaveLength(3); // nothing after the error, no [DONE]
  });

  it('the same failure surfaces as an APIError from the openai client stream', async () => {
    const { client } = await setup(
      'sglang',
      { prefill: { fault: { type: 'late-failure', message: 'KV transfer aborted' } } },
      {},
    );
    const error = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true })
      .then((stream) => text(stream))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain('KV transfer aborted');
  });

  it("the caller's x-request-id is echoed; the workers get a fresh id, the same on both legs", async () => {
    const { url, prefill, decode } = await setup('vllm');
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'caller-42' },
      body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 1 }),
    });
    await answer.body.dump();
    expect(answer.headers['x-request-id']).toBe('caller-42');
    // The workers get an id of their own, the same on both legs: two clients reusing an id do
    // not meet inside an engine.
    const legs = [prefill.requests[0]?.requestId, decode.requests[0]?.requestId];
    expect(legs[0]).toBe(legs[1]);
    expect(legs[0]).not.toBe('caller-42');
  });

  it("a caller's x-request-id past 128 characters, or with a space, is neither echoed nor logged: the proxy's own id stands for it", async () => {
    const { url, logs } = await setup('vllm');
    for (const given of ['r'.repeat(129), 'r'.repeat(16_000), 'two words']) {
      const answer = await request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': given },
        body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 1 }),
      });
      await answer.body.dump();
      expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    }
    await eventually(() => logs.filter((record) => record.message === 'request finished').length === 3, 'logged');
    expect(JSON.stringify(logs)).not.toMatch(/rrrrrrrrrrrrrrrrrrrr|two words/);
  });

  it('refuses a body that is not a JSON object (400) or is too large (413), before any worker is called', async () => {
    const { url, prefill } = await setup('vllm', {}, { maxBodyBytes: 200 });
    const post = (body: string) =>
      request(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const array = await post('[1, 2]');
    expect(array.statusCode).toBe(400);
    expect(await array.body.json()).toMatchObject({
      error: { type: 'invalid_request_error', message: expect.stringContaining('JSON object') },
    });
    const broken = await post('{"model":');
    expect(broken.statusCode).toBe(400);
    await broken.body.dump();
    const large = await post(JSON.stringify({ model: 'm', prompt: 'x'.repeat(100_000) }));
    expect(large.statusCode).toBe(413);
    expect(await large.body.json()).toMatchObject({ error: { message: 'The request body is larger than 200 bytes' } });
    expect(prefill.requests).toHaveLength(0);
  });

  it('a client that disconnects mid-stream stops the decode leg', async () => {
    const { url, decode } = await setup('vllm', { decode: { tokens: 1000, tokenIntervalMs: 10 } });
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', stream: true }),
    });
    for await (const chunk of answer.body) {
      if (String(chunk).includes('tok2')) break; // breaking destroys the connection
    }
    await eventually(() => decode.requests[0]?.aborted === true, 'decode stopped');
  });

  it('a non-streamed request whose prefill fails after the handoff is a 502 naming the prefill leg', async () => {
    const { client } = await setup('sglang', {
      prefill: { fault: { type: 'late-failure', afterMs: 50, message: 'KV transfer aborted' } },
      decode: { tokens: 20, tokenIntervalMs: 5 },
    });
    const error = await client.completions.create({ model: 'm', prompt: 'x' }).catch((e: unknown) => e);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((error as { error?: { leg?: string } }).error?.leg).toBe('prefill');
  });

  /** Node's period for checking the timeouts (not in @types/node). */
  const checkingPeriod = (server: object) =>
    (server as { connectionsCheckingInterval?: number }).connectionsCheckingInterval;

  it('keeps idle client connections 72 s (Node: 5 s), gives headers 10 s and a request 120 s, configurable', async () => {
    const { proxy } = await setup('vllm');
    const { keepAliveTimeout, headersTimeout, requestTimeout } = proxy.server;
    expect([keepAliveTimeout, headersTimeout, requestTimeout]).toEqual([72_000, 10_000, 120_000]);
    const custom = await setup('vllm', {}, { keepAliveTimeoutMs: 10_000 });
    expect(custom.proxy.server.keepAliveTimeout).toBe(10_000);
    // Node checks those timeouts on a period: a tenth of the headers' (1 s at most, 10 ms at least).
    expect(checkingPeriod(proxy.server)).toBe(1000);
    const quick = await setup('vllm', {}, { headersTimeoutMs: 2000, requestTimeoutMs: 1500 });
    // Headers cannot be given longer than the whole request.
    expect([quick.proxy.server.headersTimeout, quick.proxy.server.requestTimeout]).toEqual([1500, 1500]);
    expect(checkingPeriod(quick.proxy.server)).toBe(200);
    const tiny = await setup('vllm', {}, { headersTimeoutMs: 50, requestTimeoutMs: 100 });
    expect(checkingPeriod(tiny.proxy.server)).toBe(10);
    const patient = await setup('vllm', {}, { headersTimeoutMs: 60_000 });
    expect(checkingPeriod(patient.proxy.server)).toBe(1000);
  });

  it('GET /v1/models comes from a decode worker; /health, /ready and /metrics answer', async () => {
    const { client, url } = await setup('vllm', { decode: { model: 'llama-fake' } });
    const models = await client.models.list();
    expect(models.data.map((model) => model.id)).toEqual(['llama-fake']);
    expect((await request(`${url}/health`)).statusCode).toBe(200);
    expect(await (await request(`${url}/ready`)).body.json()).toEqual({
      ready: true,
      prefill_workers: 1,
      decode_workers: 1,
    });
    await client.completions.create({ model: 'llama-fake', prompt: 'x', max_tokens: 2 });
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_requests_total{route="completions",status="200",outcome="success",leg=""} 1');
    for (const name of [
      'disagg_time_to_first_token_seconds_count 1',
      'disagg_prefill_duration_seconds_count 1',
      'disagg_handoff_window_seconds_count 1',
      'disagg_inter_token_latency_seconds',
      'disagg_held_terminal_wait_seconds',
      'disagg_in_flight_requests{role="decode"',
      'disagg_orphaned_handoffs_total 0',
    ]) {
      expect(metrics).toContain(name);
    }
  });

  it('/metrics names workers as the admin API and logs do, never by address, and does not count probes as requests', async () => {
    const { client, url, prefill, decode } = await setup('vllm');
    await client.completions.create({ model: 'fake-model', prompt: 'x', max_tokens: 2 });
    for (const path of ['/health', '/ready', '/health']) await (await request(`${url}${path}`)).body.dump();
    // A probe by HEAD (as some load balancers send) is a probe too, not a request.
    await (await request(`${url}/health`, { method: 'HEAD' })).body.dump();
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_worker_available{role="prefill",worker="prefill-0"} 1');
    expect(metrics).toContain('disagg_in_flight_requests{role="decode",worker="decode-0"} 0');
    // The limits, so that an alert can compare the queue with its size.
    expect(metrics).toContain('disagg_admission_limit{limit="in_flight"} 1024');
    expect(metrics).toContain('disagg_admission_limit{limit="queue"} 1024');
    expect(metrics).toContain('disagg_worker_legs_total{role="prefill",worker="prefill-0",outcome="success"} 1');
    expect(metrics).toContain('disagg_worker_legs_total{role="decode",worker="decode-0",outcome="success"} 1');
    // The fake decode answered 2 tokens for a 1-token prompt (its usage, passed through).
    expect(metrics).toContain('disagg_tokens_total{route="completions",model="fake-model",kind="completion"} 2');
    expect(metrics).not.toContain(new URL(prefill.url).host);
    expect(metrics).not.toContain(new URL(decode.url).host);
    const counted = [...metrics.matchAll(/^disagg_requests_total\{route="(\w+)"/gm)].map((m) => m[1]);
    expect(counted).toEqual(['completions']);
  });

  it('metrics: the held terminal of a concurrent request, and an orphaned handoff', async () => {
    const sglang = await setup('sglang', { prefill: { transferMs: 150 }, decode: { tokens: 2 } });
    const stream = await sglang.client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    });
    expect(await text(stream)).toBe('tok0 tok1 ');
    const held = await (await request(`${sglang.url}/metrics`)).body.text();
    expect(held).toContain('disagg_held_terminal_wait_seconds_count 1');

    const vllm = await setup('vllm', { decode: { fault: { type: 'never-bootstrap' } } }, { cleanupBudgetMs: 100 });
    const answer = request(`${vllm.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', stream: true }),
      signal: AbortSignal.timeout(300), // the client gives up while decode has not answered
    });
    await answer.catch(() => {});
    await eventually(() => vllm.decode.requests[0]?.aborted === true, 'decode given up');
    const orphaned = await (await request(`${vllm.url}/metrics`)).body.text();
    expect(orphaned).toContain('disagg_orphaned_handoffs_total 1');
    fakes.leaveKv(vllm.prefill);
  });

  it('a failing worker leaves the rotation and comes back; /ready follows', async () => {
    const { url, decode, proxy, logs } = await setup('vllm', {}, { healthIntervalMs: 20 });
    decode.setHealthy(false);
    await eventually(() => proxy.decodeWorkers.available.length === 0, 'decode out of rotation');
    expect((await request(`${url}/ready`)).statusCode).toBe(503);
    await new Promise((resolve) => setTimeout(resolve, 100)); // more failed rounds: logged once
    const failed = logs.filter((record) => String(record.message).startsWith('Worker failed its health check'));
    expect(failed).toHaveLength(1);
    decode.setHealthy(true);
    await eventually(() => proxy.decodeWorkers.available.length === 1, 'decode back in rotation');
    expect((await request(`${url}/ready`)).statusCode).toBe(200);
  });

  it('a worker a request could not reach leaves the rotation at once', async () => {
    const { client, decode, prefill, proxy, logs } = await setup('vllm', {}, { healthIntervalMs: 60_000 });
    await decode.close();
    const error = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect(proxy.decodeWorkers.available).toEqual([]);
    await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 }).catch(() => {});
    expect(logs.filter((record) => record.message?.startsWith('Worker unreachable'))).toHaveLength(1);
    fakes.leaveKv(prefill); // committed for a decode worker that was gone: freed by prefill's own timeout
  });

  it('no prefill worker in rotation: requests are served by decode alone, and say so', async () => {
    const { client, prefill, proxy } = await setup('vllm', {}, { healthIntervalMs: 20 });
    await prefill.close();
    await eventually(() => proxy.prefillWorkers.available.length === 0, 'prefill out of rotation');
    const { data, response } = await client.completions
      .create({ model: 'm', prompt: 'x', max_tokens: 2 })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 ');
    expect(response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
  });

  it('a client that never reads: past the limit the decode leg is stopped instead of buffered', async () => {
    const { url, decode } = await setup('vllm', { decode: { tokens: 200_000 } }, { slowClientTimeoutMs: 200 });
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'x', stream: true }),
    });
    expect(answer.statusCode).toBe(200);
    // Never read: the socket fills, the proxy waits 200 ms, then gives the request up.
    await eventually(() => decode.requests[0]?.aborted === true, 'decode stopped', 2000);
    answer.body.destroy();
  }, 20_000);

  it('graceful shutdown: new requests refused, a request under way ended by an SSE error after the grace period', async () => {
    const { client, proxy, url } = await setup('vllm', { decode: { tokens: 1000, tokenIntervalMs: 20 } });
    const stream = await client.completions.create({ model: 'm', prompt: 'x', stream: true });
    const reading = (async () => {
      let count = 0;
      for await (const _ of stream) count++;
      return count;
    })().catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await proxy.close({ gracePeriodMs: 100, drainDelayMs: 0 });
    const error = await reading;
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain('shutting down');
    await expect(request(`${url}/health`)).rejects.toThrow();
  });

  it('graceful shutdown ends a non-streamed request under way with a 503, not a reset', async () => {
    const { client, proxy } = await setup('vllm', { decode: { tokens: 1000, tokenIntervalMs: 20 } });
    const call = client.completions.create({ model: 'm', prompt: 'x' }).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await proxy.close({ gracePeriodMs: 50, drainDelayMs: 0 });
    const error = await call;
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((error as Error).message).toContain('shutting down');
  });

  it('a request ended by shutdown past the grace period is counted as shutdown, not as a client that left', async () => {
    const registry = new Registry();
    const { client, proxy } = await setup(
      'vllm',
      { decode: { tokens: 1000, tokenIntervalMs: 20 } },
      { metricsRegistry: registry },
    );
    const stream = await client.completions.create({ model: 'm', prompt: 'x', stream: true });
    const reading = (async () => {
      for await (const _ of stream);
    })().catch((e: unknown) => e);
    const call = client.completions.create({ model: 'm', prompt: 'x' }).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await proxy.close({ gracePeriodMs: 50, drainDelayMs: 0 });
    await Promise.all([reading, call]);
    const text = await registry.metrics();
    const counted = [...text.matchAll(/^disagg_requests_total\{(.*)\} (\d+)$/gm)].map((m) => `${m[1]} ${m[2]}`);
    expect(counted.sort()).toEqual([
      'route="completions",status="200",outcome="shutdown",leg="" 1',
      'route="completions",status="503",outcome="shutdown",leg="" 1',
    ]);
  });
});

describe('createProxy().listen', () => {
  it('rejects with the error of a port in use, keeps no listener for it, and names an IPv6 address in brackets', async () => {
    const { url, prefill, decode } = await setup('vllm');
    const port = Number(new URL(url).port);
    const second = createProxy({ connector: 'vllm', prefill: [{ url: prefill.url }], decode: [{ url: decode.url }] });
    try {
      await expect(second.listen(port)).rejects.toMatchObject({ code: 'EADDRINUSE' });
      expect(second.server.listenerCount('error')).toBe(0);
      const v6 = await second.listen(0, '::1').catch((error: { code?: string }) => error.code);
      // Where the machine has no IPv6 loopback there is nothing to name.
      if (v6 !== 'EADDRNOTAVAIL' && v6 !== 'EAFNOSUPPORT') expect(v6).toMatch(/^http:\/\/\[::1\]:\d+$/);
      expect(second.server.listenerCount('error')).toBe(0);
    } finally {
      await second.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    }
  });
});

describe('what the proxy owns and what it borrows', () => {
  it("a dispatcher given in the options carries every call to the workers, and is the application's to close", async () => {
    let dispatched = 0;
    class Counting extends Agent {
      override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
        dispatched += 1;
        return super.dispatch(options, handler);
      }
    }
    const dispatcher = new Counting();
    const { client, proxy } = await setup('vllm', {}, { dispatcher });
    const answer = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect(answer.choices[0]?.text).toBe('tok0 tok1 ');
    // The probes at start, /v1/models for the context, then both legs.
    expect(dispatched).toBeGreaterThanOrEqual(4);
    await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    expect(dispatcher.destroyed).toBe(false);
    await dispatcher.close();
  });

  it('each admitted request reports its wait in the queue (0 s with a slot free)', async () => {
    const { client, url } = await setup('vllm');
    await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toMatch(/^disagg_queue_wait_seconds_count\{tenant="default"\} 1$/m);
    expect(metrics).toMatch(/^disagg_queue_wait_seconds_bucket\{le="0.005",tenant="default"\} 1$/m);
  });

  it('with a worker key the context of the models is learned too: a budget beyond it is refused up front', async () => {
    const key = { apiKey: 'worker-secret' };
    const { url, prefill } = await setup('vllm', { prefill: key, decode: key }, { workerApiKey: 'worker-secret' });
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 5000 }),
    });
    expect(answer.statusCode).toBe(400);
    await answer.body.dump();
    expect(prefill.requests.filter((r) => r.path === '/v1/completions')).toEqual([]);
  });

  it('a proxy that never listened closes at once: there is no load balancer to drain', async () => {
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: 'http://127.0.0.1:1' }],
      decode: [{ url: 'http://127.0.0.1:1' }],
    });
    // A drain delay of a minute would outlast the test's own timeout.
    await proxy.close({ drainDelayMs: 60_000, gracePeriodMs: 0 });
  });
});
