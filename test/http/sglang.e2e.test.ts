import { describe, expect, it } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import type { Deadlines } from '../../src/flow/deadlines.js';
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
const request = { model: 'm', prompt: 'Tell me', max_tokens: 16, stream: true };

async function pair(prefill: Partial<FakeWorkerOptions> = {}, decode: Partial<FakeWorkerOptions> = {}) {
  return {
    prefill: await fakes.start({ role: 'prefill', protocol: 'sglang', ...prefill }),
    decode: await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 4, ...decode }),
  };
}

function run(
  workers: { prefill: FakeWorker; decode: FakeWorker },
  options: { context?: Controller; deadlines?: Deadlines } = {},
) {
  const log = eventLog();
  const call = disaggregate({
    request,
    context: options.context ?? new Controller(),
    prefill: engine,
    decode: engine,
    connector: sglangBootstrap,
    // The bootstrap port is the worker's own setting; the host is taken from its url.
    prefillWorkers: new WorkerPool([{ url: workers.prefill.url, bootstrapPort: workers.prefill.bootstrapPort }]),
    decodeWorkers: new WorkerPool([{ url: workers.decode.url }]),
    ...(options.deadlines === undefined ? {} : { deadlines: options.deadlines }),
    onEvent: log.onEvent,
    logger,
  });
  return { call, log };
}

