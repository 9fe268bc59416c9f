// The one classifier of a failure, as health, the retries and the errors' own `retryable` read
// it: a deadline first, whatever else it wraps; a worker's error by what it met; anything else.
import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { classifyFailure } from '../../src/flow/failure-rules.js';
import { UpstreamError } from '../../src/http/upstream-error.js';

const url = 'http://d0:8000/v1/completions';
const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });

describe('classifyFailure', () => {
  it("a worker's error by what it met, with the worker's error (its URL) found in the causes", () => {
    const busy = UpstreamError.fromStatus(url, 503, 'busy');
    expect(classifyFailure(busy)).toEqual({ kind: 'worker-error', upstream: busy });
    const wrapped = new Error('the flow failed', { cause: busy });
    expect(classifyFailure(wrapped)).toEqual({ kind: 'worker-error', upstream: busy });
    const gone = UpstreamError.fromFailure(url, refused);
    expect(classifyFailure(gone)).toEqual({ kind: 'unreachable', upstream: gone });
    const broken = UpstreamError.fromFailure(url, refused, { afterResponse: true });
    expect(classifyFailure(broken)).toEqual({ kind: 'broken-off', upstream: broken });
    const told = UpstreamError.fromStatus(url, 400, 'bad');
    expect(classifyFailure(told).kind).toBe('refused');
  });

  it('a deadline is a deadline, even around a worker error (which is still named)', () => {
    const deadline = new DeadlineError('decodeFirstToken', 100, 'decode');
    expect(classifyFailure(deadline)).toEqual({ kind: 'deadline', upstream: undefined });
    const busy = UpstreamError.fromStatus(url, 503, 'busy');
    const late = new DeadlineError('decodeFirstToken', 100, 'decode');
    Object.defineProperty(late, 'cause', { value: busy });
    expect(classifyFailure(new Error('the flow failed', { cause: late }))).toEqual({
      kind: 'deadline',
      upstream: busy,
    });
  });

  it('anything else is other, without a worker', () => {
    for (const error of [new Error('client left'), 'text', undefined, refused]) {
      expect(classifyFailure(error)).toEqual({ kind: 'other', upstream: undefined });
    }
  });
});
