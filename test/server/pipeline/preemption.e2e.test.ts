// Preemption by priority through `disagg serve` (`--max-concurrent-requests 1 --preempt`), over
// fake workers, with two tenants of priorities 0 and 1: the low one's request holds the one slot
// (its decode stalls after a token, so it stays under way until someone ends it), the high one
// arrives and takes it. What each client reads, what the fakes see of the low request's legs
// (the harness checks their KV ledgers after each test), the metric and the log.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { FakeRequest, FakeWorker } from '../../../src/testing/index.js';
import { eventually, eventuallyAsync } from '../../support/http.js';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

const LOW_KEY = 'sk-low-000000001';
const HIGH_KEY = 'sk-high-00000001';

function tenantsFile(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-preempt-')), 'tenants.yaml');
  writeFileSync(
    file,
    `tenants:\n  - name: low\n    keys: [${LOW_KEY}]\n    priority: 0\n  - name: high\n    keys: [${HIGH_KEY}]\n    priority: 1\n`,
  );
  return file;
}

/**
 * One slot, preemption on; the low tenant's decode holds its request: a stream sends one token
 * then stalls until it is ended, a whole answer takes 4 x 100 ms (a decode answering whole is
 * read to its answer, its only sign that it took the KV, as when a client leaves).
 */
async function preempting(preempt = true, prefillMs = 0) {
  const hold = (record: FakeRequest) => {
    if (record.headers.authorization !== `Bearer ${LOW_KEY}`) return undefined;
    return record.body.stream === true
      ? ({ type: 'stall', afterTokens: 1 } as const)
      : ({ type: 'slow', tokenIntervalMs: 100 } as const);
  };
  return setup(
    'vllm',
    {
      decode: { tokens: 4, fault: hold },
      // Prefill computes each prompt this long: a request under way there has sent nothing yet.
      prefill: { tokenIntervalMs: prefillMs },
    },
    { maxConcurrentRequests: 1, queueSize: 4, queueTimeoutMs: 10_000, preempt, tenantsFile: tenantsFile() },
  );
}

const post = (url: string, path: string, key: string, body: Record<string, unknown>) =>
  request(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });

const metrics = async (url: string) => (await request(`${url}/metrics`)).body.text();

/** Every generation request the fakes got was ended: answered to its end, or given up by the proxy. */
async function noneLeftOpen(workers: FakeWorker[]): Promise<void> {
  await eventually(
    () => workers.every((worker) => worker.requests.every((each) => each.completed || each.aborted)),
    'every leg on the fakes ended',
  );
}

