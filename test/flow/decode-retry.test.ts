import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { DeadlineError } from '../../src/flow/deadlines.js';
import type { Engine } from '../../src/flow/disaggregate.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { client, eventLog, kvParams, prefillWithParams, runFlow } from '../support/flow.js';

afterEach(() => {
  vi.useRealTimers();
});

/** The failure of a call that never reached its worker: the connection was refused. */
const refused = (worker: unknown) =>
  UpstreamError.fromFailure(
    `http://${String(worker)}`,
    Object.assign(new Error(`${String(worker)} refused the connection`), { code: 'ECONNREFUSED' }),
  );

/**
 * A decode engine whose listed workers fail before any answer (refused connections by
 * default; `failure` says otherwise) and whose others stream.
 */
function decodeFailingOn(...failing: string[]) {
  return decodeFailing(failing, refused);
}

function decodeFailing(failing: string[], failure: (worker: unknown) => Error) {
  const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
  const run: Engine<unknown> = async (body, context, worker) => {
    calls.push({ worker, body });
    if (failing.includes(worker as string)) throw failure(worker);
    return new ResponseStream(
      new ScriptedSource([token(1), token(2), Annotated.fromData(LLMEngineOutput.length())]).end(),
      context,
    );
  };
  return { run, calls };
}

const leases = (pool: WorkerPool<string>) => pool.workers.map((worker) => pool.inFlight(worker));

