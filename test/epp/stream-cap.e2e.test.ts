// The cap on open ext_proc streams (`--max-ext-proc-streams`) through a scripted Envoy, over
// fake vLLM pods: what a gateway sees past it, and that every way a stream ends gives its slot back.
import { connect, constants } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type EndpointPickerServer, startEndpointPicker } from '../../src/epp/epp-server.js';
import { recordingLogger } from '../support/async.js';
import {
  type ExtProcCall,
  envoyStandIn,
  lbDestination,
  requestBody,
  requestHeaders,
  throughGateway,
} from '../support/envoy-stand-in.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

async function picker(maxExtProcStreams: number) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
  const logger = recordingLogger();
  const epp = await startEndpointPicker(
    {
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      logger: logger.logger,
      maxExtProcStreams,
    },
    { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
  );
  const envoy = envoyStandIn(epp.ports.extProc);
  cleanups.push(
    () => epp.close({ drainDelayMs: 0, gracePeriodMs: 0 }),
    () => envoy.close(),
  );
  return { epp, envoy, logs: logger.records };
}

const completion = JSON.stringify({ model: 'fake-model', prompt: 'Say hello', max_tokens: 4 });

async function metric(epp: EndpointPickerServer, name: string): Promise<number | undefined> {
  const text = await (await request(`http://127.0.0.1:${epp.ports.metrics}/metrics`)).body.text();
  const line = text.split('\n').find((each) => each.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

const streamsOpen = (epp: EndpointPickerServer, count: number) =>
  eventuallyAsync(async () => (await metric(epp, 'disagg_epp_streams')) === count, `${count} stream(s) open`);

/** A stream that has sent its headers and is reading its body: it holds a slot until it ends. */
function waiting(envoy: ReturnType<typeof envoyStandIn>): ExtProcCall {
  const call = envoy.open();
  call.send(requestHeaders('/v1/completions'));
  return call;
}

/** Ends a waiting stream's body; resolves with the decode pod the picker named. */
async function picked(call: ExtProcCall): Promise<string | undefined> {
  call.send(requestBody(completion, true));
  return lbDestination(await call.next());
}

describe('the cap on open ext_proc streams', () => {
  it('refuses a stream past --max-ext-proc-streams at once with RESOURCE_EXHAUSTED naming the setting, counted and logged; the streams open still get their pick', async () => {
    const { epp, envoy, logs } = await picker(3);
    const open = [waiting(envoy), waiting(envoy), waiting(envoy)];
    await streamsOpen(epp, 3);
    const refused = waiting(envoy);
    await expect(refused.next()).rejects.toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: expect.stringMatching(/has 3 ext_proc streams open, its limit \(--max-ext-proc-streams\)/),
    });
    expect(await metric(epp, 'disagg_epp_streams_refused_total')).toBe(1);
    expect(logs.filter((record) => /ext_proc stream was refused/.test(String(record.message)))).toEqual([
      { level: 'warn', fields: { open: 3 }, message: expect.stringMatching(/--max-ext-proc-streams/) },
    ]);
    for (const call of open) expect(await picked(call)).toBeDefined();
    for (const call of open) call.cancel();
  });

  it('gives a slot back however its stream ends (answered, cancelled, reset, its connection cut), and never twice', async () => {
    const { epp, envoy } = await picker(2);
    // Answered: the whole request through the gateway, the stream half-closed at its end.
    for (let i = 0; i < 3; i++) expect((await throughGateway(envoy, '/v1/completions', completion)).status).toBe(200);
    await streamsOpen(epp, 0);
    // Cancelled by Envoy (the client left) while reading the body, and after the pick.
    const cancelled = [waiting(envoy), waiting(envoy)];
    await picked(cancelled[1] as ExtProcCall);
    for (const call of cancelled) call.cancel();
    await streamsOpen(epp, 0);
    // A bare HTTP/2 client: one stream reset (RST_STREAM), then a connection cut with one open.
    const session = connect(`http://127.0.0.1:${epp.ports.extProc}`);
    const bare = () =>
      session.request({
        ':method': 'POST',
        ':path': '/envoy.service.ext_proc.v3.ExternalProcessor/Process',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
    const reset = bare();
    bare();
    await streamsOpen(epp, 2);
    reset.close(constants.NGHTTP2_CANCEL);
    await streamsOpen(epp, 1);
    session.destroy();
    await streamsOpen(epp, 0);
    // Both slots free, and no more than both: two streams get their pick, a third is refused.
    const again = [waiting(envoy), waiting(envoy)];
    await streamsOpen(epp, 2);
    await expect(waiting(envoy).next()).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    for (const call of again) expect(await picked(call)).toBeDefined();
    for (const call of again) call.cancel();
  });
});
