// The proxy (`disagg serve`) and the endpoint picker (`disagg epp`) run one request pipeline:
// given the same settings and the same request, they refuse it alike (status, words, headers,
// metrics), and both send a rewritten model on. Each case goes through both hosts.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { startEndpointPicker } from '../../../src/epp/epp-server.js';
import { registerFilter } from '../../../src/routing/plugin-registration.js';
import type { Stage } from '../../../src/server/pipeline/stage.js';
import { createProxy, type ProxyOptions } from '../../../src/server/proxy.js';
import type { FakeWorker } from '../../../src/testing/index.js';
import { recordingLogger } from '../../support/async.js';
import { envoyStandIn, requestBody, requestHeaders, setHeader } from '../../support/envoy-stand-in.js';
import { eventuallyAsync, fakeWorkers } from '../../support/http.js';

const fakes = fakeWorkers();

// A stand-in for an SLO-aware filter whose predictor finds no worker meeting a request's service
// levels: it notes the leg unmeetable and keeps every worker.
registerFilter({
  name: 'parity-slo-unmeetable',
  help: 'notes every leg of a request with service levels unmeetable, keeping every worker',
  params: [],
  consumes: {},
  create: () => ({
    name: 'parity-slo-unmeetable',
    filter: (candidates, _load, input) => {
      if (input?.serviceLevels !== undefined) input.noteUnmeetable(input.picked.has('prefill') ? 'decode' : 'prefill');
      return candidates;
    },
  }),
});
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

/** Envoy's names of the HTTP statuses the refusals use. */
const STATUS: Record<string, number> = {
  BadRequest: 400,
  NotFound: 404,
  PayloadTooLarge: 413,
  TooManyRequests: 429,
  ServiceUnavailable: 503,
};

interface Answer {
  status: number;
  body: unknown;
  /** The headers both hosts promise a refusal: its request id is there, and its Retry-After's value. */
  headers: { 'x-request-id': boolean; 'retry-after': string | undefined };
}

