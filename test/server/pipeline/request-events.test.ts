import { afterEach, describe, expect, it, vi } from 'vitest';
import { UpstreamError } from '../../../src/http/upstream-error.js';
import { requestEvents } from '../../../src/server/pipeline/request-events.js';
import { flowEvent, proxyState } from '../../support/proxy-state.js';

const unreachable = (url: string) =>
  UpstreamError.fromFailure(
    `${url}/v1/completions`,
    Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
  );
const brokenOff = (url: string) =>
  UpstreamError.fromFailure(
    `${url}/v1/completions`,
    Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
    { afterResponse: true },
  );

describe('requestEvents: retries', () => {
  it("a decode retry is counted as decode's, charged to the decode worker routed, logged, and the request names the new worker", async () => {
    const { proxy, p0, d0, d1, health, logs, counts } = proxyState();
    const events = requestEvents(proxy);
    events.onEvent(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    const error = unreachable(d0.url);
    events.onEvent(
      flowEvent({ type: 'decodeRetried', attempt: 1, error, delayMs: 12.4, decodeWorker: d1, fromWorker: d0 }),
    );
    expect(await counts('disagg_retries_total')).toEqual({ 'leg=decode': 1 });
    expect(await counts('disagg_worker_legs_total')).toEqual({ 'role=decode,worker=decode-0,outcome=retried': 1 });
    expect(await counts('disagg_worker_failures_total')).toEqual({
      'role=decode,worker=decode-0,class=unreachable': 1,
    });
    expect(health.noteFailure).toHaveBeenCalledWith(error, { decode: d0 });
    expect(logs.map((log) => log.fields)).toEqual([
      { requestId: 'r1', attempt: 1, leg: 'decode', worker: 'decode-0', url: d0.url, delayMs: 12, err: error },
    ]);
    expect(logs[0]?.message).toMatch(/^Retrying decode on another worker with the same handoff/);
    expect(events.routed).toMatchObject({ prefillWorker: p0, decodeWorker: d1 });
  });

  it("a retry from prefill after a failure that is no leg's counts as a prefill retry, on the prefill worker", async () => {
    const { proxy, p0, d0, logs, counts } = proxyState();
    const events = requestEvents(proxy);
    const error = new Error('the rendezvous failed');
    events.onEvent(
      flowEvent({ type: 'prefillRetried', attempt: 1, error, delayMs: 3, prefillWorker: p0, decodeWorker: d0 }),
    );
    expect(await counts('disagg_retries_total')).toEqual({ 'leg=prefill': 1 });
    expect(await counts('disagg_worker_legs_total')).toEqual({ 'role=prefill,worker=prefill-0,outcome=retried': 1 });
    expect(logs.map((log) => log.fields)).toEqual([
      { requestId: 'r1', attempt: 0, leg: 'prefill', worker: 'prefill-0', url: p0.url, delayMs: 3, err: error },
    ]);
    // The prefill pool has this one worker: the retry goes to it again, and the log says so.
    expect(logs.map((log) => log.message)).toEqual([
      'Retrying the request on the same worker: it is the only prefill worker in rotation (nothing was sent to the client yet)',
    ]);
  });

  it("a retry from prefill of an aggregated request (no prefill worker) counts no worker's leg and logs no worker", async () => {
    const { proxy, d0, logs, counts } = proxyState();
    const events = requestEvents(proxy);
    const error = new Error('the rendezvous failed');
    events.onEvent(flowEvent({ type: 'prefillRetried', attempt: 1, error, delayMs: 3, decodeWorker: d0 }));
    expect(await counts('disagg_retries_total')).toEqual({ 'leg=prefill': 1 });
    expect(await counts('disagg_worker_legs_total')).toEqual({});
    expect(logs.map((log) => log.fields)).toEqual([
      { requestId: 'r1', attempt: 0, leg: 'prefill', worker: undefined, delayMs: 3, err: error },
    ]);
  });
});

describe('requestEvents: a retry says where it goes', () => {
  it('a request retried with other workers of the pool in rotation goes on another; with none, the log says none', () => {
    const { proxy, d0, d1, logs } = proxyState();
    const events = requestEvents(proxy);
    const error = new Error('busy');
    const retried = flowEvent({
      type: 'prefillRetried',
      attempt: 1,
      error,
      delayMs: 0,
      leg: 'decode',
      decodeWorker: d0,
    });
    events.onEvent(retried);
    proxy.pools.all()[0]?.decode.setAvailable(d0, false);
    proxy.pools.all()[0]?.decode.setAvailable(d1, false);
    events.onEvent(retried);
    expect(logs.map((log) => log.message)).toEqual([
      'Retrying the request on another worker (nothing was sent to the client yet)',
      'Retrying the request with no decode worker in rotation (nothing was sent to the client yet)',
    ]);
  });

  it('a decode handoff sent again to the worker that failed (the only one in rotation) says it is the same worker', () => {
    const { proxy, d0, logs } = proxyState();
    const events = requestEvents(proxy);
    const error = new Error('connect ECONNREFUSED');
    events.onEvent(
      flowEvent({ type: 'decodeRetried', attempt: 1, error, delayMs: 0, decodeWorker: d0, fromWorker: d0 }),
    );
    expect(logs[0]?.message).toBe(
      'Retrying decode on the same worker with the same handoff (it is the only decode worker in rotation): it was never reached, so the prefill worker still holds the KV (nothing was sent to the client yet)',
    );
  });
});

describe('requestEvents: migrations', () => {
  it('a stream that broke and went on elsewhere is charged to the worker that broke; one that did not is left to its answer', async () => {
    const { proxy, d0, d1, health, counts } = proxyState();
    const events = requestEvents(proxy);
    const broke = brokenOff(d0.url);
    const migration = { type: 'migration', attempt: 1, reason: 'stream_error', generatedTokens: 3 } as const;
    events.onEvent(flowEvent({ ...migration, outcome: 'migrated', error: broke, fromWorker: d0, toWorker: d1 }));
    const later = brokenOff(d1.url);
    events.onEvent(
      flowEvent({ ...migration, attempt: 2, outcome: 'refused', why: 'limit', error: later, fromWorker: d1 }),
    );
    events.onEvent(
      flowEvent({ ...migration, attempt: 2, outcome: 'failed', why: 'no worker', error: later, fromWorker: d1 }),
    );
    expect(await counts('disagg_migrations_total')).toEqual({
      'reason=stream_error,outcome=migrated': 1,
      'reason=stream_error,outcome=refused': 1,
      'reason=stream_error,outcome=failed': 1,
    });
    expect(health.noteFailure.mock.calls).toEqual([[broke, { decode: d0 }]]);
    expect(await counts('disagg_worker_failures_total')).toEqual({ 'role=decode,worker=decode-0,class=broken-off': 1 });
  });
});

describe('requestEvents: the KV silence clock', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /** The proxy's state with `kv.sent` recorded as [worker name, ms after routing]. */
  function watched() {
    vi.useFakeTimers({ now: 5_000, toFake: ['Date'] });
    const state = proxyState();
    const sent: Array<[string, number]> = [];
    vi.spyOn(state.proxy.kv, 'sent').mockImplementation((worker, at) => {
      sent.push([state.proxy.nameOf(worker), (at ?? 0) - 5_000]);
    });
    return { ...state, sent };
  }

  it('the prefill worker is told once, when prefill answered, dated when the request was routed (its engine publishes before it answers)', () => {
    const { proxy, p0, d0, sent } = watched();
    const events = requestEvents(proxy, undefined, () => 64);
    events.onEvent(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    events.onEvent(flowEvent({ type: 'prefillDispatched' }));
    vi.advanceTimersByTime(40);
    expect(sent).toEqual([]);
    events.onEvent(flowEvent({ type: 'prefillCompleted' }));
    events.onEvent(flowEvent({ type: 'handoff', handoff: 'params' }));
    events.onEvent(flowEvent({ type: 'firstToken' }));
    expect(sent).toEqual([['prefill-0', 0]]);
  });

  it('an aggregated request tells its decode worker at its first token; a failed prefill, or a prompt shorter than a block, tells nobody', () => {
    const { proxy, p0, d0, sent } = watched();
    const aggregated = requestEvents(proxy, undefined, () => 64);
    aggregated.onEvent(flowEvent({ type: 'routed', strategy: 'aggregated', decodeWorker: d0 }));
    aggregated.onEvent(flowEvent({ type: 'firstToken' }));
    const failed = requestEvents(proxy, undefined, () => 64);
    failed.onEvent(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    failed.onEvent(flowEvent({ type: 'prefillFailed', error: new Error('refused') }));
    const short = requestEvents(proxy, undefined, () => 15);
    short.onEvent(flowEvent({ type: 'routed', strategy: 'sequential', prefillWorker: p0, decodeWorker: d0 }));
    short.onEvent(flowEvent({ type: 'prefillCompleted' }));
    expect(sent).toEqual([['decode-0', 0]]);
  });

  it('a prompt whose every whole block the worker was expected to hold stores nothing new: not told', () => {
    const { proxy, p0, d0, sent } = watched();
    for (const predictedCachedTokens of [64, 48]) {
      const events = requestEvents(proxy, undefined, () => 70);
      events.onEvent(
        flowEvent({
          type: 'routed',
          strategy: 'sequential',
          prefillWorker: p0,
          decodeWorker: d0,
          predictedCachedTokens,
        }),
      );
      events.onEvent(flowEvent({ type: 'prefillCompleted' }));
    }
    expect(sent).toEqual([['prefill-0', 0]]);
  });
});
