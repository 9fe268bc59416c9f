import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import type { Engine } from '../../src/flow/disaggregate.js';
import { NoWorkerError, WorkerPool } from '../../src/flow/worker-pool.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { cacheAware } from '../../src/routing/cache-aware.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, recordingLogger, ScriptedSource } from '../support/async.js';
import { client, decodeTokens, eventLog, handoffItem, runFlow } from '../support/flow.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A prefill engine that fails with a 500 on the listed workers and hands off on the others. */
function prefillFailingOn(...failing: string[]) {
  const calls: unknown[] = [];
  const run: Engine<unknown> = async (_body, context, worker) => {
    calls.push(worker);
    if (failing.includes(worker as string))
      throw UpstreamError.fromStatus(`http://${String(worker)}`, 500, 'prefill OOM');
    return new ResponseStream(new ScriptedSource([handoffItem()]).end(), context);
  };
  return { run, calls };
}

describe('retryPrefill: the request again from the start, passing over the worker that failed', () => {
  it('a prefill 500: the next prefill worker computes it; one outcome, settled last, leases back; routing learns where it was computed', async () => {
    const policy = cacheAware<string>();
    const prefillWorkers = new WorkerPool(['p0', 'p1'], { selection: policy });
    const decodeWorkers = new WorkerPool(['d0']);
    const prefill = prefillFailingOn('p0');
    const log = eventLog();
    const retryPrefill = vi.fn((_error: unknown, attempt: number) => (attempt < 2 ? 0 : undefined));
    const turn = { ...client, prompt: 'You are a helpful assistant. The user asks about Paris.' };
    const stream = await runFlow({
      request: turn,
      prefill: prefill.run,
      prefillWorkers,
      decodeWorkers,
      retryPrefill,
      onEvent: log.onEvent,
    });
    expect((await collect(stream)).map((item) => item.data?.token_ids)).toEqual([[1], [2], []]);
    expect(prefill.calls).toEqual(['p0', 'p1']);
    expect(retryPrefill).toHaveBeenCalledExactlyOnceWith(expect.objectContaining({ name: 'PrefillError' }), 0);
    expect(log.of('prefillRetried')).toMatchObject([
      { attempt: 1, leg: 'prefill', prefillWorker: 'p0', decodeWorker: 'd0', delayMs: 0 },
    ]);
    expect(log.of('routed').map((event) => event.prefillWorker)).toEqual(['p0', 'p1']);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
    await flush();
    expect(log.types().filter((type) => type === 'settled')).toHaveLength(1);
    expect(log.types().at(-1)).toBe('settled');
    expect([prefillWorkers.inFlight('p0'), prefillWorkers.inFlight('p1'), decodeWorkers.inFlight('d0')]).toEqual([
      0, 0, 0,
    ]);
    // The next turn of the conversation goes where the prompt was computed, not where it failed.
    const next = new RoutingInput({ ...turn, prompt: `${turn.prompt} And Lyon?` });
    expect(prefillWorkers.acquire(undefined, next).worker).toBe('p1');
  });

  it('a rendezvous whose decode fails before its stream: the pair again, with a fresh room, on another decode worker', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const rooms: unknown[] = [];
    const decode: Engine<unknown> = async (body, context, worker) => {
      rooms.push(body.bootstrap_room);
      if (worker === 'd0') throw UpstreamError.fromStatus('http://d0', 503, 'busy');
      return new ResponseStream(
        new ScriptedSource([
          Annotated.fromData({ token_ids: [3] }),
          Annotated.fromData(LLMEngineOutput.length()),
        ]).end(),
        context,
      );
    };
    const log = eventLog();
    const stream = await runFlow({
      connector: sglangBootstrap,
      prefill: async (_body, context) =>
        new ResponseStream(new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end(), context),
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
      decode,
      decodeWorkers,
      retryPrefill: () => 0,
      onEvent: log.onEvent,
    });
    expect((await collect(stream)).map((item) => item.data?.token_ids)).toEqual([[3], []]);
    expect(rooms).toHaveLength(2);
    expect(rooms[0]).not.toEqual(rooms[1]);
    expect(log.of('prefillRetried')).toMatchObject([{ leg: 'decode', decodeWorker: 'd0' }]);
    expect(log.of('routed').map((event) => event.decodeWorker)).toEqual(['d0', 'd1']);
  });

  it('answered undefined, or not given: the failure is the answer, with one finished', async () => {
    for (const retryPrefill of [undefined, () => undefined]) {
      const log = eventLog();
      const failure = await runFlow({
        prefill: prefillFailingOn('p0').run,
        prefillWorkers: new WorkerPool(['p0', 'p1']),
        ...(retryPrefill === undefined ? {} : { retryPrefill }),
        onEvent: log.onEvent,
      }).catch((error: unknown) => error);
      expect(failure).toMatchObject({ name: 'PrefillError' });
      expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
      expect(log.of('prefillRetried')).toEqual([]);
    }
  });

  it('a client that leaves during the wait ends the request as cancelled; the call rejects with the failure', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const context = new Controller('gone');
    const prefill = prefillFailingOn('p0', 'p1');
    const log = eventLog();
    const call = runFlow({
      context,
      prefill: prefill.run,
      prefillWorkers: new WorkerPool(['p0', 'p1']),
      retryPrefill: () => 5_000,
      onEvent: log.onEvent,
    });
    call.catch(() => {});
    await flush();
    expect(log.of('prefillRetried')).toHaveLength(1);
    context.stopGenerating();
    await expect(call).rejects.toMatchObject({ name: 'PrefillError' });
    expect(prefill.calls).toEqual(['p0']);
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a retryPrefill that throws means no retry, and is logged', async () => {
    const recorded = recordingLogger();
    const failure = await runFlow({
      prefill: prefillFailingOn('p0').run,
      prefillWorkers: new WorkerPool(['p0', 'p1']),
      logger: recorded.logger,
      retryPrefill: () => {
        throw new Error('policy bug');
      },
    }).catch((error: unknown) => error);
    expect(failure).toMatchObject({ name: 'PrefillError' });
    expect(recorded.records.map((record) => record.message)).toContain(
      'retryPrefill threw; the request is not retried',
    );
    await expect(runFlow({ retryPrefill: 5 as never })).rejects.toThrow('retryPrefill must be a function');
  });

  it('decode that answered on the first attempt is untouched: retries happen only before the client stream exists', async () => {
    const retryPrefill = vi.fn(() => 0);
    const decode = decodeTokens();
    await collect(await runFlow({ decode: decode.run, retryPrefill }));
    expect(retryPrefill).not.toHaveBeenCalled();
    expect(decode.calls).toHaveLength(1);
  });
});

