import { describe, expect, it } from 'vitest';
import { vllmNixl } from '../../src/engines/registry.js';
import type { Deadlines } from '../../src/flow/deadlines.js';
import { orphanedHandoffs } from '../../src/flow/decode-leg.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { Controller } from '../../src/runtime/controller.js';
import type { FakeWorker, FakeWorkerOptions } from '../../src/testing/index.js';
import { collect, recordingLogger } from '../support/async.js';
import { eventLog } from '../support/flow.js';
import { eventually, fakeWorkers } from '../support/http.js';

const logger = recordingLogger().logger;
const fakes = fakeWorkers();
const engine = httpEngine<{ url: string }>();
const completion = { model: 'm', prompt: 'Hello there', max_tokens: 16, stream: true };

async function pair(prefill: Partial<FakeWorkerOptions> = {}, decode: Partial<FakeWorkerOptions> = {}) {
  return {
    prefill: await fakes.start({ role: 'prefill', protocol: 'vllm', ...prefill }),
    decode: await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 4, ...decode }),
  };
}

function run(
  workers: { prefill: FakeWorker; decode: FakeWorker },
  options: {
    request?: Record<string, unknown>;
    context?: Controller;
    deadlines?: Deadlines;
    cleanupBudgetMs?: number;
  } = {},
) {
  const log = eventLog();
  const call = disaggregate({
    request: options.request ?? completion,
    context: options.context ?? new Controller(),
    prefill: engine,
    decode: engine,
    connector: vllmNixl,
    prefillWorkers: new WorkerPool([{ url: workers.prefill.url }]),
    decodeWorkers: new WorkerPool([{ url: workers.decode.url }]),
    ...(options.deadlines === undefined ? {} : { deadlines: options.deadlines }),
    ...(options.cleanupBudgetMs === undefined ? {} : { cleanupBudgetMs: options.cleanupBudgetMs }),
    onEvent: log.onEvent,
    logger,
  });
  return { call, log };
}

