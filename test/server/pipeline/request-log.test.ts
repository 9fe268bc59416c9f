import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import type { Strategy } from '../../../src/flow/events.js';
import { requestEvents } from '../../../src/server/pipeline/request-events.js';
import { logRequest } from '../../../src/server/pipeline/request-log.js';
import { flowEvent, proxyState } from '../../support/proxy-state.js';

/** Logs one request whose flow emitted `events`, answered 200; its log line's fields. */
function logged(
  state: ReturnType<typeof proxyState>,
  events: Parameters<ReturnType<typeof requestEvents>['onEvent']>[0][],
) {
  const seen = requestEvents(state.proxy);
  for (const event of events) seen.onEvent(event);
  const res = { statusCode: 200 } as ServerResponse;
  logRequest(state.proxy, {
    requestId: 'r1',
    clientRequestId: undefined,
    route: 'completions',
    res,
    events: seen,
    started: performance.now(),
    failure: undefined,
    tenant: 'acme',
  });
  const line = state.logs.find((log) => log.message === 'request finished');
  return line?.fields as Record<string, unknown>;
}

describe('logRequest: the one log line of a request, and its legs counted', () => {
  it.each([
    ['sequential', 'disaggregated-sequential'],
    ['concurrent', 'disaggregated-concurrent'],
    ['early', 'disaggregated-early'],
    ['aggregated', 'skipped-prefill'],
  ] as const)('a request routed %s is logged as %s, the name its answers carry', (strategy: Strategy, named) => {
    const state = proxyState();
    const line = logged(state, [
      flowEvent({ type: 'routed', strategy, prefillWorker: state.p0, decodeWorker: state.d0 }),
      flowEvent({ type: 'finished', outcome: 'success' }),
    ]);
    expect(line).toMatchObject({
      requestId: 'r1',
      route: 'completions',
      tenant: 'acme',
      strategy: named,
      prefillWorker: 'prefill-0',
      prefillUrl: state.p0.url,
      decodeWorker: 'decode-0',
      decodeUrl: state.d0.url,
      outcome: 'success',
      status: 200,
    });
  });

  it('an aggregated request counts a leg of its decode worker only, and its success is credited to that worker alone', async () => {
    const state = proxyState();
    const line = logged(state, [
      flowEvent({ type: 'routed', strategy: 'aggregated', reason: 'short-prompt', decodeWorker: state.d0 }),
      // As the flow's recorder names them: the workers that served it.
      flowEvent({ type: 'finished', outcome: 'success', decodeWorker: state.d0 }),
    ]);
    expect(await state.counts('disagg_worker_legs_total')).toEqual({
      'role=decode,worker=decode-0,outcome=success': 1,
    });
    expect(state.health.noteSuccess).toHaveBeenCalledWith({ prefill: undefined, decode: state.d0 });
    expect(line).toMatchObject({ aggregatedBecause: 'short-prompt', prefillWorker: undefined });
  });

  it('a request that failed before any worker was chosen is logged and counted with no worker', async () => {
    const state = proxyState();
    const line = logged(state, [flowEvent({ type: 'finished', outcome: 'failure', leg: 'prefill' })]);
    expect(line).toMatchObject({
      requestId: 'r1',
      outcome: 'failure',
      leg: 'prefill',
      prefillWorker: undefined,
      decodeWorker: undefined,
      strategy: undefined,
    });
    expect(await state.counts('disagg_worker_legs_total')).toEqual({});
    expect(state.health.noteSuccess).not.toHaveBeenCalled();
  });
});