/** The refusal and decision counters of a /metrics text, without comments. */
const refusalsIn = (text: string) =>
  text
    .split('\n')
    .filter((line) => /^disagg_(decisions_total\{.*decision="refused"|tenant_requests_total\{)/.test(line))
    .sort();

/**
 * One prefill and one decode fake (the decode slow for a prompt of 'hold'), a proxy and a picker
 * given the same options over them, and one way to send each the same request.
 */
async function bothHosts(options: (workers: { prefill: FakeWorker; decode: FakeWorker }) => Partial<ProxyOptions>) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({
    role: 'decode',
    protocol: 'vllm',
    tokens: 2,
    fault: (record) => (record.body.prompt === 'hold' ? { type: 'slow', tokenIntervalMs: 60_000 } : undefined),
  });
  const settings: ProxyOptions = {
    connector: 'vllm',
    prefill: [{ url: prefill.url }],
    decode: [{ url: decode.url }],
    logger: recordingLogger().logger,
    ...options({ prefill, decode }),
  } as ProxyOptions;
  const proxy = createProxy({ ...settings, logger: recordingLogger().logger });
  const url = await proxy.listen(0, '127.0.0.1');
  const epp = await startEndpointPicker(
    { ...settings, logger: recordingLogger().logger },
    { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
  );
  const envoy = envoyStandIn(epp.ports.extProc);
  const calls: Array<{ cancel(): void }> = [];
  cleanups.push(
    () => proxy.close({ drainDelayMs: 0, gracePeriodMs: 0 }),
    () => {
      for (const call of calls) call.cancel();
      return epp.close({ drainDelayMs: 0, gracePeriodMs: 0 });
    },
    () => envoy.close(),
  );
  const viaProxy = async (path: string, body: string, headers: Record<string, string> = {}): Promise<Answer> => {
    const answer = await request(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
    });
    const retryAfter = answer.headers['retry-after'];
    return {
      status: answer.statusCode,
      body: await answer.body.json(),
      headers: {
        'x-request-id': typeof answer.headers['x-request-id'] === 'string',
        'retry-after': typeof retryAfter === 'string' ? retryAfter : undefined,
      },
    };
  };
  /** The picker's answer: its refusal, or the request's headers and body as the pod gets them (the stream left open). */
  const viaPicker = async (path: string, body: string, headers: Record<string, string> = {}) => {
    const call = envoy.open();
    calls.push(call);
    call.send(requestHeaders(path, headers));
    call.send(requestBody(body, true));
    const first = await call.next();
    const refused = first.immediate_response;
    if (refused === undefined) {
      const sent = (await call.next()).request_body.response.body_mutation.streamed_response;
      const text = Buffer.from(sent.body ?? []).toString();
      return { routed: JSON.parse(text) as Record<string, unknown>, text };
    }
    const answer: Answer = {
      status: STATUS[refused.status.code] ?? Number(refused.status.code),
      body: JSON.parse(Buffer.from(refused.body).toString()),
      headers: {
        'x-request-id': setHeader(refused.headers, 'x-request-id') !== undefined,
        'retry-after': setHeader(refused.headers, 'retry-after'),
      },
    };
    return { refused: answer };
  };
  const metrics = async () => ({
    proxy: refusalsIn(await (await request(`${url}/metrics`)).body.text()),
    picker: refusalsIn(await (await request(`http://127.0.0.1:${epp.ports.metrics}/metrics`)).body.text()),
  });
  return { proxy, epp, decode, viaProxy, viaPicker, metrics };
}

/** Sends the same request to both hosts and expects the same refusal and the same counters. */
async function refusedAlike(
  hosts: Awaited<ReturnType<typeof bothHosts>>,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const fromProxy = await hosts.viaProxy(path, body, headers);
  const fromPicker = await hosts.viaPicker(path, body, headers);
  expect(fromPicker.refused).toEqual(fromProxy);
  const metrics = await hosts.metrics();
  expect(metrics.picker).toEqual(metrics.proxy);
  return fromProxy;
}

const completion = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'fake-model', prompt: 'Say hello', max_tokens: 2, ...extra });