describe('a sequential decode that could not be reached is sent to another decode worker with the same handoff', () => {
  it('the next decode worker gets the same kv_transfer_params; the client reads a whole stream', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const decode = decodeFailingOn('d0');
    const prefill = prefillWithParams();
    const log = eventLog();
    const retryDecode = vi.fn(() => 0);
    const stream = await runFlow({
      prefill: prefill.run,
      decode: decode.run,
      decodeWorkers,
      retryDecode,
      onEvent: log.onEvent,
    });
    expect((await collect(stream)).map((item) => item.data?.token_ids)).toEqual([[1], [2], []]);
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
    expect(decode.calls[1]?.body).toEqual(decode.calls[0]?.body);
    expect(decode.calls[1]?.body.kv_transfer_params).toEqual(kvParams);
    // Prefill ran once: the KV it computed is the one the second decode worker takes.
    expect(prefill.calls).toHaveLength(1);
    expect(retryDecode).toHaveBeenCalledExactlyOnceWith(expect.objectContaining({ networkCode: 'ECONNREFUSED' }), 0);
    expect(log.of('decodeRetried')).toMatchObject([{ attempt: 1, decodeWorker: 'd1', fromWorker: 'd0', delayMs: 0 }]);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success', decodeWorker: 'd1' }]);
    expect(log.of('decodeRetried')[0]?.error.message).toContain('d0 refused the connection');
    expect(log.types().filter((type) => type === 'decodeDispatched')).toHaveLength(2);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
    await flush();
    expect(leases(decodeWorkers)).toEqual([0, 0]);
  });

  it('without retryDecode, or when it answers undefined, decode failure fails the request and holds no lease', async () => {
    for (const retryDecode of [undefined, () => undefined]) {
      const decodeWorkers = new WorkerPool(['d0', 'd1']);
      const decode = decodeFailingOn('d0');
      await expect(
        runFlow({ decode: decode.run, decodeWorkers, ...(retryDecode === undefined ? {} : { retryDecode }) }),
      ).rejects.toThrow('d0 refused the connection');
      expect(decode.calls).toHaveLength(1);
      expect(leases(decodeWorkers)).toEqual([0, 0]);
    }
  });

  it('bounded by retryDecode: each attempt passes over the workers that failed, then the last error is the answer', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1', 'd2']);
    const decode = decodeFailingOn('d0', 'd1', 'd2');
    const attempts: number[] = [];
    const error = await runFlow({
      decode: decode.run,
      decodeWorkers,
      retryDecode: (_, attempt) => {
        attempts.push(attempt);
        return attempt < 2 ? 0 : undefined;
      },
    }).catch((e: unknown) => e);
    const workers = decode.calls.map((call) => call.worker);
    expect(new Set(workers)).toEqual(new Set(['d0', 'd1', 'd2']));
    expect((error as Error).message).toContain(`${String(workers[2])} refused the connection`);
    expect(attempts).toEqual([0, 1, 2]);
    expect(leases(decodeWorkers)).toEqual([0, 0, 0]);
  });

  it('passes over the failed worker even where the selection would pick it again', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: (candidates) => candidates[0] as string });
    const decode = decodeFailingOn('d0');
    await collect(await runFlow({ decode: decode.run, decodeWorkers, retryDecode: () => 0 }));
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
  });

  it('no retry without a pool to choose another worker from, nor after a request deadline', async () => {
    const retryDecode = vi.fn(() => 0);
    let calls = 0;
    const failing: Engine<unknown> = async () => {
      calls++;
      throw refused('no-pool');
    };
    await expect(runFlow({ decode: failing, retryDecode })).rejects.toThrow('no-pool refused the connection');
    expect(calls).toBe(1);
    expect(retryDecode).not.toHaveBeenCalled();
    vi.useFakeTimers();
    const decodeWorkers = new WorkerPool(['d0', 'd1']);
    // Decode answers only after the total deadline, with a failure.
    const late: Engine<unknown> = () => new Promise((_, reject) => setTimeout(() => reject(refused('late')), 2_000));
    const outcome = runFlow({ decode: late, decodeWorkers, retryDecode, deadlines: { totalMs: 1_000 } }).catch(
      (error: unknown) => error,
    );
    await vi.advanceTimersByTimeAsync(3_000);
    expect(await outcome).toBeInstanceOf(DeadlineError);
    expect(retryDecode).not.toHaveBeenCalled();
    expect(leases(decodeWorkers)).toEqual([0, 0]);
  });

  it('no decode worker left in rotation: the decode failure is the answer, not a NoWorkerError', async () => {
    const decodeWorkers = new WorkerPool(['d0']);
    const run: Engine<unknown> = async () => {
      decodeWorkers.setAvailable('d0', false); // as the health checker does with an unreachable worker
      throw refused('d0');
    };
    await expect(runFlow({ decode: run, decodeWorkers, retryDecode: () => 0 })).rejects.toThrow('ECONNREFUSED');
    expect(leases(decodeWorkers)).toEqual([0]);
  });

  it('the backoff counts against the request deadline: a deadline during it fails the request and frees the lease', async () => {
    vi.useFakeTimers();
    const decodeWorkers = new WorkerPool(['d0', 'd1']);
    const decode = decodeFailingOn('d0');
    const outcome = runFlow({
      decode: decode.run,
      decodeWorkers,
      retryDecode: () => 5_000,
      deadlines: { totalMs: 1_000 },
    }).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(1_000);
    const error = await outcome;
    expect(error).toBeInstanceOf(DeadlineError);
    expect((error as DeadlineError).phase).toBe('total');
    expect(decode.calls).toHaveLength(1);
    expect(leases(decodeWorkers)).toEqual([0, 0]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a retryDecode that throws or answers a non-wait means no retry; the throw is logged', async () => {
    const recorded = recordingLogger();
    const decodeWorkers = new WorkerPool(['d0', 'd1']);
    const throwing = decodeFailingOn('d0');
    await expect(
      runFlow({
        decode: throwing.run,
        decodeWorkers,
        logger: recorded.logger,
        retryDecode: () => {
          throw new Error('policy bug');
        },
      }),
    ).rejects.toThrow('d0 refused the connection');
    expect(throwing.calls).toHaveLength(1);
    expect(recorded.records.some((r) => r.message === 'retryDecode threw; the decode failure is not retried')).toBe(
      true,
    );
    const negative = decodeFailingOn('d0', 'd1');
    await expect(runFlow({ decode: negative.run, decodeWorkers, retryDecode: () => -1 })).rejects.toThrow(
      'refused the connection',
    );
    expect(negative.calls).toHaveLength(1);
    await expect(runFlow({ retryDecode: 5 as never })).rejects.toThrow('retryDecode must be a function');
  });

  it('a client that leaves meanwhile does not stop the retry: the next decode worker takes the KV, and the request is cancelled', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const context = new Controller('gone');
    const calls: Array<{ worker: unknown; stopped: boolean }> = [];
    const sources: ScriptedSource[] = [];
    const run: Engine<unknown> = async (_, legContext, worker) => {
      calls.push({ worker, stopped: context.isStopped() });
      if (worker === 'd0') {
        context.stop(); // the client leaves as the first decode worker fails
        throw refused('d0');
      }
      const source = new ScriptedSource([token(1), Annotated.fromData(LLMEngineOutput.length())]).end();
      sources.push(source);
      return new ResponseStream(source, legContext);
    };
    const log = eventLog();
    const stream = await runFlow({ context, decode: run, decodeWorkers, retryDecode: () => 0, onEvent: log.onEvent });
    await collect(stream);
    await flush();
    expect(calls).toEqual([
      { worker: 'd0', stopped: false },
      { worker: 'd1', stopped: true },
    ]);
    expect(log.of('kvClaimed')).toHaveLength(1);
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(leases(decodeWorkers)).toEqual([0, 0]);
  });

  it('not for a rendezvous (SGLang): decode there is sent with prefill, which is retried as a pair by the router', async () => {
    const retryDecode = vi.fn(() => 0);
    const decodeWorkers = new WorkerPool(['d0', 'd1']);
    const decode = decodeFailingOn('d0');
    await expect(
      disaggregate({
        request: client,
        context: new Controller(),
        prefill: async (_, context) =>
          new ResponseStream(new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end(), context),
        decode: decode.run,
        connector: sglangBootstrap,
        prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
        decodeWorkers,
        retryDecode,
        logger: recordingLogger().logger,
      }),
    ).rejects.toThrow('d0 refused the connection');
    expect(retryDecode).not.toHaveBeenCalled();
  });
});

