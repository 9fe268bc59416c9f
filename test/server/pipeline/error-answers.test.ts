import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../../src/flow/deadlines.js';
import { HandoffFieldError } from '../../../src/flow/handoff-fields.js';
import { NoWorkerError } from '../../../src/flow/worker-pool.js';
import { PrefillError } from '../../../src/handoff/prefill-error.js';
import { RequestError } from '../../../src/http/node-server.js';
import { UpstreamError } from '../../../src/http/upstream-error.js';
import { errorAnswer, ShutdownError } from '../../../src/server/pipeline/error-answers.js';
import { DisaggError } from '../../../src/util/disagg-error.js';

describe('errorAnswer: one table from error to HTTP status and OpenAI error type', () => {
  const url = 'http://w:8000/v1/completions';
  it.each([
    [
      "a worker's 4xx passes through",
      UpstreamError.fromStatus(url, 422, '{"error":{"message":"bad top_p"}}'),
      422,
      'invalid_request_error',
      undefined,
    ],
    [
      "a worker's 4xx on prefill, through the PrefillError",
      PrefillError.from(UpstreamError.fromStatus(url, 400, 'too long')),
      400,
      'invalid_request_error',
      'prefill',
    ],
    ["a worker's 5xx", UpstreamError.fromStatus(url, 500, 'boom'), 502, 'upstream_error', undefined],
    [
      'a connection failure',
      UpstreamError.fromFailure(url, Object.assign(new Error('refused'), { code: 'ECONNREFUSED' })),
      502,
      'upstream_error',
      undefined,
    ],
    ['a prefill failure', new PrefillError('prefill', 'KV transfer aborted'), 502, 'upstream_error', 'prefill'],
    ['a deadline', new DeadlineError('decodeFirstToken', 100), 504, 'timeout', 'decode'],
    ['no worker in rotation', new NoWorkerError(2), 503, 'service_unavailable', undefined],
    [
      'client handoff fields refused',
      new HandoffFieldError(['kv_transfer_params']),
      400,
      'invalid_request_error',
      undefined,
    ],
    ['the proxy shutting down', new ShutdownError(), 503, 'service_unavailable', undefined],
    ['a body that is not JSON', new RequestError(400, 'not JSON'), 400, 'invalid_request_error', undefined],
    ['a body over the limit', new RequestError(413, 'too big'), 413, 'invalid_request_error', undefined],
    ['no such route', new RequestError(404, 'No route GET /x'), 404, 'not_found', undefined],
    [
      'a plain error with a worker failure as its cause',
      new Error('wrapped', { cause: UpstreamError.fromStatus(url, 404, '{"error":{"message":"no such model"}}') }),
      404,
      'invalid_request_error',
      undefined,
    ],
    ['anything else', new Error('bug'), 500, 'internal_error', undefined],
  ])('%s', (_, error, status, type, leg) => {
    const answer = errorAnswer(error);
    expect(answer.status).toBe(status);
    // The message as the error says it, any address in it (the worker's URL here) made `worker`.
    const message = (error as Error).message.replaceAll('http://w:8000', 'worker');
    expect(answer.body.error).toMatchObject({ type, code: status, message, param: null });
    expect(answer.body.error.leg).toBe(leg);
  });

  it("whatever the redaction given, an address it left (one inside a worker's own words) becomes `worker`", () => {
    const error = UpstreamError.fromStatus(url, 500, '{"error":{"message":"connect ECONNREFUSED 10.0.3.7:8998"}}');
    const named = errorAnswer(error, 'decode', (text) => text.replaceAll('http://w:8000', 'decode-0'));
    expect(named.body.error.message).toBe('decode-0/v1/completions answered 500: connect ECONNREFUSED worker');
    expect(errorAnswer(error).body.error.message).toBe(
      'worker/v1/completions answered 500: connect ECONNREFUSED worker',
    );
  });

  it("a worker's 404 for the router's path (no engine error in it) is the router's fault: 502, and the client's message names no worker, address or path", () => {
    for (const body of ['404 page not found', '{"detail":"Not Found"}']) {
      const answer = errorAnswer(PrefillError.from(UpstreamError.fromStatus(url, 404, body)), undefined, (text) =>
        text.replaceAll('http://w:8000', 'prefill-0'),
      );
      expect(answer.status).toBe(502);
      expect(answer.body.error).toMatchObject({ type: 'upstream_error', code: 502, leg: 'prefill' });
      expect(answer.body.error.message).not.toMatch(/prefill-0|w:8000|\/v1\/completions/);
      expect(answer.body.error.message).toMatch(/no such route/);
    }
    // The engine's own 404 (a model it does not serve) is the request's, passed on.
    const model = '{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","code":404}}';
    expect(errorAnswer(UpstreamError.fromStatus(url, 404, model)).status).toBe(404);
    expect(errorAnswer(UpstreamError.fromStatus(url, 404, '{"object":"error","message":"no model x"}')).status).toBe(
      404,
    );
  });

  it('the leg given by the caller wins', () => {
    expect(errorAnswer(new Error('x'), 'decode').body.error.leg).toBe('decode');
  });
});