describe('disagg serve and disagg epp refuse a request alike', () => {
  it("a bad body: the same 400 naming the field, in the API's own shape", async () => {
    const hosts = await bothHosts(() => ({}));
    const chat = await refusedAlike(hosts, '/v1/chat/completions', '{"model":"fake-model","messages":7}');
    expect(chat.status).toBe(400);
    expect(chat.body).toMatchObject({ error: { param: 'messages' } });
    const messages = await refusedAlike(hosts, '/v1/messages', 'not json');
    expect(messages).toMatchObject({ status: 400, body: { type: 'error', error: { type: 'invalid_request_error' } } });
  });

  it('a model no pool serves: the same 404 model_not_found naming the models served', async () => {
    const hosts = await bothHosts(({ prefill, decode }) => ({
      prefill: [],
      decode: [],
      pools: [{ model: 'fake-model', prefill: [prefill.url], decode: [decode.url] }],
    }));
    const answer = await refusedAlike(hosts, '/v1/completions', completion({ model: 'other' }));
    expect(answer).toMatchObject({
      status: 404,
      body: {
        error: { code: 'model_not_found', message: "The model 'other' does not exist: this router serves fake-model" },
      },
    });
  });

  it('a tenant over its limit: the same 429 saying which limit and how much of it is used, with Retry-After, counted alike', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-parity-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - name: batch\n    keys: [sk-batch-0000001]\n    requestsPerMinute: 1\n');
    const hosts = await bothHosts(() => ({ tenantsFile: file }));
    const key = { authorization: 'Bearer sk-batch-0000001' };
    expect((await hosts.viaProxy('/v1/completions', completion(), key)).status).toBe(200);
    expect((await hosts.viaPicker('/v1/completions', completion(), key)).routed).toBeDefined();
    const fromProxy = await hosts.viaProxy('/v1/completions', completion(), key);
    const fromPicker = (await hosts.viaPicker('/v1/completions', completion(), key)).refused;
    // The seconds to wait are each host's own minute window: equal to within the second between the two calls.
    const same = (answer: Answer | undefined) =>
      JSON.parse(
        JSON.stringify(answer)
          .replace(/try again in \d+ s/, 'try again in N s')
          .replace(/"retry-after":"\d+"/, '"retry-after":"N"'),
      );
    expect(same(fromPicker)).toEqual(same(fromProxy));
    expect(fromProxy.status).toBe(429);
    expect(JSON.stringify(fromProxy.body)).toMatch(/over its limit of 1 requests per minute \(1 in the last minute\)/);
    expect(Number(fromProxy.headers['retry-after'])).toBeGreaterThan(0);
    const metrics = await hosts.metrics();
    expect(metrics.picker).toEqual(metrics.proxy);
    expect(metrics.proxy).toContain('disagg_tenant_requests_total{tenant="batch",outcome="requests_per_minute"} 1');
  });

  it('admission full: the same 429 from either host while its one slot is held', async () => {
    const hosts = await bothHosts(() => ({ maxConcurrentRequests: 1, queueSize: 0 }));
    // The proxy's slot held by a request its decode worker answers slowly; the picker's by a routed request not yet answered.
    const held = hosts.viaProxy('/v1/completions', completion({ prompt: 'hold' }));
    void held.catch(() => {});
    await eventuallyAsync(
      async () => hosts.decode.requests.some((record) => record.body.prompt === 'hold'),
      'the proxy slot held',
    );
    expect((await hosts.viaPicker('/v1/completions', completion({ prompt: 'hold' }))).routed).toBeDefined();
    const answer = await refusedAlike(hosts, '/v1/completions', completion());
    expect(answer.status).toBe(429);
    expect(answer.headers['retry-after']).toBeDefined();
  });

  it('a sheddable request no worker is predicted to meet the service levels of: the same 429 with Retry-After, no worker called, counted alike', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-parity-')), 'tenants.yaml');
    writeFileSync(file, 'tenants:\n  - name: batch\n    keys: [sk-batch-0000001]\n    priority: -1\n');
    const hosts = await bothHosts(() => ({
      tenantsFile: file,
      prefillPolicy: 'scored',
      decodePolicy: 'scored',
      routing: { filters: [{ name: 'parity-slo-unmeetable' }] },
    }));
    const headers = { authorization: 'Bearer sk-batch-0000001', 'x-slo-ttft-ms': '1500' };
    const answer = await refusedAlike(hosts, '/v1/completions', completion(), headers);
    expect(answer).toMatchObject({ status: 429, headers: { 'retry-after': '2' } });
    expect(JSON.stringify(answer.body)).toMatch(
      /No prefill or decode worker is predicted to meet this request's TTFT target of 1500 ms/,
    );
    expect(hosts.decode.requests).toEqual([]);
    expect((await hosts.metrics()).picker).toContain('disagg_tenant_requests_total{tenant="batch",outcome="slo"} 1');
    // Every lease given back: no pod holds the request.
    const pool = hosts.epp.core.pools.all()[0];
    const held = [...hosts.epp.core.pools.workers('prefill'), ...hosts.epp.core.pools.workers('decode')].map(
      (worker) => (pool?.prefill.inFlight(worker as never) ?? 0) + (pool?.decode.inFlight(worker as never) ?? 0),
    );
    expect(held).toEqual([0, 0]);
    // Its malformed level is the same 400 from either host.
    const malformed = await refusedAlike(hosts, '/v1/completions', completion(), { 'x-disagg-slo-itl-ms': '-1' });
    expect(malformed).toMatchObject({ status: 400, body: { error: { param: 'x-disagg-slo-itl-ms' } } });
  });

  it('no decode worker in rotation: the same 503 naming the pool, counted as refused for no worker', async () => {
    const hosts = await bothHosts(() => ({}));
    for (const decode of [hosts.proxy.decodeWorkers, hosts.epp.core.pools.all()[0]?.decode]) {
      decode?.setAvailable(decode.workers[0] as { url: string }, false);
    }
    const answer = await refusedAlike(hosts, '/v1/completions', completion());
    expect(answer.status).toBe(503);
    expect(JSON.stringify(answer.body)).toMatch(/decode/);
    expect((await hosts.metrics()).proxy.some((line) => line.includes('reason="no-worker"'))).toBe(true);
  });
});

