import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../../src/flow/deadlines.js';
import { NoWorkerError } from '../../../src/flow/worker-pool.js';
import { PrefillError } from '../../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../../src/http/upstream-error.js';
import {
  chargedWorker,
  classifyFailure,
  defaultRetries,
  FAILURE_RULES,
  RETRY_DEFAULTS,
} from '../../../src/server/fleet/failure-rules.js';

const url = 'http://decode-0:8200/v1/completions';
const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
const reset = Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' });

describe('one failure classifier, one table of what to do about each class', () => {
  it.each([
    ['a worker that refused the connection', UpstreamError.fromFailure(url, refused), 'unreachable', true, 'eject'],
    [
      'a stream that broke after the worker answered',
      UpstreamError.fromFailure(url, reset, { afterResponse: true }),
      'broken-off',
      false,
      'count',
    ],
    ['a 503', UpstreamError.fromStatus(url, 503, 'busy'), 'worker-error', true, 'count'],
    ['a 429', UpstreamError.fromStatus(url, 429, 'slow down'), 'overloaded', true, 'ignore'],
    ['a 400 (the request is at fault)', UpstreamError.fromStatus(url, 400, 'bad'), 'refused', false, 'ignore'],
    ['an answer that cannot be read', new UpstreamError('protocol', 'not JSON', { url }), 'protocol', false, 'count'],
    [
      'a worker error inside another error',
      new Error('prefill failed', { cause: UpstreamError.fromStatus(url, 500, 'x') }),
      'worker-error',
      true,
      'count',
    ],
    ['no worker in rotation', new NoWorkerError(2, 'decode'), 'other', false, 'ignore'],
  ] as const)('%s: %s, retried %s, health %s', (_what, error, kind, retry, health) => {
    expect(classifyFailure(error).kind).toBe(kind);
    expect(FAILURE_RULES[kind]).toEqual({ retry, health });
  });

  it('a deadline is never retried (waiting again doubles the wait) and says nothing of the worker', () => {
    const deadline = classifyFailure(new DeadlineError('idle', 1000));
    expect(deadline.kind).toBe('deadline');
    expect(FAILURE_RULES.deadline).toEqual({ retry: false, health: 'ignore' });
  });

  it.each([
    ['a worker that refused the connection', UpstreamError.fromFailure(url, refused)],
    ['a stream that broke after the worker answered', UpstreamError.fromFailure(url, reset, { afterResponse: true })],
    ['a 503', UpstreamError.fromStatus(url, 503, 'busy')],
    ['a 429', UpstreamError.fromStatus(url, 429, 'slow down')],
    ['a 400', UpstreamError.fromStatus(url, 400, 'bad')],
    ['an answer that cannot be read', new UpstreamError('protocol', 'not JSON', { url })],
    ['a deadline', new DeadlineError('decodeFirstToken', 1000)],
    ['no worker in rotation', new NoWorkerError(2, 'decode')],
    ['a prefill that failed with a 429', PrefillError.from(UpstreamError.fromStatus(url, 429, 'slow down'))],
    ['a prefill past its deadline', PrefillError.from(new DeadlineError('prefillFirstOutput', 1000))],
    [
      'a prefill whose stream broke off',
      PrefillError.from(UpstreamError.fromFailure(url, reset, { afterResponse: true })),
    ],
  ])("%s: the error's own retryable is its class's retry rule", (_what, error) => {
    expect(error.retryable).toBe(FAILURE_RULES[classifyFailure(error).kind].retry);
  });

  it.each([
    [503, 'worker-error'],
    [429, 'overloaded'],
    [400, 'refused'],
  ] as const)(
    "a prefill failed with another library's error of status %i: retryable as the rule of a worker's %s",
    (status, kind) => {
      const cause = Object.assign(new Error('x'), { status });
      expect(classifyFailure(UpstreamError.fromStatus(url, status, '')).kind).toBe(kind);
      expect(PrefillError.from(cause).retryable).toBe(FAILURE_RULES[kind].retry);
    },
  );

  it("keeps the worker's error, whose URL names the worker to charge", () => {
    const error = UpstreamError.fromStatus(url, 502, 'bad gateway');
    expect(classifyFailure(new Error('wrapped', { cause: error })).upstream).toBe(error);
  });
});

describe('chargedWorker: the worker a failure is charged to', () => {
  const prefill = { url: 'http://prefill-0:8100' };
  const decode = { url: 'http://decode-0:8200' };
  it('the one whose URL the error names, with the class; none for a failure of no worker', () => {
    expect(chargedWorker(UpstreamError.fromStatus(url, 503, 'busy'), { prefill, decode })).toEqual({
      role: 'decode',
      worker: decode,
      kind: 'worker-error',
    });
    expect(
      chargedWorker(UpstreamError.fromStatus('http://prefill-0:8100/v1/completions', 429, 'x'), { prefill, decode })
        ?.role,
    ).toBe('prefill');
    expect(chargedWorker(new DeadlineError('idle', 1000), { prefill, decode })).toBeUndefined();
    expect(
      chargedWorker(UpstreamError.fromStatus('http://elsewhere:1/v1', 500, 'x'), { prefill, decode }),
    ).toBeUndefined();
  });
});

describe("defaultRetries: disagg serve's retries as disaggregate options", () => {
  it('a failure that may pass on another worker waits up to the doubling backoff; others, and spent budgets, are not retried', () => {
    const { retryPrefill, retryDecode } = defaultRetries({ maxRetries: 2, initialBackoffMs: 40, maxBackoffMs: 60 });
    const unreachable = UpstreamError.fromFailure(url, refused);
    for (const retry of [retryPrefill, retryDecode]) {
      const first = retry(unreachable, 0);
      expect(first).toBeGreaterThanOrEqual(0);
      expect(first).toBeLessThanOrEqual(40);
      expect(retry(UpstreamError.fromStatus(url, 503, 'busy'), 1)).toBeLessThanOrEqual(60);
      expect(retry(unreachable, 2)).toBeUndefined();
      expect(retry(UpstreamError.fromStatus(url, 400, 'bad'), 0)).toBeUndefined();
      expect(retry(new DeadlineError('idle', 1000), 0)).toBeUndefined();
    }
  });

  it("has disagg serve's defaults, and refuses a setting that is no count, naming it", () => {
    const { retryDecode } = defaultRetries();
    const unreachable = UpstreamError.fromFailure(url, refused);
    expect(retryDecode(unreachable, RETRY_DEFAULTS.maxRetries - 1)).toBeDefined();
    expect(retryDecode(unreachable, RETRY_DEFAULTS.maxRetries)).toBeUndefined();
    expect(() => defaultRetries({ maxRetries: -1 })).toThrow(
      'defaultRetries: maxRetries must be a number of 0 or more, got -1',
    );
    expect(() => defaultRetries({ maxBackoffMs: Number.NaN })).toThrow(/maxBackoffMs/);
  });
});