describe('SGLang (bootstrap) over loopback HTTP', () => {
  it('both legs at once with the same rendezvous; rooms above 2^53 arrive exact on both workers', async () => {
    const workers = await pair();
    const rooms: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const { call, log } = run(workers, { context: new Controller(`req-s${i}`) });
      const items = await collect(await call);
      expect(items.map((item) => item.data?.text)).toEqual(['tok0 ', 'tok1 ', 'tok2 ', 'tok3 ', '']);
      expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
      const prefillBody = workers.prefill.requests[i]?.body as Record<string, unknown>;
      const decodeBody = workers.decode.requests[i]?.body as Record<string, unknown>;
      expect(prefillBody).toMatchObject({
        bootstrap_host: '127.0.0.1',
        bootstrap_port: workers.prefill.port,
        max_tokens: 1,
      });
      expect(decodeBody.bootstrap_room).toBe(prefillBody.bootstrap_room);
      expect(decodeBody.max_tokens).toBe(16);
      const room = BigInt(prefillBody.bootstrap_room as bigint | number);
      expect(workers.prefill.ledger.claimed().map((handoff) => handoff.key)).toContain(room.toString());
      rooms.push(room);
    }
    // Random rooms below 2^63 are above 2^53 with probability 1 - 2^-10 each.
    expect(rooms.some((room) => room > BigInt(Number.MAX_SAFE_INTEGER))).toBe(true);
    expect(rooms.every((room) => room < 1n << 63n)).toBe(true);
  });

  it('a prefill refused with 503 fails the request with a retryable PrefillError and stops decode', async () => {
    const workers = await pair({ fault: { type: 'status', status: 503, message: 'prefill overloaded' } });
    const { call, log } = run(workers);
    let failure: unknown;
    try {
      const items = await collect(await call);
      failure = Annotated.err(items.at(-1));
    } catch (error) {
      failure = error;
    }
    expect(failure).toMatchObject({ name: 'PrefillError', retryable: true });
    expect(String((failure as Error).message)).toContain('prefill overloaded');
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode request aborted');
  });

  it('a prefill that fails after the bootstrap fails the request: never a decode success', async () => {
    const workers = await pair(
      { fault: { type: 'late-failure', message: 'KV transfer aborted' } },
      { tokenIntervalMs: 20 },
    );
    const { call, log } = run(workers);
    // Before decode's stream opens the call rejects; after, the stream ends with one error item.
    const seen = await call.then(collect).then(
      (items) => ({ items, error: Annotated.err(items.at(-1)) }),
      (error: unknown) => ({ items: [], error }),
    );
    expect(seen.error).toMatchObject({ name: 'PrefillError' });
    expect(String((seen.error as Error).message)).toContain('KV transfer aborted');
    expect(
      seen.items.some((item) => item.data?.finish_reason === 'length' || item.data?.finish_reason === 'stop'),
    ).toBe(false);
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode request aborted');
  });

  it('a decode that never bootstraps: the prefill leg times out waiting, the request fails, decode is stopped', async () => {
    const workers = await pair({ bootstrapTimeoutMs: 150 }, { fault: { type: 'never-bootstrap' } });
    const { call, log } = run(workers);
    const outcome = await call.then(collect).then(
      (items) => Annotated.err(items.at(-1)),
      (error: unknown) => error,
    );
    expect(String((outcome as Error).message)).toContain('timed out waiting for decode');
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode request aborted');
    // The prefill worker freed the room it held for a decode that never came.
    expect(workers.prefill.ledger.stranded()).toHaveLength(1);
    fakes.leaveKv(workers.prefill);
  });

  it('a decode failing mid-stream ends the client stream with its error; the KV was taken', async () => {
    const workers = await pair({}, { fault: { type: 'error-event', afterTokens: 2, message: 'decode OOM' } });
    const { call, log } = run(workers);
    const items = await collect(await call);
    expect(items.map((item) => item.data?.text ?? null)).toEqual(['tok0 ', 'tok1 ', null]);
    expect(Annotated.err(items.at(-1))).toMatchObject({ name: 'UpstreamError' });
    expect(Annotated.err(items.at(-1))?.message).toContain('decode OOM');
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
  });

  it('a client that leaves at once: decode still takes the KV from prefill, then is stopped', async () => {
    const workers = await pair({}, { tokens: 50, tokenIntervalMs: 10 });
    const context = new Controller();
    const { call, log } = run(workers, { context });
    context.stopGenerating(); // before either worker has answered anything
    const outcome = await call.then(collect, (error: unknown) => error);
    expect(outcome).toBeDefined();
    await eventually(() => workers.prefill.ledger.claimed().length === 1, 'KV claimed by decode');
    await eventually(() => workers.prefill.requests[0]?.completed === true, 'prefill completed');
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode stopped after the claim');
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('a prefill worker that is down: a retryable PrefillError, and decode is stopped', async () => {
    const workers = await pair();
    await workers.prefill.close();
    const { call } = run(workers);
    const failure = await call.then(
      (stream) => collect(stream).then((items) => Annotated.err(items.at(-1))),
      (error: unknown) => error,
    );
    expect(failure).toMatchObject({ name: 'PrefillError', retryable: true });
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode stopped');
  });

  it('a client that leaves mid-stream stops decode; prefill still runs to completion', async () => {
    const workers = await pair({}, { tokens: 50, tokenIntervalMs: 10 });
    const context = new Controller();
    const { call, log } = run(workers, { context });
    const stream = await call;
    for await (const item of stream) {
      if (item.data?.text === 'tok1 ') {
        context.stopGenerating();
        break;
      }
    }
    await eventually(() => workers.decode.requests[0]?.aborted === true, 'decode request aborted');
    await eventually(() => workers.prefill.requests[0]?.completed === true, 'prefill completed');
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('a prefill that never answers after the bootstrap: the handoff deadline ends the held terminal', async () => {
    const workers = await pair({ fault: { type: 'never-bootstrap' } });
    const { call } = run(workers, { deadlines: { handoffMs: 5000, prefillFirstOutputMs: 300 } });
    const items = await collect(await call);
    expect(Annotated.err(items.at(-1))).toMatchObject({ name: 'DeadlineError', phase: 'prefillFirstOutput' });
    await eventually(() => workers.prefill.requests[0]?.aborted === true, 'prefill request aborted');
    // Decode took the KV before the deadline (the room was committed): nothing left behind.
    expect(workers.prefill.ledger.claimed()).toHaveLength(1);
  });
});

describe("SGLang's native /generate", () => {
  it('streams the new part of each cumulative chunk, and the finish reason', async () => {
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 3 });
    const generate = httpEngine({ url: decode.url, api: 'generate' });
    const stream = await generate(
      { text: 'Hi', sampling_params: { max_new_tokens: 3 }, stream: true },
      new Controller(),
    );
    const items = await collect(stream);
    expect(items.map((item) => item.data?.text)).toEqual(['tok0 ', 'tok1 ', 'tok2 ', '']);
    expect(items.at(-1)?.data).toMatchObject({ finish_reason: 'length', completion_usage: { completion_tokens: 3 } });
  });
});