describe('a stage of your own runs alike in disagg serve and disagg epp', () => {
  it('refuses alike, and its after hook runs once the request is over in either host', async () => {
    const hosts = await bothHosts(() => ({}));
    const over: string[] = [];
    const stage: Stage = {
      name: 'teams',
      run: (request) =>
        request.headers['x-team'] === undefined
          ? {
              refused: {
                status: 400,
                body: { error: { message: 'Name your team', type: 'invalid_request_error', param: null, code: null } },
              },
            }
          : { after: (done) => over.push(`${done.endpoint.name} ${done.model.served}`) },
    };
    hosts.proxy.addStage(stage);
    hosts.epp.addStage(stage);
    expect(() => hosts.proxy.addStage(stage)).toThrow(/named teams was added already/);
    const answer = await refusedAlike(hosts, '/v1/completions', completion());
    expect(answer).toMatchObject({ status: 400, body: { error: { message: 'Name your team' } } });
    expect((await hosts.viaProxy('/v1/completions', completion(), { 'x-team': 'a' })).status).toBe(200);
    expect(over).toEqual(['completions fake-model']);
  });
});

describe('disagg serve and disagg epp apply model rewrites alike', () => {
  it("both send a rewritten request on with the rule's target as its model", async () => {
    const hosts = await bothHosts(({ prefill, decode }) => ({
      prefill: [],
      decode: [],
      pools: [{ model: 'chat-v2', prefill: [prefill.url], decode: [decode.url] }],
      rewrites: [{ model: 'chat', targets: [{ model: 'chat-v2', weight: 1 }] }],
    }));
    expect((await hosts.viaProxy('/v1/completions', completion({ model: 'chat' }))).status).toBe(200);
    expect(hosts.decode.requests.at(-1)?.body.model).toBe('chat-v2');
    // A seed past 2^53: the picker's body is the client's with only its model changed (GIE's
    // InferenceModelRewrite), its integers exact.
    const body = '{"model":"chat","prompt":"Say hello","max_tokens":2,"seed":12345678901234567}';
    const picked = await hosts.viaPicker('/v1/completions', body);
    expect(picked.text).toBe(body.replace('"chat"', '"chat-v2"'));
  });
});

describe("a Responses turn that needs state: where each host's pipeline parts", () => {
  it('the picker, which never reads an answer, refuses previous_response_id, conversation, store: true and background with a 400 naming the field; the proxy keeps that state itself', async () => {
    const hosts = await bothHosts(() => ({}));
    const turn = (extra: Record<string, unknown>) =>
      JSON.stringify({ model: 'fake-model', input: 'Hi', max_output_tokens: 2, ...extra });
    for (const [field, value] of [
      ['previous_response_id', 'resp_1'],
      ['conversation', 'conv_1'],
      ['store', true],
      ['background', true],
    ] as const) {
      const picked = await hosts.viaPicker('/v1/responses', turn({ [field]: value }));
      expect(picked.refused).toMatchObject({ status: 400, body: { error: { param: field } } });
    }
    // Stateless, the picker routes it; the proxy stores it and reads it back.
    expect((await hosts.viaPicker('/v1/responses', turn({ store: false }))).routed).toBeDefined();
    const stored = await hosts.viaProxy('/v1/responses', turn({ store: true }));
    expect(stored.status).toBe(200);
    expect(stored.body).toMatchObject({ store: true, object: 'response' });
    expect(hosts.decode.requests.at(-1)?.body.store).toBe(false);
  });
});
