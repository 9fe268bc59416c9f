import { afterEach, describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { HealthChecker, type HealthOptions } from '../../src/server/fleet/health.js';
import { recordingLogger } from '../support/async.js';

type Named = { url: string };
const checkers: HealthChecker[] = [];
afterEach(() => {
  vi.useRealTimers();
  for (const checker of checkers.splice(0)) checker.stop();
});

/** A checker over one prefill and one decode worker; these tests send it events, never probes. */
function setup(options: Partial<HealthOptions> = {}) {
  const prefill = new WorkerPool<Named>([{ url: 'http://p0' }]);
  const decode = new WorkerPool<Named>([{ url: 'http://d0' }]);
  const checker = new HealthChecker(
    [
      { role: 'prefill', pool: prefill },
      { role: 'decode', pool: decode },
    ],
    { logger: recordingLogger().logger, ...options },
  );
  checkers.push(checker);
  return { checker, prefill, decode, p0: prefill.workers[0] as Named, d0: decode.workers[0] as Named };
}

const refused = () => Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:8000'), { code: 'ECONNREFUSED' });
const status = (url: string, code: number) => UpstreamError.fromStatus(url, code, '{"message":"boom"}');

describe("HealthChecker.observe: what health learns from a request's events", () => {
  const breaker = { failureThreshold: 2, successThreshold: 2, openMs: 1000 };
  const base = { requestId: 'r1', elapsedMs: 1, late: false } as const;
  const unreachable = (url: string) => UpstreamError.fromFailure(`${url}/v1/completions`, refused());

  it('a decode given to another worker charges the one it left; a retry from prefill the workers of the attempt that failed', () => {
    const { checker, prefill, decode, p0, d0 } = setup();
    checker.observe({
      ...base,
      type: 'decodeRetried',
      attempt: 1,
      error: unreachable(d0.url),
      delayMs: 0,
      fromWorker: d0,
    });
    expect(decode.isAvailable(d0)).toBe(false);
    checker.observe({
      ...base,
      type: 'prefillRetried',
      attempt: 1,
      error: unreachable(p0.url),
      delayMs: 0,
      leg: 'prefill',
      prefillWorker: p0,
      decodeWorker: d0,
    });
    expect(prefill.isAvailable(p0)).toBe(false);
  });

  it('a stream migrated away charges the worker that broke; one refused or failed is left to its finish', () => {
    const { checker, decode, d0 } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    const broke = UpstreamError.fromFailure(`${d0.url}/v1/completions`, refused(), { afterResponse: true });
    const migration = { ...base, type: 'migration', attempt: 1, reason: 'stream_error', generatedTokens: 2 } as const;
    checker.observe({ ...migration, outcome: 'refused', why: 'limit', error: broke, fromWorker: d0 });
    checker.observe({ ...migration, outcome: 'failed', why: 'no worker', error: broke, fromWorker: d0 });
    expect(checker.circuit(d0)).toBe('closed');
    checker.observe({ ...migration, outcome: 'migrated', error: broke, fromWorker: d0 });
    expect([checker.circuit(d0), decode.isAvailable(d0)]).toEqual(['open', false]);
  });

  it('finished: an error is charged to the workers it names, a success closes a circuit on trial, a cancellation says nothing', async () => {
    vi.useFakeTimers();
    const { checker, p0, d0 } = setup({ breaker: { ...breaker, failureThreshold: 1, successThreshold: 1 } });
    checker.observe({ ...base, type: 'finished', outcome: 'cancelled', prefillWorker: p0, decodeWorker: d0 });
    expect(checker.circuit(d0)).toBe('closed');
    const error = status(`${d0.url}/v1/completions`, 500);
    checker.observe({ ...base, type: 'finished', outcome: 'error', error, prefillWorker: p0, decodeWorker: d0 });
    expect([checker.circuit(p0), checker.circuit(d0)]).toEqual(['closed', 'open']);
    await vi.advanceTimersByTimeAsync(breaker.openMs);
    expect(checker.circuit(d0)).toBe('half-open');
    checker.observe({ ...base, type: 'finished', outcome: 'success', prefillWorker: p0, decodeWorker: d0 });
    expect(checker.circuit(d0)).toBe('closed');
  });
});
