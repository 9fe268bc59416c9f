// Service levels on requests through `disagg serve`: read from the headers or the tenant's
// defaults, seen by the routing plugins, and a sheddable request that no worker is predicted to
// meet refused before any worker. The predictor is another part's; a filter registered here
// stands in for it, noting every leg of a request with service levels unmeetable (it keeps
// every worker, as an SLO filter does when none would do).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { registerFilter } from '../../../src/routing/plugin-registration.js';
import type { ServiceLevelTargets } from '../../../src/routing/routing-input.js';
import { sloRetryAfterS } from '../../../src/server/pipeline/shedding.js';
import { proxyHarness } from '../../support/proxy.js';

/** What the stand-in filter saw of each request it was asked about, by leg. */
const seen: Array<{ leg: string; levels: ServiceLevelTargets | undefined; priority: number }> = [];

registerFilter({
  name: 'test-slo-unmeetable',
  help: 'notes every leg of a request with service levels unmeetable, keeping every worker',
  params: [],
  consumes: {},
  create: () => ({
    name: 'test-slo-unmeetable',
    filter: (candidates, _load, input) => {
      if (input === undefined) return candidates;
      // Prefill is picked first: a decode pick sees it.
      const leg = input.picked.has('prefill') ? 'decode' : 'prefill';
      seen.push({ leg, levels: input.serviceLevels, priority: input.priority });
      if (input.serviceLevels !== undefined) input.noteUnmeetable(leg);
      return candidates;
    },
  }),
});

// Finds a request unmeetable only once a worker is passed over (one candidate left): what a
// retry's decision sees after its first worker failed.
registerFilter({
  name: 'test-slo-unmeetable-on-retry',
  help: 'notes the decode leg unmeetable when one candidate is left, keeping it',
  params: [],
  consumes: {},
  create: () => ({
    name: 'test-slo-unmeetable-on-retry',
    filter: (candidates, _load, input) => {
      if (input?.serviceLevels !== undefined && candidates.length === 1) input.noteUnmeetable('decode');
      return candidates;
    },
  }),
});

const TENANTS = `
tenants:
  - name: batch
    keys: [sk-batch-0000001]
    priority: -1
  - name: chat
    keys: [sk-chat-00000001]
    priority: 5
    slo: { ttftMs: 2000, itlMs: 100 }
default:
  slo: { itlMs: 80 }
`;

const harness = proxyHarness();

function tenantsFile(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-slo-')), 'tenants.yaml');
  writeFileSync(file, TENANTS);
  return file;
}

