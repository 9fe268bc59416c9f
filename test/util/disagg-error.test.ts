import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { CleanupError } from '../../src/flow/decode-leg.js';
import { HandoffFieldError } from '../../src/flow/handoff-fields.js';
import { NoWorkerError } from '../../src/flow/worker-pool.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { RequestError } from '../../src/http/node-server.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { AnnotatedError } from '../../src/protocol/annotated.js';
import { ConfigError } from '../../src/server/options.js';
import { ShutdownError } from '../../src/server/pipeline/error-answers.js';
import { branded, DisaggError } from '../../src/util/disagg-error.js';

/** One instance of every error class the library throws, with the class that made it. */
const ERRORS = [
  [PrefillError, new PrefillError('prefill', 'lost'), 'DISAGG_PREFILL_FAILED'],
  [PrefillError, new PrefillError('not_activated'), 'DISAGG_PREFILL_NOT_ACTIVATED'],
  [PrefillError, new PrefillError('no_disaggregated_params', 'x'), 'DISAGG_PREFILL_NO_HANDOFF_PARAMS'],
  [UpstreamError, UpstreamError.fromStatus('http://w', 503, 'busy'), 'DISAGG_UPSTREAM_STATUS'],
  [
    UpstreamError,
    UpstreamError.fromFailure('http://w', Object.assign(new Error('x'), { code: 'ECONNRESET' })),
    'DISAGG_UPSTREAM_CONNECTION',
  ],
  [UpstreamError, UpstreamError.fromFailure('http://w', new SyntaxError('x')), 'DISAGG_UPSTREAM_PROTOCOL'],
  [DeadlineError, new DeadlineError('idle', 5), 'DISAGG_DEADLINE_EXCEEDED'],
  [CleanupError, new CleanupError('r', 5), 'DISAGG_CLEANUP_EXPIRED'],
  [NoWorkerError, new NoWorkerError(2), 'DISAGG_NO_WORKER'],
  [HandoffFieldError, new HandoffFieldError(['transfer_id']), 'DISAGG_HANDOFF_FIELD'],
  [AnnotatedError, new AnnotatedError('decode OOM'), 'DISAGG_STREAM_ERROR'],
  [ConfigError, new ConfigError('bad'), 'DISAGG_CONFIG'],
  [RequestError, new RequestError(413, 'big'), 'DISAGG_BODY_TOO_LARGE'],
  [ShutdownError, new ShutdownError(), 'DISAGG_SHUTTING_DOWN'],
] as const;

describe('one error model', () => {
  it.each(ERRORS.map(([type, error, code]) => [type.is.brand, error, code, type] as const))(
    '%s: a DisaggError with its stable code, its name, and is() that works detached',
    (brand, error, code, type) => {
      expect(error).toBeInstanceOf(DisaggError);
      expect(error.code).toBe(code);
      expect(error.name).toBe(brand);
      const is = type.is;
      expect(is(error)).toBe(true);
      expect(DisaggError.is(error)).toBe(true);
      expect([new Error('x'), null, 'PrefillError', { code }].some((value) => is(value))).toBe(false);
      // No other class claims it.
      for (const [other] of ERRORS) if (other !== type) expect(other.is(error)).toBe(false);
    },
  );

  it('the brand is on the instance, invisible to JSON, and recognised from another copy of the library', () => {
    const error = new DeadlineError('total', 100);
    expect(JSON.parse(JSON.stringify(error))).not.toHaveProperty('brands');
    expect(Object.keys(error)).not.toContain(Symbol.for('disagg.error.brands'));
    // An error made by another copy carries the same registered symbol.
    const foreign = Object.defineProperty(new Error('x'), Symbol.for('disagg.error.brands'), {
      value: ['DeadlineError', 'DisaggError'],
    });
    expect(DeadlineError.is(foreign)).toBe(true);
    expect(DisaggError.is(foreign)).toBe(true);
    expect(PrefillError.is(foreign)).toBe(false);
  });

  it('a subclass declares its brand in one line and is recognised as itself and as its parents', () => {
    class SlowPrefillError extends PrefillError {
      static override readonly is = branded<SlowPrefillError>('SlowPrefillError');
    }
    const error = new SlowPrefillError('prefill', 'slow');
    expect(error.name).toBe('SlowPrefillError');
    expect([SlowPrefillError.is(error), PrefillError.is(error), DisaggError.is(error)]).toEqual([true, true, true]);
    expect(SlowPrefillError.is(new PrefillError('prefill', 'x'))).toBe(false);
    expect(error.code).toBe('DISAGG_PREFILL_FAILED');
  });

  it('the cause is kept', () => {
    const cause = new Error('socket hang up');
    expect(new PrefillError('prefill', 'lost', { cause }).cause).toBe(cause);
    expect(UpstreamError.fromFailure('http://w', Object.assign(cause, { code: 'ECONNRESET' })).cause).toBe(cause);
  });
});
