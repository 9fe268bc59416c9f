// What the endpoint picker holds for the streams a gateway opens, measured on the heap (with
// the Buffers' memory) after a full GC, the picker and a scripted Envoy in this process. The
// stand-in's channel keeps no copy of what it sent (gRPC's retry buffer would, up to 1 MB a
// call), so that what grows is the picker's.
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type EndpointPickerServer, startEndpointPicker } from '../../src/epp/epp-server.js';
import { recordingLogger } from '../support/async.js';
import { type ExtProcCall, envoyStandIn, requestBody, requestHeaders } from '../support/envoy-stand-in.js';
import { collectGarbage } from '../support/heap.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const MiB = 1024 * 1024;
const KiB = 1024;
const ONE_BYTE_CHUNKS = 200_000;
const STREAMS = 5_000;
const CAP = 1_000;

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

async function picker(options: { maxBodyBytes?: number; maxExtProcStreams?: number }) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
  const epp = await startEndpointPicker(
    {
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      logger: recordingLogger().logger,
      ...options,
    },
    { port: 0, healthPort: 0, metricsPort: 0, host: '127.0.0.1' },
  );
  const envoy = envoyStandIn(epp.ports.extProc, { 'grpc.enable_retries': 0, 'grpc.per_rpc_retry_buffer_size': 0 });
  cleanups.push(
    () => epp.close({ drainDelayMs: 0, gracePeriodMs: 0 }),
    () => envoy.close(),
  );
  // One whole request first: the code and the connections a first stream sets up are not what is measured.
  const warm = envoy.open();
  warm.send(requestHeaders('/v1/completions'));
  warm.send(requestBody('x', false));
  await eventuallyAsync(async () => (await metric(epp, 'disagg_epp_request_body_bytes')) === 1, 'a first body byte');
  warm.cancel();
  await eventuallyAsync(async () => (await metric(epp, 'disagg_epp_streams')) === 0, 'the first stream over');
  return { epp, envoy };
}

async function metric(epp: EndpointPickerServer, name: string): Promise<number | undefined> {
  const text = await (await request(`http://127.0.0.1:${epp.ports.metrics}/metrics`)).body.text();
  const line = text.split('\n').find((each) => each.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

function heldNow(): number {
  collectGarbage();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

describe('the endpoint picker holds what its streams really cost', () => {
  it(`a body of ${ONE_BYTE_CHUNKS.toLocaleString('en')} one-byte chunks, up to --max-body-bytes, holds at most twice its bytes and 4 MiB (one object per chunk held 150 bytes a byte)`, async () => {
    const { epp, envoy } = await picker({ maxBodyBytes: ONE_BYTE_CHUNKS });
    const before = heldNow();
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    const head = '{"model":"fake-model","max_tokens":1,"prompt":"';
    const body = Buffer.from(`${head}${'x'.repeat(ONE_BYTE_CHUNKS - head.length - 2)}"}`);
    for (let sent = 0; sent < ONE_BYTE_CHUNKS; ) {
      // In batches, each read before the next is sent: the stand-in holds no more than one.
      for (const end = sent + 10_000; sent < end; sent++) call.send(requestBody(body.subarray(sent, sent + 1), false));
      await eventuallyAsync(
        async () => (await metric(epp, 'disagg_epp_request_body_bytes')) === sent,
        `${sent} bytes read`,
        5_000,
      );
    }
    const grown = heldNow() - before;
    expect(grown).toBeLessThan(2 * ONE_BYTE_CHUNKS + 4 * MiB);
    // Still a whole body: it ends within the limit and is picked.
    call.send(requestBody(Buffer.alloc(0), true));
    expect((await call.next()).request_headers).toBeDefined();
    call.cancel();
  }, 120_000);

  it(`${STREAMS.toLocaleString('en')} streams against --max-ext-proc-streams ${CAP.toLocaleString('en')} hold at most 40 KiB per stream let in (this side's client included); the rest refused hold nothing`, async () => {
    const { epp, envoy } = await picker({ maxExtProcStreams: CAP });
    const before = heldNow();
    let calls: ExtProcCall[] = [];
    const over = new Set<ExtProcCall>();
    for (let i = 0; i < STREAMS; i++) {
      const call = envoy.open();
      call.send(requestHeaders('/v1/completions'));
      for (let b = 0; b < 10; b++) call.send(requestBody('x', false));
      void call.closed.then(() => over.add(call));
      calls.push(call);
    }
    await eventuallyAsync(
      async () =>
        (await metric(epp, 'disagg_epp_streams_refused_total')) === STREAMS - CAP &&
        (await metric(epp, 'disagg_epp_request_body_bytes')) === 10 * CAP &&
        over.size === STREAMS - CAP,
      `${CAP} streams let in, each with its 10 bytes, and ${STREAMS - CAP} refused`,
      5_000,
    );
    expect(await metric(epp, 'disagg_epp_streams')).toBe(CAP);
    calls = calls.filter((call) => !over.has(call));
    over.clear();
    const grown = heldNow() - before;
    expect(grown).toBeLessThan(CAP * 40 * KiB);
    for (const call of calls) call.cancel();
  }, 120_000);
});
