import { describe, expect, it, vi } from 'vitest';
import type { Engine } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, ScriptedSource } from '../support/async.js';
import { client, eventLog, handoffItem, runFlow } from '../support/flow.js';

describe('refuseDecision: a look at the first decision before either leg is called', () => {
  it('the error it returns is the answer: no leg is called, no event, the leases given back untouched', async () => {
    const prefillWorkers = new WorkerPool(['p0']);
    const decodeWorkers = new WorkerPool(['d0']);
    const prefill = vi.fn<Engine<unknown>>();
    const decode = vi.fn<Engine<unknown>>();
    const log = eventLog();
    const input = new RoutingInput(client);
    const shed = new Error('shed');
    const refuseDecision = vi.fn(() => shed);
    const failure = await runFlow({
      prefill,
      decode,
      prefillWorkers,
      decodeWorkers,
      input,
      refuseDecision,
      onEvent: log.onEvent,
    }).catch((error: unknown) => error);
    expect(failure).toBe(shed);
    expect(refuseDecision).toHaveBeenCalledExactlyOnceWith(
      expect.objectContaining({ strategy: 'disaggregated', prefill: expect.objectContaining({ worker: 'p0' }) }),
      input,
    );
    expect(prefill).not.toHaveBeenCalled();
    expect(decode).not.toHaveBeenCalled();
    expect(log.events).toEqual([]);
    expect([prefillWorkers.inFlight('p0'), decodeWorkers.inFlight('d0')]).toEqual([0, 0]);
  });

  it("is not asked of a retry's decision: a worker was called by then; undefined lets the request on", async () => {
    const calls: unknown[] = [];
    const prefill: Engine<unknown> = async (_body, context, worker) => {
      calls.push(worker);
      if (worker === 'p0') throw UpstreamError.fromStatus('http://p0', 500, 'prefill OOM');
      return new ResponseStream(new ScriptedSource([handoffItem()]).end(), context);
    };
    const refuseDecision = vi.fn(() => undefined);
    const stream = await runFlow({
      prefill,
      prefillWorkers: new WorkerPool(['p0', 'p1'], { selection: 'round-robin' }),
      decodeWorkers: new WorkerPool(['d0']),
      retryPrefill: (_error, attempt) => (attempt === 0 ? 0 : undefined),
      refuseDecision,
    });
    expect((await collect(stream)).map((item) => item.data?.token_ids)).toEqual([[1], [2], []]);
    expect(calls).toEqual(['p0', 'p1']);
    expect(refuseDecision).toHaveBeenCalledOnce();
  });

  it('one that is not a function is a TypeError naming it', async () => {
    await expect(runFlow({ refuseDecision: 'no' as never })).rejects.toThrow(
      /refuseDecision must be a function \(decision, input\) => Error \| undefined, got/,
    );
  });
});