describe('a decode worker that was reached may have freed the KV: its handoff is not sent again', () => {
  const answered503 = (worker: unknown) =>
    UpstreamError.fromStatus(`http://${String(worker)}`, 503, '{"error":{"message":"queue full"}}');
  const reset = (worker: unknown) =>
    UpstreamError.fromFailure(
      `http://${String(worker)}`,
      Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
    );

  it.each([
    ['an error answer (vLLM frees the KV as its handler refuses)', answered503],
    ['a reset before any answer (it may have received the request, and aborted it)', reset],
  ])('%s fails the request with the decode leg, retryDecode not asked', async (_, failure) => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const decode = decodeFailing(['d0'], failure);
    const retryDecode = vi.fn(() => 0);
    const log = eventLog();
    const error = await runFlow({ decode: decode.run, decodeWorkers, retryDecode, onEvent: log.onEvent }).catch(
      (e: unknown) => e,
    );
    expect(UpstreamError.is(error)).toBe(true);
    expect(retryDecode).not.toHaveBeenCalled();
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0']);
    // The caller sees which leg failed: a router above retries it with a fresh prefill.
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
    expect(log.of('decodeRetried')).toEqual([]);
    expect(leases(decodeWorkers)).toEqual([0, 0]);
  });

  it("reuseHandoff 'always' (vLLM before 0.21, which holds the KV until a decode takes it) sends it again after a 503", async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const decode = decodeFailing(['d0'], answered503);
    const prefill = prefillWithParams();
    const stream = await runFlow({
      prefill: prefill.run,
      decode: decode.run,
      decodeWorkers,
      retryDecode: () => 0,
      reuseHandoff: 'always',
    });
    expect((await collect(stream)).map((item) => item.data?.token_ids)).toEqual([[1], [2], []]);
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
    expect(decode.calls[1]?.body.kv_transfer_params).toEqual(kvParams);
    expect(prefill.calls).toHaveLength(1);
  });

  it('reuseHandoff is checked', async () => {
    await expect(runFlow({ reuseHandoff: 'sometimes' as never })).rejects.toThrow(
      /^reuseHandoff must be 'unreached' or 'always', got .*sometimes/,
    );
  });
});
