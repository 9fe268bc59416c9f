import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';

const url = 'http://10.0.0.2:8000/v1/completions';

describe('UpstreamError', () => {
  it("an error status keeps the status and body, and says the worker's own words", () => {
    const body = JSON.stringify({ object: 'error', error: { message: 'max_tokens must be at most 4096', code: 400 } });
    const error = UpstreamError.fromStatus(url, 400, body);
    expect(error).toMatchObject({ name: 'UpstreamError', kind: 'status', status: 400, body, url, retryable: false });
    expect(error.message).toBe(`${url} answered 400: max_tokens must be at most 4096`);
    expect(UpstreamError.fromStatus(url, 502, 'Bad Gateway').message).toBe(`${url} answered 502: Bad Gateway`);
    expect(UpstreamError.fromStatus(url, 503, '').message).toContain('(empty body)');
    expect(UpstreamError.fromStatus(url, 500, JSON.stringify({ detail: 'engine dead' })).message).toContain(
      'engine dead',
    );
  });

  it('5xx and connection failures are retryable, also through a PrefillError; 4xx and protocol errors are not', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.2:8000'), { code: 'ECONNREFUSED' });
    const connection = UpstreamError.fromFailure(url, refused);
    expect(connection).toMatchObject({
      kind: 'connection',
      code: 'DISAGG_UPSTREAM_CONNECTION',
      networkCode: 'ECONNREFUSED',
      retryable: true,
      cause: refused,
    });
    expect(PrefillError.from(connection).retryable).toBe(true);
    expect(PrefillError.from(UpstreamError.fromStatus(url, 503, 'busy')).retryable).toBe(true);
    expect(PrefillError.from(UpstreamError.fromStatus(url, 404, '{"error":{"message":"no model"}}')).retryable).toBe(
      false,
    );
    const protocol = UpstreamError.fromFailure(url, new SyntaxError('Unexpected token <'));
    expect(protocol).toMatchObject({ kind: 'protocol', retryable: false });
    expect(protocol.message).toContain('Unexpected token <');
  });

  it("undici's nested socket error is found by its code; an UpstreamError is kept as it is", () => {
    const nested = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }),
    });
    expect(UpstreamError.fromFailure(url, nested)).toMatchObject({ kind: 'connection', networkCode: 'UND_ERR_SOCKET' });
    const same = UpstreamError.fromStatus(url, 500, 'x');
    expect(UpstreamError.fromFailure(url, same)).toBe(same);
    expect(UpstreamError.is({ [Symbol.for('disagg.error.brands')]: ['UpstreamError', 'DisaggError'] })).toBe(true);
    expect(UpstreamError.is(new Error('x'))).toBe(false);
  });

  it.each([
    ['an OpenAI error object', { error: { message: 'bad max_tokens' } }, 'bad max_tokens'],
    ['an error string', { error: 'model not loaded' }, 'model not loaded'],
    ["vLLM's flat error", { object: 'error', message: 'engine dead' }, 'engine dead'],
    ["FastAPI's detail", { detail: 'Not Found' }, 'Not Found'],
    ['an error object without a message', { error: { code: 7 } }, '{"error":{"code":7}}'],
    ['JSON without any of them', { other: 1 }, '{"other":1}'],
  ])("the worker's own words from %s", (_, body, words) => {
    expect(UpstreamError.fromStatus(url, 500, JSON.stringify(body)).message).toBe(`${url} answered 500: ${words}`);
  });

  it('a long body is cut at 500 characters, marked with ...', () => {
    const message = UpstreamError.fromStatus(url, 500, 'x'.repeat(600)).message;
    expect(message).toBe(`${url} answered 500: ${'x'.repeat(500)}...`);
    expect(UpstreamError.fromStatus(url, 500, 'y'.repeat(500)).message).toBe(`${url} answered 500: ${'y'.repeat(500)}`);
  });

  it('a failure with a code that names no connection fault, or none at all, is a protocol error keeping its cause', () => {
    for (const failure of [Object.assign(new Error('odd'), { code: 'EODD' }), new Error('odd')]) {
      const error = UpstreamError.fromFailure(url, failure);
      expect(error).toMatchObject({ kind: 'protocol', cause: failure, afterResponse: false });
      expect(error.message).toBe(`${url} answered something unexpected: odd`);
    }
    const late = UpstreamError.fromFailure(url, new Error('odd'), { afterResponse: true });
    expect(late.afterResponse).toBe(true);
  });

  it('a body of blanks is an empty body and a text body is trimmed; only a failure in a stream is after the response', () => {
    expect(UpstreamError.fromStatus(url, 503, ' \n ').message).toBe(`${url} answered 503: (empty body)`);
    expect(UpstreamError.fromStatus(url, 502, '\n  upstream gone \n').message).toBe(
      `${url} answered 502: upstream gone`,
    );
    expect(UpstreamError.fromStatus(url, 500, 'x').afterResponse).toBe(false);
    const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    expect(UpstreamError.fromFailure(url, reset)).toMatchObject({ afterResponse: false });
    expect(UpstreamError.fromFailure(url, reset).message).toBe(
      `${url} could not be reached or broke off: read ECONNRESET (ECONNRESET)`,
    );
    const broken = UpstreamError.fromFailure(url, reset, { afterResponse: true });
    expect(broken).toMatchObject({ afterResponse: true, kind: 'connection' });
    expect(broken.message).toBe(`${url} broke off its answer: read ECONNRESET (ECONNRESET)`);
  });
});