describe('retryPrefill when the pools have emptied', () => {
  it("no decode worker left for the retry: the request ends with the NoWorkerError, one finished (the decode leg's error), settled last", async () => {
    const decodeWorkers = new WorkerPool(['d0']);
    const log = eventLog();
    const decode: Engine<unknown> = async () => {
      decodeWorkers.setAvailable('d0', false); // as health does with a worker that failed
      throw UpstreamError.fromStatus('http://d0', 503, 'busy');
    };
    const failure = await runFlow({ decode, decodeWorkers, retryPrefill: () => 0, onEvent: log.onEvent }).catch(
      (error: unknown) => error,
    );
    expect(failure).toMatchObject({ name: 'NoWorkerError', pool: 'decode' });
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
    await flush();
    expect(log.types().at(-1)).toBe('settled');
  });
});

describe('retryPrefill passes over the workers that failed, and only those', () => {
  /** A decode engine that fails with a 503 on the listed workers and streams on the others. */
  function decodeFailingOn(...failing: string[]) {
    const calls: unknown[] = [];
    const run: Engine<unknown> = async (_body, context, worker) => {
      calls.push(worker);
      if (failing.includes(worker as string)) throw UpstreamError.fromStatus(`http://${String(worker)}`, 503, 'busy');
      return new ResponseStream(new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end(), context);
    };
    return { run, calls };
  }
  /** A pool that always takes the first worker it may: which one an attempt gets shows what it passed over. */
  const pool = (...workers: string[]) =>
    new WorkerPool<unknown>(workers, { selection: (candidates: readonly unknown[]) => candidates[0] });

  /**
   * One request with retries over two-worker pools, prefill failing on `prefillFails`, decode on
   * `decodeFails`: the workers each leg was called on, in order.
   */
  async function workersCalled(
    prefillFails: string[],
    decodeFails: string[],
    avoid?: { prefill?: string[]; decode?: string[] },
  ) {
    const prefill = prefillFailingOn(...prefillFails);
    const decode = decodeFailingOn(...decodeFails);
    await collect(
      await runFlow({
        prefill: prefill.run,
        decode: decode.run,
        prefillWorkers: pool('p0', 'p1'),
        decodeWorkers: pool('d0', 'd1'),
        retryPrefill: () => 0,
        ...(avoid === undefined ? {} : { avoid }),
      }),
    );
    return [prefill.calls, decode.calls];
  }

  it('the workers the caller said to avoid are passed over from the first attempt', async () => {
    expect(await workersCalled([], [], { prefill: ['p0'], decode: ['d0'] })).toEqual([['p1'], ['d1']]);
  });

  it("a prefill failure passes over its prefill worker, not the decode worker; a decode failure over its decode worker, not prefill's", async () => {
    expect(await workersCalled(['p0'], [])).toEqual([['p0', 'p1'], ['d0']]);
    expect(await workersCalled([], ['d0'])).toEqual([
      ['p0', 'p0'],
      ['d0', 'd1'],
    ]);
  });

  it('the retry event names only the workers there were', async () => {
    const log = eventLog();
    let failed = false;
    const prefill: Engine<unknown> = async (_body, context) => {
      if (!failed) {
        failed = true;
        throw UpstreamError.fromStatus('http://p', 500, 'prefill OOM');
      }
      return new ResponseStream(new ScriptedSource([handoffItem()]).end(), context);
    };
    await collect(await runFlow({ prefill, retryPrefill: () => 0, onEvent: log.onEvent }));
    const [retried] = log.of('prefillRetried');
    expect(retried).toMatchObject({ attempt: 1, leg: 'prefill' });
    expect(retried).not.toHaveProperty('prefillWorker');
    expect(retried).not.toHaveProperty('decodeWorker');
  });

  it('a retryPrefill that throws is logged with what it threw', async () => {
    const recorded = recordingLogger();
    const thrown = new Error('policy bug');
    await runFlow({
      prefill: prefillFailingOn('p0').run,
      prefillWorkers: new WorkerPool(['p0', 'p1']),
      logger: recorded.logger,
      retryPrefill: () => {
        throw thrown;
      },
    }).catch(() => {});
    const record = recorded.records.find((each) => each.message === 'retryPrefill threw; the request is not retried');
    expect(record?.fields).toEqual({ err: thrown });
  });

  it("noPrefillWorker 'fail' when the retry finds no prefill worker: the request, under way, ends with the NoWorkerError", async () => {
    const prefillWorkers = new WorkerPool<unknown>(['p0']);
    const log = eventLog();
    const prefill: Engine<unknown> = async () => {
      prefillWorkers.setAvailable('p0', false);
      throw UpstreamError.fromStatus('http://p0', 500, 'prefill OOM');
    };
    const failure = await runFlow({
      prefill,
      prefillWorkers,
      noPrefillWorker: 'fail',
      retryPrefill: () => 0,
      onEvent: log.onEvent,
    }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(NoWorkerError);
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
  });
});
