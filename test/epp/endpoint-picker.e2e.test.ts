// The endpoint picker through a scripted Envoy (what Envoy 1.33 sends in FULL_DUPLEX_STREAMED
// mode, in its order), over fake vLLM pods: what a gateway and its operator see.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type EndpointPickerServer, startEndpointPicker } from '../../src/epp/epp-server.js';
import type { ProxyOptions } from '../../src/server/proxy.js';
import type { FakeWorker } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import {
  envoyStandIn,
  lbDestination,
  type Message,
  requestBody,
  requestHeaders,
  responseBody,
  responseHeaders,
  setHeader,
} from '../support/envoy-stand-in.js';
import { eventually, eventuallyAsync, fakeWorkers } from '../support/http.js';
import { kubeConfigFor, startKubernetesApi } from '../support/kubernetes-api.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

const hostOf = (worker: FakeWorker | string) => new URL(typeof worker === 'string' ? worker : worker.url).host;

async function picker(options: { prefillPods?: number; decodePods?: number } & Partial<ProxyOptions> = {}) {
  const { prefillPods: prefillCount = 1, decodePods: decodeCount = 2, ...rest } = options;
  const prefill = await Promise.all(
    Array.from({ length: prefillCount }, () => fakes.start({ role: 'prefill', protocol: 'vllm' })),
  );
  const decode = await Promise.all(
    Array.from({ length: decodeCount }, () => fakes.start({ role: 'decode', protocol: 'vllm' })),
  );
  const logger = recordingLogger();
  const epp = await startEndpointPicker(
    {
      connector: 'vllm',
      prefill: prefill.map((worker) => ({ url: worker.url })),
      decode: decode.map((worker) => ({ url: worker.url })),
      selection: 'round-robin',
      logger: logger.logger,
      ...rest,
    },
    { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
  );
  const envoy = envoyStandIn(epp.ports.extProc);
  cleanups.push(
    () => epp.close({ drainDelayMs: 0, gracePeriodMs: 0 }),
    () => envoy.close(),
  );
  return { epp, envoy, prefill, decode, logs: logger.records };
}

const completion = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'fake-model', prompt: 'Say hello', max_tokens: 4, ...extra });

const inFlight = (epp: EndpointPickerServer, role: 'prefill' | 'decode'): number[] => {
  const pool = epp.core.pools.all()[0];
  return role === 'prefill'
    ? epp.core.pools.workers('prefill').map((worker) => pool?.prefill.inFlight(worker) ?? 0)
    : epp.core.pools.workers('decode').map((worker) => pool?.decode.inFlight(worker) ?? 0);
};

const metric = async (epp: EndpointPickerServer, name: string) =>
  (await (await request(`http://127.0.0.1:${epp.ports.metrics}/metrics`)).body.text())
    .split('\n')
    .filter((line) => line.startsWith(name));