async function setup() {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-slo-')), 'tenants.yaml');
  writeFileSync(file, TENANTS);
  seen.length = 0;
  const fleet = await harness.setup(
    'vllm',
    {},
    {
      tenantsFile: file,
      prefillPolicy: 'scored',
      decodePolicy: 'scored',
      routing: { filters: [{ name: 'test-slo-unmeetable' }] },
    },
  );
  const ask = (headers: Record<string, string>, body: Record<string, unknown> = {}) =>
    request(`${fleet.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'fake-model', prompt: 'Say hello', max_tokens: 2, ...body }),
    }).then(async (answer) => ({
      status: answer.statusCode,
      retryAfter: answer.headers['retry-after'],
      body: (await answer.body.json()) as { error?: { message: string; type: string; code: unknown } },
    }));
  const metrics = async () => (await (await request(`${fleet.url}/metrics`)).body.text()).split('\n');
  const workersCalled = () => fleet.prefill.requests.length + fleet.decode.requests.length;
  const leases = () => [
    fleet.proxy.prefillWorkers.inFlight(fleet.proxy.prefillWorkers.workers[0] as never),
    fleet.proxy.decodeWorkers.inFlight(fleet.proxy.decodeWorkers.workers[0] as never),
  ];
  return { ...fleet, ask, metrics, workersCalled, leases };
}

const batch = { authorization: 'Bearer sk-batch-0000001' };
const chat = { authorization: 'Bearer sk-chat-00000001' };
const requestLine = (logs: Array<{ fields: object; message: string | undefined }>) =>
  logs.filter((record) => record.message === 'request finished').at(-1)?.fields as Record<string, unknown>;

describe('service levels on requests, through disagg serve', () => {
  it("the plugins see the levels its headers name, ours over llm-d's, and its tenant's priority", async () => {
    const { ask } = await setup();
    expect(
      (await ask({ ...chat, 'x-slo-ttft-ms': '700', 'x-disagg-slo-ttft-ms': '300', 'x-slo-tpot-ms': '25' })).status,
    ).toBe(200);
    expect(seen).toEqual([
      { leg: 'prefill', levels: { ttftMs: 300, itlMs: 25 }, priority: 5 },
      { leg: 'decode', levels: { ttftMs: 300, itlMs: 25 }, priority: 5 },
    ]);
  });

  it("a tenant's default levels stand where the headers name none, and a header overrides its tenant's level", async () => {
    const { ask } = await setup();
    await ask(chat);
    await ask({ ...chat, 'x-disagg-slo-itl-ms': '40' });
    // The default tenant's own default.
    await ask({});
    expect(seen.filter((each) => each.leg === 'decode').map((each) => each.levels)).toEqual([
      { ttftMs: 2000, itlMs: 100 },
      { ttftMs: 2000, itlMs: 40 },
      { itlMs: 80 },
    ]);
  });

  it('a malformed level is a 400 naming its header, before any worker and before admission counts it', async () => {
    const { ask, workersCalled, metrics } = await setup();
    const answer = await ask({ ...batch, 'x-slo-tpot-ms': 'fast' });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatchObject({
      type: 'invalid_request_error',
      param: 'x-slo-tpot-ms',
      message: 'x-slo-tpot-ms must be a positive number of milliseconds, got "fast"',
    });
    expect(workersCalled()).toBe(0);
    expect(seen).toEqual([]);
    expect((await metrics()).filter((line) => line.startsWith('disagg_tenant_requests_total{'))).toEqual([]);
  });

  it('a sheddable request whose legs no worker is predicted to meet: a 429 with Retry-After before any worker, its leases given back, counted as refused slo', async () => {
    const { ask, workersCalled, leases, metrics, logs } = await setup();
    const answer = await ask({ ...batch, 'x-slo-ttft-ms': '2500', 'x-slo-tpot-ms': '20' });
    expect(answer.status).toBe(429);
    expect(answer.retryAfter).toBe('3');
    expect(answer.body.error).toMatchObject({ type: 'rate_limit_exceeded', code: 429 });
    expect(answer.body.error?.message).toBe(
      "No prefill or decode worker is predicted to meet this request's TTFT target of 2500 ms and ITL target of 20 ms; being sheddable (priority -1), it is refused rather than served late; try again in 3 s",
    );
    expect(workersCalled()).toBe(0);
    expect(leases()).toEqual([0, 0]);
    const lines = await metrics();
    expect(lines).toContain('disagg_tenant_requests_total{tenant="batch",outcome="slo"} 1');
    expect(lines.filter((line) => line.includes('decision="refused"'))).toEqual([
      'disagg_decisions_total{pool="default",decision="refused",reason="slo"} 1',
    ]);
    // Its admission slot is given back with the request: the same tenant's next one goes in.
    expect(lines).toContain('disagg_admitted_requests 0');
    expect(requestLine(logs)).toMatchObject({ tenant: 'batch', status: 429 });
    expect(requestLine(logs)).not.toHaveProperty('sloBestEffort');
    expect((await ask(batch)).status).toBe(200);
  });

  it('the openai client sees the shed request as its RateLimitError, with Retry-After', async () => {
    const { client } = await setup();
    const failure = await client.completions
      .create(
        { model: 'fake-model', prompt: 'Say hello', max_tokens: 2 },
        { headers: { authorization: 'Bearer sk-batch-0000001', 'x-disagg-slo-ttft-ms': '500' } },
      )
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(OpenAI.RateLimitError);
    expect((failure as InstanceType<typeof OpenAI.RateLimitError>).headers.get('retry-after')).toBe('1');
  });

  it('a request of priority 0 or more whose legs are unmeetable is served, best effort, and its log line says so', async () => {
    const { ask, logs, workersCalled } = await setup();
    expect((await ask({ ...chat, 'x-slo-ttft-ms': '1' })).status).toBe(200);
    expect(workersCalled()).toBe(2);
    expect(requestLine(logs)).toMatchObject({ tenant: 'chat', status: 200, sloBestEffort: ['prefill', 'decode'] });
    expect((await ask({ 'x-slo-ttft-ms': '1' })).status).toBe(200);
    expect(requestLine(logs)).toMatchObject({ tenant: 'default', sloBestEffort: ['prefill', 'decode'] });
  });

  it('a sheddable request without service levels, which no filter finds unmeetable, is served', async () => {
    const { ask, logs } = await setup();
    expect((await ask(batch)).status).toBe(200);
    expect(requestLine(logs)).not.toHaveProperty('sloBestEffort');
  });
});

describe('service levels on a passthrough request (embeddings)', () => {
  it('a sheddable one is shed at its first decision only: a retry, after a worker was called, is served best effort', async () => {
    seen.length = 0;
    const { url, decode, logs } = await harness.cluster(
      'vllm',
      { prefill: [{}], decode: [{}, {}] },
      {
        tenantsFile: tenantsFile(),
        decodePolicy: 'scored',
        routing: { filters: [{ name: 'test-slo-unmeetable-on-retry' }] },
      },
    );
    const embed = (headers: Record<string, string>) =>
      request(`${url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...batch, ...headers },
        body: JSON.stringify({ model: 'fake-model', input: 'x' }),
      }).then(async (answer) => ({ status: answer.statusCode, text: await answer.body.text() }));
    // Two workers: the first decision has both, so it is met; it picks the first (the scores
    // tie), which cannot be reached; the retry has one candidate left, found unmeetable.
    await decode[0]?.close();
    const answer = await embed({ 'x-slo-ttft-ms': '100' });
    expect(logs.some((log) => log.message?.startsWith('Retrying the request on another worker'))).toBe(true);
    expect(answer.status).toBe(200);
    expect(decode[1]?.requests.map((each) => each.path)).toEqual(['/v1/embeddings']);
    expect(requestLine(logs)).toMatchObject({ tenant: 'batch', sloBestEffort: ['decode'] });
  });
});

describe('the Retry-After of a shed request', () => {
  it('is its TTFT target rounded up to whole seconds, between 1 and 10; 1 without a TTFT target', () => {
    expect(sloRetryAfterS({ ttftMs: 2500 })).toBe(3);
    expect(sloRetryAfterS({ ttftMs: 200 })).toBe(1);
    expect(sloRetryAfterS({ ttftMs: 2000 })).toBe(2);
    expect(sloRetryAfterS({ ttftMs: 60_000 })).toBe(10);
    expect(sloRetryAfterS({ itlMs: 50 })).toBe(1);
    expect(sloRetryAfterS(undefined)).toBe(1);
  });
});
