import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { CONNECTION_ERROR_CODES, findCause, neverConnected } from '../../src/util/cause-chain.js';

const url = 'http://decode-0:8200';
const network = (code: string) => Object.assign(new Error(`connect ${code}`), { code });

describe('neverConnected: the worker cannot have seen the request', () => {
  it.each(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])(
    'a connection never made (%s), as undici reports it and wrapped by the library',
    (code) => {
      const upstream = UpstreamError.fromFailure(url, network(code));
      expect(upstream.kind).toBe('connection');
      expect(neverConnected(upstream)).toBe(true);
      expect(neverConnected(network(code))).toBe(true);
      expect(neverConnected(new Error('decode failed', { cause: upstream }))).toBe(true);
      expect(neverConnected(new UpstreamError('connection', 'refused', { url, networkCode: code }))).toBe(true);
    },
  );

  it.each(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'ETIMEDOUT', 'EHOSTUNREACH', 'UND_ERR_HEADERS_TIMEOUT'])(
    'not a connection that may have carried the request before it failed (%s)',
    (code) => {
      expect(neverConnected(UpstreamError.fromFailure(url, network(code)))).toBe(false);
    },
  );

  it('not a worker that answered: an error status, or a stream that broke after its headers', () => {
    expect(neverConnected(UpstreamError.fromStatus(url, 503, '{"error":{"message":"busy"}}'))).toBe(false);
    expect(neverConnected(UpstreamError.fromStatus(url, 429, 'slow down'))).toBe(false);
    expect(neverConnected(UpstreamError.fromFailure(url, network('ECONNREFUSED'), { afterResponse: true }))).toBe(
      false,
    );
    // A status anywhere in the chain wins over a refused connection found below it.
    const answered = Object.assign(new Error('answered 502'), { status: 502, cause: network('ECONNREFUSED') });
    expect(neverConnected(answered)).toBe(false);
  });

  it('not anything else: no code, a cancellation, a deadline, a value that is not an error', () => {
    expect(neverConnected(new Error('boom'))).toBe(false);
    expect(neverConnected(Object.assign(new Error('aborted'), { name: 'AbortError', code: 'ABORT_ERR' }))).toBe(false);
    expect(neverConnected(new PrefillError('prefill', 'failed'))).toBe(false);
    for (const value of [undefined, null, 'ECONNREFUSED', 42]) expect(neverConnected(value)).toBe(false);
  });

  it('looks at most eight deep, and a cycle of causes ends the walk', () => {
    let deep: unknown = network('ECONNREFUSED');
    for (let i = 0; i < 7; i++) deep = new Error(`level ${i}`, { cause: deep });
    expect(neverConnected(deep)).toBe(true);
    expect(neverConnected(new Error('one more', { cause: deep }))).toBe(false);
    const cycle: Error & { cause?: unknown } = new Error('a');
    cycle.cause = new Error('b', { cause: cycle });
    expect(neverConnected(cycle)).toBe(false);
  });
});

describe('the connection codes', () => {
  it('a name that does not resolve is a connection failure, retryable like a refused one', () => {
    expect(CONNECTION_ERROR_CODES.has('ENOTFOUND')).toBe(true);
    const error = UpstreamError.fromFailure(url, network('ENOTFOUND'));
    expect(error).toMatchObject({ kind: 'connection', networkCode: 'ENOTFOUND', retryable: true });
  });

  it('findCause finds the first match, itself included', () => {
    const inner = network('ECONNRESET');
    const outer = new Error('outer', { cause: inner });
    expect(findCause(outer, (candidate) => 'code' in candidate)).toBe(inner);
    expect(findCause(outer, () => true)).toBe(outer);
    expect(findCause(outer, () => false)).toBeUndefined();
  });
});
