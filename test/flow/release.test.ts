import { afterEach, describe, expect, it, vi } from 'vitest';
import { RELEASE_MODEL, trtllmContextFirst, vllmNixl } from '../../src/engines/registry.js';
import type { Engine } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import type { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, deferred, flush, recordingLogger, ScriptedSource } from '../support/async.js';
import { client, engine, eventLog, kvParams, runFlow } from '../support/flow.js';

/** vLLM's handoff parameters as its prefill answers them. */
const pinned = { ...kvParams, do_remote_prefill: true, do_remote_decode: false };

/** A prefill whose one token ended the answer, its worker still holding the KV (vLLM's `stop`). */
const stoppedPrefill = (params: unknown = pinned) =>
  engine(() =>
    new ScriptedSource([
      Annotated.fromData<LLMEngineOutput>({
        token_ids: [2],
        text: '.',
        finish_reason: 'stop',
        ...(params === null ? {} : { disaggregated_params: params }),
      }),
    ]).end(),
  );

/** A decode worker answering the release as vLLM does: its handler refuses the model with a 404. */
function refusingDecode(answer: () => Promise<void> = async () => {}) {
  const calls: Array<{ body: Record<string, unknown>; worker: unknown }> = [];
  const run: Engine<unknown> = async (body, _context, worker) => {
    calls.push({ body, worker });
    await answer();
    throw UpstreamError.fromStatus(
      `http://${String(worker)}`,
      404,
      `The model \`${String(body.model)}\` does not exist.`,
    );
  };
  return { run, calls };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('the KV of a request prefill finished itself is released on the decode worker', () => {
  it("vllmNixl's release: the client's request with the handoff, a model nobody serves and a one-token budget, whole", () => {
    const body = vllmNixl.release?.({ ...client, stream_options: { include_usage: true } }, pinned);
    expect(body).toEqual({
      model: RELEASE_MODEL,
      prompt: 'Hello',
      min_tokens: 3,
      max_tokens: 1,
      max_completion_tokens: 1,
      stream: false,
      kv_transfer_params: pinned,
    });
    // Nothing to free: parameters that hold no KV for a remote decode.
    expect(vllmNixl.release?.(client, { do_remote_prefill: false })).toBeUndefined();
    expect(vllmNixl.release?.(client, null)).toBeUndefined();
    expect(trtllmContextFirst.release).toBeUndefined();
  });

  it('the client gets prefill’s answer at once; the release goes to the decode worker, which stays leased until it answered', async () => {
    const decodeWorkers = new WorkerPool(['d0']);
    const answered = deferred<void>();
    const decode = refusingDecode(() => answered.promise);
    const log = eventLog();
    const stream = await runFlow({
      prefill: stoppedPrefill().run,
      decode: decode.run,
      decodeWorkers,
      onEvent: log.onEvent,
    });
    const items = await collect(stream);
    expect(items.map((item) => item.data?.finish_reason)).toEqual(['stop']);
    expect(items[0]?.data?.disaggregated_params).toBeUndefined();
    expect(decode.calls).toMatchObject([{ worker: 'd0', body: { model: RELEASE_MODEL, kv_transfer_params: pinned } }]);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
    expect(decodeWorkers.inFlight('d0')).toBe(1);
    expect(log.types()).not.toContain('settled');
    answered.resolve();
    await flush();
    expect(log.of('handoffReleased')).toMatchObject([{ freed: true, late: true }]);
    expect(log.types().at(-1)).toBe('settled');
    expect(decodeWorkers.inFlight('d0')).toBe(0);
  });

  it('a release that reaches no handler (a refused connection, a 5xx from in front) is not freed, and is logged at warn', async () => {
    for (const failure of [
      UpstreamError.fromFailure('http://d0', Object.assign(new Error('refused'), { code: 'ECONNREFUSED' })),
      UpstreamError.fromStatus('http://d0', 503, 'proxy says no'),
    ]) {
      const recorded = recordingLogger();
      const log = eventLog();
      const decode: Engine<unknown> = async () => {
        throw failure;
      };
      await collect(
        await runFlow({
          prefill: stoppedPrefill().run,
          decode,
          decodeWorkers: new WorkerPool(['d0']),
          onEvent: log.onEvent,
          logger: recorded.logger,
        }),
      );
      await flush();
      expect(log.of('handoffReleased')).toMatchObject([{ freed: false, error: failure }]);
      expect(recorded.records.filter((record) => record.level === 'warn').map((record) => record.message)).toEqual([
        'Could not release the KV of a handoff no decode worker took; it waits for the engine to free it',
      ]);
    }
  });

  it('a decode that serves the release (it takes the KV, computes a token) frees it too; an error item inside it does not', async () => {
    const served = engine(() =>
      new ScriptedSource([Annotated.fromData({ token_ids: [1], finish_reason: 'length' })]).end(),
    );
    const log = eventLog();
    await collect(
      await runFlow({
        prefill: stoppedPrefill().run,
        decode: served.run,
        decodeWorkers: new WorkerPool(['d0']),
        onEvent: log.onEvent,
      }),
    );
    await flush();
    expect(log.of('handoffReleased')).toMatchObject([{ freed: true }]);
    const failing = engine(() => new ScriptedSource([Annotated.fromError('KV transfer failed')]).end());
    const second = eventLog();
    await collect(
      await runFlow({
        prefill: stoppedPrefill().run,
        decode: failing.run,
        decodeWorkers: new WorkerPool(['d0']),
        onEvent: second.onEvent,
      }),
    );
    await flush();
    expect(second.of('handoffReleased')).toMatchObject([{ freed: false }]);
  });

  it('no release without a handoff to free, without a decode pool, or for a connector without one', async () => {
    const cases = [
      { prefill: stoppedPrefill(null), connector: vllmNixl, pool: true },
      { prefill: stoppedPrefill({ do_remote_prefill: false }), connector: vllmNixl, pool: true },
      { prefill: stoppedPrefill(), connector: vllmNixl, pool: false },
      { prefill: stoppedPrefill({ ctx_request_id: 7 }), connector: trtllmContextFirst, pool: true },
    ];
    for (const { prefill, connector, pool } of cases) {
      const decode = refusingDecode();
      const decodeWorkers = new WorkerPool(['d0']);
      const log = eventLog();
      const items = await collect(
        await runFlow({
          prefill: prefill.run,
          decode: decode.run,
          connector,
          ...(pool ? { decodeWorkers } : {}),
          onEvent: log.onEvent,
        }),
      );
      expect(items.map((item) => item.data?.finish_reason)).toEqual(['stop']);
      expect(decode.calls).toEqual([]);
      expect(log.of('handoffReleased')).toEqual([]);
      expect(decodeWorkers.inFlight('d0')).toBe(0);
    }
  });

  it('a release that does not answer is killed at the clean-up budget', async () => {
    vi.useFakeTimers();
    const contexts: Array<{ isKilled(): boolean }> = [];
    const hanging: Engine<unknown> = (_body, context) => {
      contexts.push(context);
      return new Promise((_, reject) => {
        context.killed().then(() => reject(Object.assign(new Error('aborted'), { name: 'AbortError' })));
      });
    };
    const log = eventLog();
    const decodeWorkers = new WorkerPool(['d0']);
    const stream = await runFlow({
      prefill: stoppedPrefill().run,
      decode: hanging,
      decodeWorkers,
      cleanupBudgetMs: 20,
      onEvent: log.onEvent,
    });
    await collect(stream);
    expect(decodeWorkers.inFlight('d0')).toBe(1);
    await vi.advanceTimersByTimeAsync(20);
    expect(contexts[0]?.isKilled()).toBe(true);
    expect(log.of('handoffReleased')).toMatchObject([{ freed: false }]);
    expect(log.types().at(-1)).toBe('settled');
    expect(decodeWorkers.inFlight('d0')).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('what a release reports of itself', () => {
  /** One request whose prefill finished it, the release answered by `decode`; its event and log. */
  async function release(decode: Engine<unknown>) {
    const recorded = recordingLogger();
    const log = eventLog();
    await collect(
      await runFlow({
        context: new Controller('req-rel'),
        prefill: stoppedPrefill().run,
        decode,
        decodeWorkers: new WorkerPool(['d0']),
        onEvent: log.onEvent,
        logger: recorded.logger,
      }),
    );
    await flush();
    const [event] = log.of('handoffReleased');
    const record = recorded.records.find((each) =>
      String(each.message).includes('the KV of a handoff no decode worker took'),
    );
    return { event, record };
  }
  const failingWith =
    (status: number): Engine<unknown> =>
    async () => {
      throw UpstreamError.fromStatus('http://d0', status, 'no');
    };

  it('a release decode served: freed, no error, logged at debug with the request id', async () => {
    const { event, record } = await release(
      engine(() => new ScriptedSource([Annotated.fromData({ token_ids: [1], finish_reason: 'length' })]).end()).run,
    );
    expect(event).toMatchObject({ freed: true });
    expect(event).not.toHaveProperty('error');
    expect(record).toEqual({
      level: 'debug',
      fields: { requestId: 'req-rel' },
      message: 'Released the KV of a handoff no decode worker took',
    });
  });

  it.each([
    [400, true],
    [404, true],
    [499, true],
    [500, false],
    [502, false],
  ])("a release answered %i: freed %s (a handler's answer below 500 frees the KV)", async (status, freed) => {
    const { event, record } = await release(failingWith(status));
    expect(event).toMatchObject({ freed, error: { status } });
    expect(record).toMatchObject({
      level: freed ? 'debug' : 'warn',
      fields: { requestId: 'req-rel', err: { status } },
    });
  });
});

describe('the KV of a handoff whose decode worker could not be reached is released through another decode worker', () => {
  /** A prefill that hands off with vLLM's parameters (its worker holds the KV for a remote decode). */
  const handingOff = () =>
    engine(() =>
      new ScriptedSource([
        Annotated.fromData<LLMEngineOutput>({ token_ids: [2], finish_reason: 'length', disaggregated_params: pinned }),
      ]).end(),
    ).run;
  const refused = (worker: unknown) =>
    UpstreamError.fromFailure(
      `http://${String(worker)}/v1/completions`,
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    );
  /** d0 is down (refused); any other decode worker refuses the release model as vLLM does. */
  function decodeFleet() {
    const calls: Array<{ body: Record<string, unknown>; worker: unknown }> = [];
    const run: Engine<unknown> = async (body, _context, worker) => {
      calls.push({ body, worker });
      if (worker === 'd0') throw refused(worker);
      throw UpstreamError.fromStatus(`http://${String(worker)}`, 404, 'The model does not exist.');
    };
    return { run, calls };
  }

  it('without retries the request fails with the refusal, and the handoff goes to d1 to be freed', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd1']);
    const decode = decodeFleet();
    const log = eventLog();
    await expect(
      runFlow({ prefill: handingOff(), decode: decode.run, decodeWorkers, onEvent: log.onEvent }),
    ).rejects.toMatchObject({
      code: 'DISAGG_UPSTREAM_CONNECTION',
    });
    await flush();
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
    expect(decode.calls[1]?.body).toMatchObject({ model: RELEASE_MODEL, kv_transfer_params: pinned, max_tokens: 1 });
    expect(log.of('handoffReleased')).toMatchObject([{ freed: true }]);
    expect(log.types().at(-1)).toBe('settled');
    expect([decodeWorkers.inFlight('d0'), decodeWorkers.inFlight('d1')]).toEqual([0, 0]);
  });

  it('with retries spent on unreachable workers, the release goes to one not tried', async () => {
    const decodeWorkers = new WorkerPool(['d0', 'd2', 'd1'], { selection: (candidates) => candidates[0] as string });
    const calls: unknown[] = [];
    const decode: Engine<unknown> = async (body, _context, worker) => {
      calls.push([worker, body.model]);
      if (worker !== 'd1') throw refused(worker);
      throw UpstreamError.fromStatus('http://d1', 404, 'The model does not exist.');
    };
    await expect(
      runFlow({
        prefill: handingOff(),
        decode,
        decodeWorkers,
        retryDecode: (_error, attempt) => (attempt < 1 ? 0 : undefined),
      }),
    ).rejects.toMatchObject({ code: 'DISAGG_UPSTREAM_CONNECTION' });
    await flush();
    expect(calls).toEqual([
      ['d0', 'm'],
      ['d2', 'm'],
      ['d1', RELEASE_MODEL],
    ]);
    expect(decodeWorkers.inFlight('d1')).toBe(0);
  });

  it('with no other decode worker in rotation, nothing is sent: the KV waits for the engine', async () => {
    const decode = decodeFleet();
    const log = eventLog();
    await expect(
      runFlow({
        prefill: handingOff(),
        decode: decode.run,
        decodeWorkers: new WorkerPool(['d0']),
        onEvent: log.onEvent,
      }),
    ).rejects.toMatchObject({ code: 'DISAGG_UPSTREAM_CONNECTION' });
    await flush();
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0']);
    expect(log.of('handoffReleased')).toEqual([]);
  });

  it('a decode worker that was reached and refused is not sent a release: vLLM frees what its decode refused', async () => {
    const calls: unknown[] = [];
    const decode: Engine<unknown> = async (_body, _context, worker) => {
      calls.push(worker);
      throw UpstreamError.fromStatus(`http://${String(worker)}`, 503, 'busy');
    };
    await expect(
      runFlow({ prefill: handingOff(), decode, decodeWorkers: new WorkerPool(['d0', 'd1']) }),
    ).rejects.toMatchObject({
      code: 'DISAGG_UPSTREAM_STATUS',
    });
    await flush();
    expect(calls).toEqual(['d0']);
  });
});