describe('errorAnswer: every code of the table', () => {
  it.each([
    ['DISAGG_BAD_REQUEST', 400, 'invalid_request_error'],
    ['DISAGG_HANDOFF_FIELD', 400, 'invalid_request_error'],
    ['DISAGG_UNSUPPORTED_REQUEST', 400, 'invalid_request_error'],
    ['DISAGG_CONFIG', 400, 'invalid_request_error'],
    ['DISAGG_NOT_FOUND', 404, 'not_found'],
    ['DISAGG_WORKER_UNKNOWN', 404, 'not_found'],
    ['DISAGG_WORKER_EXISTS', 409, 'conflict'],
    ['DISAGG_WORKER_LEAVING', 409, 'conflict'],
    ['DISAGG_METHOD_NOT_ALLOWED', 405, 'invalid_request_error'],
    ['DISAGG_BODY_TOO_LARGE', 413, 'invalid_request_error'],
    ['DISAGG_OVERLOADED', 429, 'rate_limit_exceeded'],
    ['DISAGG_NO_WORKER', 503, 'service_unavailable'],
    ['DISAGG_SHUTTING_DOWN', 503, 'service_unavailable'],
    ['DISAGG_DEADLINE_EXCEEDED', 504, 'timeout'],
    ['DISAGG_PREFILL_FAILED', 502, 'upstream_error'],
    ['DISAGG_PREFILL_NOT_ACTIVATED', 502, 'upstream_error'],
    ['DISAGG_PREFILL_NO_HANDOFF_PARAMS', 502, 'upstream_error'],
    ['DISAGG_UPSTREAM_STATUS', 502, 'upstream_error'],
    ['DISAGG_UPSTREAM_CONNECTION', 502, 'upstream_error'],
    ['DISAGG_UPSTREAM_PROTOCOL', 502, 'upstream_error'],
    ['DISAGG_SOMETHING_NEW', 500, 'internal_error'],
  ])('%s is a %i %s', (code, status, type) => {
    const answer = errorAnswer(new DisaggError(code, 'what happened'));
    expect(answer).toStrictEqual({
      status,
      body: { error: { message: 'what happened', type, code: status, param: null } },
    });
  });

  it.each(['DISAGG_STREAM_ERROR', 'DISAGG_CLEANUP_EXPIRED', 'DISAGG_KV_EVENT_FORMAT', 'DISAGG_TOKENIZER'])(
    "%s has no answer of its own: a worker's failure in its causes answers for it, else a 500",
    (code) => {
      const cause = UpstreamError.fromStatus('http://w/v1/completions', 422, 'bad');
      expect(errorAnswer(new DisaggError(code, 'what happened', { cause })).status).toBe(422);
      expect(errorAnswer(new DisaggError(code, 'what happened')).status).toBe(500);
    },
  );

  it('a code named like a property of every object is no code of the table', () => {
    expect(errorAnswer(new DisaggError('constructor', 'x')).status).toBe(500);
  });

  it("a plain error with a worker's failure in its causes is answered as that failure", () => {
    const cause = UpstreamError.fromStatus('http://w/v1/completions', 503, 'busy');
    expect(errorAnswer(new Error('wrapped', { cause })).status).toBe(502);
    expect(
      errorAnswer(
        new Error('wrapped', { cause: UpstreamError.fromStatus('http://w', 404, '{"error":{"message":"no"}}') }),
      ).status,
    ).toBe(404);
    // A library error of its own kind keeps its own answer, whatever its cause.
    expect(errorAnswer(new DisaggError('DISAGG_NO_WORKER', 'none', { cause })).status).toBe(503);
  });

  it('anything thrown: its text as the message, a param only when the error names one as a string', () => {
    expect(errorAnswer(null).body.error).toStrictEqual({
      message: 'null',
      type: 'internal_error',
      code: 500,
      param: null,
    });
    expect(errorAnswer('plain words').body.error.message).toBe('plain words');
    expect(errorAnswer(Object.assign(new Error('x'), { param: 7 })).body.error.param).toBeNull();
    expect(errorAnswer(Object.assign(new Error('x'), { param: 'top_p' })).body.error.param).toBe('top_p');
  });
});
