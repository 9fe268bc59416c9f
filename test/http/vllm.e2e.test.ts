import { afterEach, describe, expect, it } from 'vitest';
import { vllmNixl } from '../../src/flow/connectors.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Controller } from '../../src/runtime/controller.js';
import { type FakeWorker, startFakeWorker } from '../../src/testing/index.js';
import { collect, recordingLogger } from '../support/async.js';
import { eventLog } from '../support/flow.js';

const logger = recordingLogger().logger;
let workers: FakeWorker[] = [];
/** Workers whose KV a test expects to stay behind (and says why). */
const leftBehind = new Set<FakeWorker>();

async function pair(options: { prefill?: object; decode?: object } = {}) {
  const prefill = await startFakeWorker({ role: 'prefill', protocol: 'vllm', ...options.prefill });
  const decode = await startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 4, ...options.decode });
  workers.push(prefill, decode);
  return { prefill, decode };
}

afterEach(async () => {
  for (const worker of workers) {
    if (leftBehind.has(worker)) continue;
    expect(worker.ledger.outstanding(), `KV left on ${worker.url}`).toEqual([]);
    expect(worker.ledger.stranded(), `KV stranded on ${worker.url}`).toEqual([]);
  }
  await Promise.all(workers.map((worker) => worker.close()));
  workers = [];
  leftBehind.clear();
});

const engine = httpEngine<{ url: string }>();

function run(prefill: FakeWorker, decode: FakeWorker, request: Record<string, unknown>, context = new Controller()) {
  const log = eventLog();
  const call = disaggregate({
    request,
    context,
    prefill: engine,
    decode: engine,
    connector: vllmNixl,
    prefillWorkers: new WorkerPool([{ url: prefill.url }]),
    decodeWorkers: new WorkerPool([{ url: decode.url }]),
    onEvent: log.onEvent,
    logger,
  });
  return { call, log };
}

describe('vLLM (NIXL) over loopback HTTP', () => {
  it('completions: prefill JSON with kv_transfer_params, decode streams them back, same request id on both legs', async () => {
    const { prefill, decode } = await pair();
    const { call, log } = run(
      prefill,
      decode,
      { model: 'm', prompt: 'Hello there', max_tokens: 16, stream: true },
      new Controller('req-v1'),
    );
    const items = await collect(await call);
    expect(items.map((item) => item.data?.text)).toEqual(['tok0 ', 'tok1 ', 'tok2 ', 'tok3 ', '']);
    expect(items.at(-1)?.data?.finish_reason).toBe('stop');
    const [prefillCall] = prefill.requests;
    const [decodeCall] = decode.requests;
    expect(prefillCall?.body).toMatchObject({
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(decodeCall?.body.kv_transfer_params).toMatchObject({
      do_remote_prefill: true,
      remote_host: '127.0.0.1',
      remote_port: prefill.port,
    });
    expect([prefillCall?.requestId, decodeCall?.requestId]).toEqual(['req-v1', 'req-v1']);
    expect(prefill.ledger.claimed()).toHaveLength(1);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
  });

  it("chat completions, with the prefill leg's cached_tokens in the usage", async () => {
    const { prefill, decode } = await pair();
    const { call } = run(prefill, decode, {
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      max_completion_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const items = await collect(await call);
    expect(items.map((item) => item.data?.text ?? null)).toEqual(['tok0 ', 'tok1 ', 'tok2 ', null]);
    const last = items.at(-1)?.data;
    expect(last?.finish_reason).toBe('length');
    expect(last?.completion_usage?.prompt_tokens_details).toEqual({ cached_tokens: expect.any(Number) });
    expect(decode.requests[0]?.path).toBe('/v1/chat/completions');
  });

  it("a decode worker's 400 rejects the call with its status and text, not retryable", async () => {
    const { prefill, decode } = await pair({
      decode: { fault: { type: 'status', status: 400, message: 'max_tokens too large' } },
    });
    const { call } = run(prefill, decode, { model: 'm', prompt: 'x', max_tokens: 5, stream: true });
    await expect(call).rejects.toMatchObject({ name: 'UpstreamError', status: 400, retryable: false });
    await expect(call).rejects.toThrow('max_tokens too large');
    // The decode worker refused the request before taking the KV: nothing can claim it now,
    // and the prefill worker holds it until its own timeout (what the ledger shows).
    expect(prefill.ledger.outstanding()).toHaveLength(1);
    leftBehind.add(prefill);
  });
});