describe('disagg epp through a scripted Envoy', () => {
  it('streams a 200 KB body back whole and in order, in chunks of at most 62,000 bytes, after the headers that name the pods', async () => {
    const { envoy, prefill, decode } = await picker();
    const prompt = Array.from({ length: 20_000 }, (_, i) => `w${i}`)
      .join(' ')
      .padEnd(200_000, '.');
    const body = Buffer.from(completion({ prompt }));
    expect(body.length).toBeGreaterThan(200_000);
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    // Envoy sends the chunks without waiting for answers.
    for (let at = 0; at < body.length; at += 16_384)
      call.send(requestBody(body.subarray(at, at + 16_384), at + 16_384 >= body.length));
    const headers = await call.next();
    const common = headers.request_headers.response;
    expect(common.clear_route_cache).toBe(true);
    const destination = setHeader(common.header_mutation, 'x-gateway-destination-endpoint');
    // The header and the metadata name one pod, a decode pod; the prefill pod is a ready one.
    expect(lbDestination(headers)).toBe(destination);
    expect(decode.map(hostOf)).toContain(destination);
    expect(setHeader(common.header_mutation, 'x-prefiller-host-port')).toBe(hostOf(prefill[0] as FakeWorker));
    expect(setHeader(common.header_mutation, 'content-length')).toBe(String(body.length));
    let echoed = Buffer.alloc(0);
    let chunks = 0;
    for (;;) {
      const streamed = (await call.next()).request_body.response.body_mutation.streamed_response;
      const piece = Buffer.from(streamed.body ?? []);
      expect(piece.length).toBeLessThanOrEqual(62_000);
      echoed = Buffer.concat([echoed, piece]);
      chunks++;
      if (streamed.end_of_stream === true) break;
    }
    expect(chunks).toBe(Math.ceil(body.length / 62_000));
    expect(echoed.equals(body)).toBe(true);
    call.cancel();
    await call.closed;
  });

  it('honours the subset hint, as a list or a string; none of it in rotation is a 503 that says why', async () => {
    const { envoy, decode } = await picker();
    for (const subset of [[hostOf(decode[1] as FakeWorker)], `${hostOf(decode[1] as FakeWorker)}`]) {
      for (let i = 0; i < 2; i++) {
        const call = envoy.open();
        call.send(requestHeaders('/v1/completions', {}, { subset }));
        call.send(requestBody(completion(), true));
        const answer = await call.next();
        expect(setHeader(answer.request_headers.response.header_mutation, 'x-gateway-destination-endpoint')).toBe(
          hostOf(decode[1] as FakeWorker),
        );
        call.cancel();
        await call.closed;
      }
    }
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions', {}, { subset: ['10.9.9.9:8000'] }));
    call.send(requestBody(completion(), true));
    const refused = (await call.next()).immediate_response;
    expect(refused.status.code).toBe('ServiceUnavailable');
    expect(setHeader(refused.headers, 'x-llm-d-request-dropped-reason')).toBe('rejected-no-endpoints');
    expect(JSON.parse(Buffer.from(refused.body).toString()).error.message).toMatch(/None of the gateway's 1 endpoint/);
    call.cancel();
  });

  it('moves the in-flight count to the pod Envoy says served, and gives every lease back when the answer ends', async () => {
    const { epp, envoy, decode } = await picker({ routing: { aggregateBelowChars: 1_000_000 } });
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    call.send(requestBody(completion(), true));
    const picked = setHeader(
      (await call.next()).request_headers.response.header_mutation,
      'x-gateway-destination-endpoint',
    );
    await call.next();
    const other = decode.map(hostOf).find((host) => host !== picked) as string;
    const index = (host: string) => decode.map(hostOf).indexOf(host);
    expect(inFlight(epp, 'decode')[index(picked as string)]).toBe(1);
    call.send(responseHeaders(200, other));
    expect((await call.next()).response_headers).toBeDefined();
    expect(inFlight(epp, 'decode')[index(picked as string)]).toBe(0);
    expect(inFlight(epp, 'decode')[index(other)]).toBe(1);
    call.send(responseBody('{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}', true));
    const echoed = (await call.next()).response_body.response.body_mutation.streamed_response;
    expect(Buffer.from(echoed.body).toString()).toMatch(/"usage"/);
    expect(echoed.end_of_stream).toBe(true);
    expect(inFlight(epp, 'decode')).toEqual([0, 0]);
    expect(await metric(epp, 'disagg_epp_served_elsewhere_total')).toEqual(['disagg_epp_served_elsewhere_total 1']);
    call.end();
    await call.closed;
  });

  it("routes by the request's headers as the proxy does: one session's requests on one prefill pod", async () => {
    const { envoy, prefill } = await picker({ prefillPods: 3, prefillPolicy: 'session' });
    const prefillerOf = async (session: string) => {
      const call = envoy.open();
      call.send(requestHeaders('/v1/completions', { 'x-session-id': session }));
      call.send(requestBody(completion(), true));
      const chosen = setHeader((await call.next()).request_headers.response.header_mutation, 'x-prefiller-host-port');
      call.cancel();
      await call.closed;
      return chosen;
    };
    const first = await prefillerOf('conversation-a');
    for (let i = 0; i < 3; i++) expect(await prefillerOf('conversation-a')).toBe(first);
    const others = new Set<string | undefined>();
    for (let i = 0; i < 12; i++) others.add(await prefillerOf(`conversation-${i}`));
    expect(others.size).toBeGreaterThan(1);
    expect([...others].every((host) => prefill.map(hostOf).includes(host as string))).toBe(true);
  });

  it('gives the leases back when Envoy gives a stream up midway', async () => {
    const { epp, envoy } = await picker();
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    call.send(requestBody(completion(), true));
    await call.next();
    expect(inFlight(epp, 'prefill')).toEqual([1]);
    call.cancel();
    await call.closed;
    await eventually(
      () => inFlight(epp, 'prefill')[0] === 0 && inFlight(epp, 'decode').every((n) => n === 0),
      'leases given back',
    );
    await eventuallyAsync(
      async () => (await metric(epp, 'disagg_epp_streams '))[0] === 'disagg_epp_streams 0',
      'no stream open',
    );
  });

  it('sheds past admission with an immediate 429 that says why, before any pod', async () => {
    const { epp, envoy } = await picker({ maxConcurrentRequests: 1, queueSize: 0 });
    const first = envoy.open();
    first.send(requestHeaders('/v1/completions'));
    first.send(requestBody(completion(), true));
    expect((await first.next()).request_headers).toBeDefined();
    const second = envoy.open();
    second.send(requestHeaders('/v1/completions'));
    second.send(requestBody(completion(), true));
    const refused = (await second.next()).immediate_response;
    expect(refused.status.code).toBe('TooManyRequests');
    expect(setHeader(refused.headers, 'x-llm-d-request-dropped-reason')).toBe('rejected-saturated');
    expect(await metric(epp, 'disagg_epp_picks_total{')).toEqual([
      'disagg_epp_picks_total{result="disaggregated"} 1',
      'disagg_epp_picks_total{result="refused_429"} 1',
    ]);
    first.cancel();
    second.cancel();
  });

  it('refuses preempt: it only picks, and has no request under way of its own to end', async () => {
    await expect(
      startEndpointPicker(
        {
          connector: 'vllm',
          prefill: [{ url: 'http://127.0.0.1:9' }],
          decode: [{ url: 'http://127.0.0.1:9' }],
          preempt: true,
        },
        { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
      ),
    ).rejects.toMatchObject({
      code: 'DISAGG_CONFIG',
      message: expect.stringMatching(
        /^--preempt \(preempt\) is disagg serve's: an endpoint picker only picks the pods/,
      ),
    });
  });

  it("refuses a bad body with a 400 in the API's own shape (Anthropic's for Messages), and removes P/D headers a client sent", async () => {
    const { envoy } = await picker({ routing: { aggregateBelowChars: 1_000_000 } });
    const call = envoy.open();
    call.send(requestHeaders('/v1/chat/completions'));
    call.send(requestBody('{"model": "fake-model", "messages": 7}', true));
    const refused = (await call.next()).immediate_response;
    expect(refused.status.code).toBe('BadRequest');
    expect(JSON.parse(Buffer.from(refused.body).toString()).error.param).toBe('messages');
    call.cancel();
    const anthropic = envoy.open();
    anthropic.send(requestHeaders('/v1/messages'));
    anthropic.send(requestBody('not json', true));
    const shaped = JSON.parse(Buffer.from((await anthropic.next()).immediate_response.body).toString());
    expect(shaped).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    anthropic.cancel();
    // Aggregated (a short prompt): a client's x-prefiller-host-port must not reach the sidecar.
    const injected = envoy.open();
    injected.send(requestHeaders('/v1/completions', { 'x-prefiller-host-port': '169.254.169.254:80' }));
    injected.send(requestBody(completion(), true));
    const mutation = (await injected.next()).request_headers.response.header_mutation;
    expect(setHeader(mutation, 'x-prefiller-host-port')).toBeUndefined();
    expect(mutation.remove_headers).toContain('x-prefiller-host-port');
    injected.cancel();
  });

  it('answers a body past --max-body-bytes with a 413 as soon as it passes the limit, without waiting for its end or holding it', async () => {
    const { epp, envoy } = await picker({ maxBodyBytes: 1000 });
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    // Never ended: a sender that would hold the picker's memory for as long as it likes.
    for (let i = 0; i < 5; i++) call.send(requestBody('x'.repeat(1000), false));
    const refused = (await call.next()).immediate_response;
    expect(await metric(epp, 'disagg_epp_request_body_bytes ')).toEqual(['disagg_epp_request_body_bytes 0']);
    expect(refused.status.code).toBe('PayloadTooLarge');
    expect(JSON.parse(Buffer.from(refused.body).toString()).error.message).toMatch(/larger than 1000 bytes/);
    call.cancel();
  });

  it('answers a request without a body (headers that end the stream) with a decode pod at once', async () => {
    const { envoy, decode } = await picker();
    const call = envoy.open();
    call.send(requestHeaders('/v1/models', {}, { endOfStream: true, method: 'GET' }));
    const answer = await call.next();
    expect(decode.map(hostOf)).toContain(lbDestination(answer));
    call.cancel();
  });

  it('reports liveness, readiness and the ext_proc service over gRPC health, and not ready once draining', async () => {
    const { epp } = await picker();
    const healthProto = protoLoader.loadSync(
      new URL('../../node_modules/grpc-health-check/proto/health/v1/health.proto', import.meta.url).pathname,
      { keepCase: true, enums: String },
    );
    const Health = (grpc.loadPackageDefinition(healthProto) as Message).grpc.health.v1.Health;
    const health = new Health(`127.0.0.1:${epp.ports.health}`, grpc.credentials.createInsecure());
    cleanups.push(() => health.close());
    const check = (service: string) =>
      new Promise<string>((resolve) =>
        health.Check({ service }, (error: grpc.ServiceError | null, reply: { status: string }) =>
          resolve(error === null ? reply.status : `error ${error.code}`),
        ),
      );
    expect(
      await Promise.all(['liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor', ''].map(check)),
    ).toEqual(['SERVING', 'SERVING', 'SERVING', 'SERVING']);
    expect(await check('nonsense')).toBe(`error ${grpc.status.NOT_FOUND}`);
    // Envoy's cluster health check asks the ext_proc port itself.
    const onExtProc = new Health(`127.0.0.1:${epp.ports.extProc}`, grpc.credentials.createInsecure());
    cleanups.push(() => onExtProc.close());
    const extProcStatus = await new Promise<string>((resolve) =>
      onExtProc.Check(
        { service: 'envoy.service.ext_proc.v3.ExternalProcessor' },
        (error: grpc.ServiceError | null, reply: { status: string }) =>
          resolve(error === null ? reply.status : `error ${error.code}`),
      ),
    );
    expect(extProcStatus).toBe('SERVING');
    const closing = epp.close({ drainDelayMs: 200, gracePeriodMs: 0 });
    expect(await check('readiness')).toBe('NOT_SERVING');
    expect(await check('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('NOT_SERVING');
    expect(await check('liveness')).toBe('SERVING');
    await closing;
  });

  it("finds the decode pods as an InferencePool's, by its selector and target port", async () => {
    const api = await startKubernetesApi();
    cleanups.push(() => api.close());
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const port = Number(new URL(decode.url).port);
    api.applyInferencePool({
      name: 'vllm-decode',
      namespace: 'llm',
      matchLabels: { app: 'vllm', role: 'decode' },
      targetPorts: [port],
    });
    api.apply({ name: 'decode-0', namespace: 'llm', labels: { app: 'vllm', role: 'decode' }, ip: '127.0.0.1' });
    const { epp, envoy } = await picker({
      decodePods: 0,
      decode: [],
      discovery: { inferencePool: 'vllm-decode', namespace: 'llm' },
      kubeConfig: kubeConfigFor(api.url),
    });
    expect(epp.core.pools.workers('decode').map((worker) => worker.url)).toEqual([`http://127.0.0.1:${port}`]);
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    call.send(requestBody(completion(), true));
    expect(lbDestination(await call.next())).toBe(`127.0.0.1:${port}`);
    call.cancel();
  });

  it('is not ready, and answers 503, while no decode pod is in rotation', async () => {
    const { epp, envoy, decode } = await picker({ decodePods: 1 });
    epp.core.pools.all()[0]?.decode.setAvailable(epp.core.pools.workers('decode')[0] as never, false);
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    call.send(requestBody(completion(), true));
    const refused = (await call.next()).immediate_response;
    expect(refused.status.code).toBe('ServiceUnavailable');
    expect(setHeader(refused.headers, 'x-llm-d-request-dropped-reason')).toBe('rejected-no-endpoints');
    call.cancel();
    expect(decode[0]?.requests.filter((r) => r.path.startsWith('/v1/'))).toEqual([]);
  });

  it('says on its /metrics which release of disagg runs it (disagg_build_info, as the proxy does)', async () => {
    const { epp } = await picker();
    const { version } = JSON.parse(readFileSync(fileURLToPath(new URL('../../package.json', import.meta.url)), 'utf8'));
    expect(await metric(epp, 'disagg_build_info{')).toEqual([
      `disagg_build_info{version="${version}",node="${process.version}"} 1`,
    ]);
  });
});