const STREAMS = [
  {
    api: 'chat',
    path: '/v1/chat/completions',
    body: { model: 'fake-model', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, stream: true },
    // OpenAI's error event, with its code; never [DONE] nor a finish_reason.
    error:
      /event: error\ndata: \{"error":\{"message":"[^"]*it was preempted[^"]*","type":"service_unavailable","code":"preempted"/,
    never: [/\[DONE\]/, /"finish_reason":"(stop|length)"/],
  },
  {
    api: 'responses',
    path: '/v1/responses',
    body: { model: 'fake-model', input: 'Hi', max_output_tokens: 4, stream: true },
    error:
      /event: error\ndata: \{"type":"error","code":"server_error","message":"[^"]*it was preempted[^"]*"[^\n]*\n\nevent: response\.failed/,
    never: [/response\.completed/],
  },
  {
    api: 'messages',
    path: '/v1/messages',
    body: { model: 'fake-model', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], stream: true },
    error: /event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error","message":"[^"]*it was preempted/,
    never: [/message_stop/, /"stop_reason":"(end_turn|max_tokens)"/],
  },
] as const;

describe('--preempt: a request of higher priority takes the slot of one under way', () => {
  it.each(STREAMS)(
    "a $api stream that had begun ends with its API's error event saying preempted, never its end; the high one is served; both legs of the low one end",
    async ({ path, body, error, never }) => {
      const { url, prefill, decode, logs } = await preempting();
      const low = await post(url, path, LOW_KEY, body);
      expect(low.statusCode).toBe(200);
      // Read until its first token has come: the stream has begun.
      const reader = low.body[Symbol.asyncIterator]();
      let text = '';
      while (!/tok|delta/.test(text)) {
        const step = await reader.next();
        if (step.done === true) throw new Error(`the low stream ended before its first token: ${text}`);
        text += String(step.value);
      }
      const high = await post(url, path, HIGH_KEY, { ...body, stream: false });
      for (let step = await reader.next(); step.done !== true; step = await reader.next()) text += String(step.value);
      expect(text).toMatch(error);
      for (const end of never) expect(text).not.toMatch(end);
      expect(high.statusCode).toBe(200);
      await high.body.dump();
      await noneLeftOpen([prefill, decode]);
      expect(decode.requests.filter((each) => each.aborted)).toHaveLength(1);
      expect(await metrics(url)).toContain('disagg_tenant_requests_total{tenant="low",outcome="preempted"} 1');
      await eventually(
        () => logs.filter((record) => record.message === 'request finished').length === 2,
        'both requests logged',
      );
      const finished = logs
        .filter((record) => record.message === 'request finished')
        .map((record) => record.fields as Record<string, unknown>);
      expect(finished.find((fields) => fields.tenant === 'low')).toMatchObject({ preempted: true, preemptedBy: 1 });
      expect(finished.find((fields) => fields.tenant === 'high')).not.toHaveProperty('preempted');
    },
  );

  it('a request not yet answered (not streamed) gets a 503 with Retry-After and x-disagg-preempted: true, which the openai client sees as an APIError 503; its decode is read to its answer, its KV taken', async () => {
    const { url, prefill, decode, logs } = await preempting();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: LOW_KEY, maxRetries: 0 });
    const low = client.completions
      .create({ model: 'fake-model', prompt: 'Hi', max_tokens: 4 })
      .withResponse()
      .catch((error: unknown) => error);
    await eventually(() => decode.requests.length === 1, 'the low request reached decode');
    const high = await post(url, '/v1/completions', HIGH_KEY, { model: 'fake-model', prompt: 'Hi', max_tokens: 4 });
    const refused = await low;
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    const apiError = refused as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(503);
    expect(apiError.headers?.get('retry-after')).toBe('1');
    expect(apiError.headers?.get('x-disagg-preempted')).toBe('true');
    expect(apiError.code).toBe('preempted');
    expect(apiError.error).toMatchObject({
      type: 'service_unavailable',
      message:
        "The proxy is at capacity and gave this request's slot to one of higher priority (1 over 0): it was preempted; try again later",
    });
    expect(high.statusCode).toBe(200);
    expect(((await high.body.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    await noneLeftOpen([prefill, decode]);
    expect(await metrics(url)).toContain('disagg_tenant_requests_total{tenant="low",outcome="preempted"} 1');
    await eventually(
      () =>
        logs.some(
          (record) => record.message === 'request finished' && (record.fields as { tenant?: string }).tenant === 'low',
        ),
      'the low request logged',
    );
    expect(
      logs.find(
        (record) => record.message === 'request finished' && (record.fields as { tenant?: string }).tenant === 'low',
      )?.fields,
    ).toMatchObject({ status: 503, preempted: true, preemptedBy: 1 });
  });

  it('a stream whose KV is still made or in transit is not preempted (nothing cancels a prefill: it would free no worker); once decode has taken its KV, the waiting higher request takes its slot and it gets the 503', async () => {
    const { url, prefill, decode } = await preempting(true, 1000);
    const body = { model: 'fake-model', prompt: 'Hi', max_tokens: 4, stream: true };
    const low = post(url, '/v1/completions', LOW_KEY, body);
    await eventually(() => prefill.requests.length === 1, 'the low request reached prefill');
    const high = post(url, '/v1/completions', HIGH_KEY, body);
    // Nothing is preempted while the low one's prefill runs (1 s): only once its decode has the KV.
    await eventually(() => decode.requests.length === 1, "the low request's decode took its KV");
    const refused = await low;
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers['x-disagg-preempted']).toBe('true');
    expect(await refused.body.json()).toMatchObject({ error: { type: 'service_unavailable', code: 'preempted' } });
    const served = await high;
    expect(served.statusCode).toBe(200);
    expect(await served.body.text()).toContain('data: [DONE]');
    await noneLeftOpen([prefill, decode]);
    // Its prefill ran to its end, its decode took the KV, then was ended: nothing held.
    expect(prefill.requests[0]).toMatchObject({ completed: true });
    expect(decode.requests.filter((each) => each.headers.authorization === `Bearer ${LOW_KEY}`)).toMatchObject([
      { kv: 'taken', aborted: true },
    ]);
  });

  it("a request preempted while a stage of the user's still ran is refused with the 503 before any worker is called", async () => {
    const { url, proxy, prefill, logs } = await preempting();
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => (open = resolve));
    let held = 0;
    proxy.addStage({
      name: 'slow-for-low',
      run: async (request) => {
        if (request.tenant !== 'low') return undefined;
        held++;
        await gate;
        return undefined;
      },
    });
    const body = { model: 'fake-model', prompt: 'Hi', max_tokens: 4 };
    const low = post(url, '/v1/completions', LOW_KEY, body);
    await eventually(() => held === 1, "the low request is in the user's stage");
    const high = await post(url, '/v1/completions', HIGH_KEY, body);
    expect(high.statusCode).toBe(200);
    await high.body.dump();
    open();
    const refused = await low;
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['x-disagg-preempted']).toBe('true');
    expect(refused.headers['retry-after']).toBe('1');
    await refused.body.dump();
    expect(prefill.requests).toHaveLength(1);
    expect(logs.find((record) => record.message === 'request rejected')?.fields).toMatchObject({
      tenant: 'low',
      status: 503,
      code: 'DISAGG_PREEMPTED',
    });
  });

  it('without --preempt the high request waits for the slot: the low one is not ended', async () => {
    const { url, decode } = await preempting(false);
    const leaves = new AbortController();
    const low = request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${LOW_KEY}` },
      body: JSON.stringify({ model: 'fake-model', prompt: 'Hi', max_tokens: 4, stream: true }),
      signal: leaves.signal,
    });
    await eventually(() => decode.requests.length === 1, 'the low request reached decode');
    const high = post(url, '/v1/completions', HIGH_KEY, { model: 'fake-model', prompt: 'Hi', max_tokens: 4 });
    await eventuallyAsync(async () => /^disagg_queue_depth 1$/m.test(await metrics(url)), 'the high request queued');
    expect(decode.requests.filter((each) => each.aborted)).toHaveLength(0);
    expect(await metrics(url)).not.toContain('outcome="preempted"');
    // Its client leaves: the slot is free, and the high one is served.
    (await low).body.on('error', () => {});
    leaves.abort();
    expect((await high).statusCode).toBe(200);
  });
});