describe('vLLM (NIXL) over loopback HTTP', () => {
  it('completions: prefill JSON with kv_transfer_params, decode streams them back, same request id on both legs', async () => {
    const workers = await pair();
    const { call, log } = run(workers, { context: new Controller('req-v1') });
    const items = await collect(await call);
    expect(items.map((item) => item.data?.text)).toEqual(['tok0 ', 'tok1 ', 'tok2 ', 'tok3 ', '']);
    expect(items.at(-1)?.data?.finish_reason).toBe('stop');
    const [prefillCall] = workers.prefill.requests;
    const [decodeCall] = workers.decode.requests;
    expect(prefillCall?.body).toMatchObject({
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(prefillCall?.body).not.toHaveProperty('min_tokens');
    expect(decodeCall?.body.kv_transfer_params).toMatchObject({
      do_remote_prefill: true,
      remote_host: '127.0.0.1',
      remote_port: workers.prefill.port,
    });
    expect([prefillCall?.requestId, decodeCall?.requestId]).toEqual(['req-v1', 'req-v1']);
    expect(workers.prefill.ledger.claimed()).toHaveLength(1);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
  });

  it("chat completions, with the prefill leg's cached_tokens in the usage", async () => {
    const workers = await pair();
    const { call } = run(workers, {
      request: {
        model: 'm',
        messages: [{ role: 'user', content: 'Hi' }],
        max_completion_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      },
    });
    const items = await collect(await call);
    // vLLM opens a chat stream with a chunk that only names the role.
    expect(items.map((item) => item.data?.text ?? null)).toEqual(['', 'tok0 ', 'tok1 ', 'tok2 ', null]);
    const last = items.at(-1)?.data;
    expect(last?.finish_reason).toBe('length');
    expect(last?.completion_usage?.prompt_tokens_details).toEqual({ cached_tokens: expect.any(Number) });
    expect(workers.decode.requests[0]?.path).toBe('/v1/chat/completions');
  });

  it('a prefill refused with 503 fails the request with a retryable PrefillError keeping the status; no decode', async () => {
    const workers = await pair({ fault: { type: 'status', status: 503, message: 'prefill queue full' } });
    const { call, log } = run(workers);
    await expect(call).rejects.toMatchObject({ name: 'PrefillError', retryable: true, cause: { status: 503 } });
    await expect(call).rejects.toThrow('prefill queue full');
    expect(workers.decode.requests).toHaveLength(0);
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
  });

  it('a prefill that fails after computing is a PrefillError; nothing was committed', async () => {
    const workers = await pair({ fault: { type: 'late-failure', message: 'CUDA error' } });
    await expect(run(workers).call).rejects.toThrow('CUDA error');
    expect(workers.prefill.ledger.all()).toEqual([]);
  });

  it('a prefill that hangs meets its first-output deadline; its HTTP call is aborted', async () => {
    const workers = await pair({ fault: { type: 'hang' } });
    const { call } = run(workers, { deadlines: { prefillFirstOutputMs: 200 } });
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'prefillFirstOutput' });
    await eventually(() => workers.prefill.requests[0]?.aborted === true, 'prefill request aborted');
    expect(workers.decode.requests).toHaveLength(0);
  });

  it("a decode worker's 400 rejects the call with its status and text, not retryable", async () => {
    const workers = await pair({}, { fault: { type: 'status', status: 400, message: 'max_tokens too large' } });
    const { call, log } = run(workers);
    await expect(call).rejects.toMatchObject({ name: 'UpstreamError', status: 400, retryable: false });
    await expect(call).rejects.toThrow('max_tokens too large');
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
    // Refused by its request handler before taking the KV: vLLM's rejection clean-up tells the
    // prefill worker to free it at once, as the ledger shows.
    expect(workers.prefill.ledger.released()).toHaveLength(1);
    expect(workers.prefill.ledger.outstanding()).toEqual([]);
  });

  it.each([
    // The event carries the worker's code (500): a 5xx, which a retry elsewhere may get past.
    ['an SSE error event', { type: 'error-event', afterTokens: 2, message: 'decode OOM' } as const, 'decode OOM', true],
    // Broken off after the worker answered: not retried, as the failure rules say.
    ['a connection reset', { type: 'reset', afterTokens: 2 } as const, 'broke off its answer', false],
  ])('decode failing mid-stream with %s: the tokens, then one error item', async (_, fault, text, retryable) => {
    const workers = await pair({}, { fault });
    const { call, log } = run(workers);
    const items = await collect(await call);
    expect(items.map((item) => item.data?.text ?? null)).toEqual(['tok0 ', 'tok1 ', null]);
    const error = Annotated.err(items.at(-1));
    expect(error).toMatchObject({ name: 'UpstreamError' });
    expect(error?.message).toContain(text);
    expect((error as { retryable?: boolean }).retryable).toBe(retryable);
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
  });

  it('slow decode tokens meet the idle deadline; the decode call is aborted', async () => {
    const workers = await pair({}, { fault: { type: 'slow', tokenIntervalMs: 2000 } });
    const { call } = run(workers, { deadlines: { idleMs: 150, decodeFirstTokenMs: 5000 } });
    const items = await collect(await call);
    expect(Annotated.err(items.at(-1))).toMatchObject({ name: 'DeadlineError' });
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode request aborted');
  });

  it('a client that leaves during prefill: decode still takes the KV, then is stopped', async () => {
    const workers = await pair({ tokenIntervalMs: 100 }, { tokens: 50, tokenIntervalMs: 20 });
    const context = new Controller();
    const { call, log } = run(workers, { context });
    await eventually(() => workers.prefill.requests.length === 1, 'prefill called');
    context.stopGenerating();
    const stream = await call;
    expect((await collect(stream)).map((item) => item.data?.finish_reason)).toEqual(['cancelled']);
    await eventually(() => workers.prefill.ledger.claimed().length === 1, 'KV claimed');
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode stopped');
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('a client that leaves mid-decode: decode is stopped, the KV was taken', async () => {
    const workers = await pair({}, { tokens: 50, tokenIntervalMs: 10 });
    const context = new Controller();
    const stream = await run(workers, { context }).call;
    for await (const item of stream) {
      if (item.data?.text === 'tok1 ') {
        context.kill();
        break;
      }
    }
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode aborted');
    expect(workers.prefill.ledger.claimed()).toHaveLength(1);
  });

  it('a decode that never takes the KV strands it on the prefill worker (what the ledger is for)', async () => {
    const workers = await pair({ kvTimeoutMs: 100 }, { fault: { type: 'no-claim' } });
    await collect(await run(workers).call);
    await eventually(() => workers.prefill.ledger.stranded().length === 1, 'KV stranded');
    fakes.leaveKv(workers.prefill);
  });

  it('a decode that never answers after the client left: the clean-up budget gives up and counts an orphan', async () => {
    const workers = await pair({}, { fault: { type: 'never-bootstrap' } });
    const context = new Controller();
    const before = orphanedHandoffs();
    const { call, log } = run(workers, { context, cleanupBudgetMs: 150 });
    call.catch(() => {});
    await eventually(() => workers.decode.requests.length === 1, 'decode called');
    context.stopGenerating(); // the client leaves while the decode worker has not answered
    await eventually(() => log.types().includes('cleanupExpired'), 'clean-up gave up');
    expect(orphanedHandoffs()).toBe(before + 1);
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode call aborted');
    await expect(call).rejects.toMatchObject({ name: 'AbortError' });
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(workers.prefill.ledger.outstanding()).toHaveLength(1);
    fakes.leaveKv(workers.prefill);
  });
});
