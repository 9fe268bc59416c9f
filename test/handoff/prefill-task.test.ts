import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { PrefillTask } from '../../src/handoff/prefill-task.js';
import { RequestError } from '../../src/http/node-server.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { deferred, flush, isPending, recordingLogger } from '../support/async.js';

const quiet = () => recordingLogger().logger;

describe('PrefillTask.spawn and wait (rules 1-3)', () => {
  it('starts a prefill function at once, before anyone waits', () => {
    let started = false;
    PrefillTask.spawn(
      async () => {
        started = true;
      },
      { logger: quiet() },
    );
    expect(started).toBe(true);
  });

  it('adopts a prefill that is already running', async () => {
    const prefill = deferred();
    const task = PrefillTask.spawn(prefill.promise, { logger: quiet() });
    expect(await isPending(task.wait())).toBe(true);
    prefill.resolve();
    await expect(task.wait()).resolves.toBeUndefined();
  });

  it('wait may be called any number of times, before and after the outcome', async () => {
    const prefill = deferred();
    const task = PrefillTask.spawn(prefill.promise, { logger: quiet() });
    const early = [task.wait(), task.wait()];
    prefill.resolve();
    await expect(Promise.all([...early, task.wait(), task.wait()])).resolves.toHaveLength(4);
  });

  it('a failure rejects wait with a PrefillError keeping the worker text and the original cause', async () => {
    const original = new Error('prefill connection lost');
    const task = PrefillTask.spawn(Promise.reject(original), { logger: quiet() });
    const error = await task.wait().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PrefillError);
    expect(PrefillError.is(error)).toBe(true);
    const prefillError = error as PrefillError;
    expect(prefillError.kind).toBe('prefill');
    expect(prefillError.name).toBe('PrefillError');
    expect(prefillError.message).toBe('Prefill execution failed: prefill connection lost');
    expect(prefillError.cause).toBe(original);
    // Every wait rejects with the same error object.
    await expect(task.wait()).rejects.toBe(prefillError);
  });

  it('a PrefillError from the prefill is kept as it is, kind included', async () => {
    const original = new PrefillError('no_disaggregated_params', 'first output had no data');
    const task = PrefillTask.spawn(Promise.reject(original), { logger: quiet() });
    await expect(task.wait()).rejects.toBe(original);
  });

  it.each([
    ['a string', 'worker said no', 'Prefill execution failed: worker said no'],
    ['undefined', undefined, 'Prefill execution failed: undefined'],
    ['an object with a message', { message: 'gone', code: 7 }, 'Prefill execution failed: gone'],
    ['a plain object', { code: 7 }, 'Prefill execution failed: {"code":7}'],
    ['null', null, 'Prefill execution failed: null'],
  ])('a rejection with %s becomes a PrefillError with readable text', async (_, reason, message) => {
    const task = PrefillTask.spawn(Promise.reject(reason), { logger: quiet() });
    const error = (await task.wait().catch((e: unknown) => e)) as PrefillError;
    expect(error).toBeInstanceOf(PrefillError);
    expect(error.message).toBe(message);
    expect(error.cause).toBe(reason);
  });

  it('a function that throws synchronously is a failed prefill, not a crash', async () => {
    const task = PrefillTask.spawn(
      () => {
        throw new Error('bad request body');
      },
      { logger: quiet() },
    );
    await expect(task.wait()).rejects.toThrow('Prefill execution failed: bad request body');
  });

  it('a function that returns no promise is a failed prefill with a clear message', async () => {
    const task = PrefillTask.spawn((() => undefined) as unknown as () => Promise<void>, { logger: quiet() });
    await expect(task.wait()).rejects.toThrow(
      'The prefill function returned undefined; expected a promise (PromiseLike<void>)',
    );
  });

  it.each([
    ['42', 42],
    ['null', null],
    ['{}', {}],
    // biome-ignore lint/suspicious/noThenProperty: a non-callable then is the point of this case
    ['{"then":1}', { then: 1 }],
  ])('refuses work that is neither a promise nor a function: %s', (shown, work) => {
    expect(() => PrefillTask.spawn(work as unknown as Promise<void>)).toThrow(
      new TypeError(`PrefillTask.spawn expects a promise or a function returning one, got ${shown}`),
    );
  });

  it('a function that returns null is a failed prefill with a clear message', async () => {
    const task = PrefillTask.spawn((() => null) as unknown as () => Promise<void>, { logger: quiet() });
    await expect(task.wait()).rejects.toThrow('The prefill function returned null; expected a promise');
  });

  it('a prefill function may return a callable thenable', async () => {
    // biome-ignore lint/suspicious/noThenProperty: a callable thenable is the point of this test
    const thenable = Object.assign(() => {}, { then: (resolve: () => void) => resolve() });
    const task = PrefillTask.spawn(() => thenable as unknown as PromiseLike<void>, { logger: quiet() });
    await expect(task.wait()).resolves.toBeUndefined();
  });

  it('a plain thenable is adopted like a promise', async () => {
    // biome-ignore lint/suspicious/noThenProperty: a hand-made thenable is the point of this test
    const thenable = { then: (resolve: () => void) => resolve() } as unknown as PromiseLike<void>;
    const task = PrefillTask.spawn(thenable, { logger: quiet() });
    await expect(task.wait()).resolves.toBeUndefined();
  });

  it('logs a failure once at warn level with the error, even when nobody waits', async () => {
    const { logger, records } = recordingLogger();
    const prefill = deferred();
    PrefillTask.spawn(prefill.promise, { logger });
    prefill.reject(new Error('worker crashed'));
    await flush();
    expect(records).toHaveLength(1);
    const record = records[0] as (typeof records)[number];
    expect(record.level).toBe('warn');
    expect(record.message).toBe('Prefill background task failed');
    const logged = (record.fields as { err: PrefillError }).err;
    expect(logged).toBeInstanceOf(PrefillError);
    expect(logged.message).toContain('worker crashed');
  });

  it('does not log a success', async () => {
    const { logger, records } = recordingLogger();
    const task = PrefillTask.spawn(Promise.resolve(), { logger });
    await task.wait();
    expect(records).toEqual([]);
  });

  it('a logger that throws does not turn a failure into an unhandled rejection', async () => {
    const throwing = {
      ...quiet(),
      warn: () => {
        throw new Error('log sink down');
      },
    };
    const task = PrefillTask.spawn(Promise.reject(new Error('x')), { logger: throwing });
    await expect(task.wait()).rejects.toThrow('Prefill execution failed: x');
  });
});

describe('PrefillTask.checkOutput (rule 4)', () => {
  const check = (item: unknown) => () => PrefillTask.checkOutput(item as Annotated<LLMEngineOutput>);

  it('an error item fails with the router text and keeps the error as cause', () => {
    const cause = new Error('worker 3 unreachable');
    let thrown: unknown;
    try {
      PrefillTask.checkOutput(Annotated.fromError(cause));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(PrefillError);
    expect((thrown as PrefillError).message).toBe(
      'Prefill execution failed: Prefill router returned error in output stream: worker 3 unreachable',
    );
    expect((thrown as PrefillError).cause).toBe(cause);
  });

  it('an error item read from JSON fails the same way', () => {
    const item = JSON.parse(JSON.stringify(Annotated.fromError('kv pool exhausted')));
    expect(check(item)).toThrow('Prefill router returned error in output stream: kv pool exhausted');
  });

  it('the error item is checked before the finish reason', () => {
    const item = { ...Annotated.fromError('first'), data: LLMEngineOutput.error('second') };
    expect(check(item)).toThrow('returned error in output stream: first');
  });

  it('finish reason {error} fails with the backend text', () => {
    expect(check(Annotated.fromData(LLMEngineOutput.error('CUDA OOM')))).toThrow(
      new PrefillError('prefill', 'Prefill backend failed: CUDA OOM'),
    );
  });

  it.each(['cancelled', 'abort'])('finish reason %s fails as cancelled before the handoff', (reason) => {
    expect(check({ data: { token_ids: [], finish_reason: reason } })).toThrow(
      'Prefill execution failed: Prefill backend cancelled before completing the handoff',
    );
  });

  it.each([
    ['no data', {}],
    ['no finish reason', Annotated.fromData({ token_ids: [1] })],
    ['eos', Annotated.fromData(LLMEngineOutput.eos())],
    ['length', Annotated.fromData(LLMEngineOutput.length())],
    ['stop', Annotated.fromData(LLMEngineOutput.stop())],
    ['content_filter', Annotated.fromData({ token_ids: [], finish_reason: 'content_filter' as const })],
    ['a null item', null],
  ])('anything else is success: %s', (_, item) => {
    expect(check(item)).not.toThrow();
  });
});

describe('forwardDecode argument checks', () => {
  it('rejects a decode that is neither a promise nor a function', async () => {
    const task = PrefillTask.spawn(deferred().promise, { logger: quiet() });
    await expect(task.forwardDecode(42 as never, new Controller())).rejects.toThrow(
      new TypeError(
        'forwardDecode expects a decode dispatch (a promise of a ResponseStream, or a function (signal) => promise), got 42',
      ),
    );
  });

  it('rejects a decode that is an object but not a promise', async () => {
    const task = PrefillTask.spawn(deferred().promise, { logger: quiet() });
    await expect(task.forwardDecode({} as never, new Controller())).rejects.toThrow(
      'forwardDecode expects a decode dispatch (a promise of a ResponseStream, or a function (signal) => promise), got {}',
    );
  });

  it('rejects a request context that cannot be stopped', async () => {
    const task = PrefillTask.spawn(deferred().promise, { logger: quiet() });
    await expect(task.forwardDecode(deferred<never>().promise, { id: 'x' } as never)).rejects.toThrow(
      'forwardDecode expects the request\'s AsyncEngineContext as its second argument, got {"id":"x"}',
    );
  });

  it('rejects a missing request context', async () => {
    const task = PrefillTask.spawn(deferred().promise, { logger: quiet() });
    await expect(task.forwardDecode(deferred<never>().promise, undefined as never)).rejects.toThrow(
      "forwardDecode expects the request's AsyncEngineContext as its second argument, got undefined",
    );
  });

  it('rejects a dispatch that resolves to something that is not a stream', async () => {
    const task = PrefillTask.spawn(deferred().promise, { logger: quiet() });
    await expect(task.forwardDecode(Promise.resolve(null as never), new Controller())).rejects.toThrow(
      'The decode dispatch resolved to null; expected a ResponseStream',
    );
  });
});

describe('PrefillError', () => {
  it.each([
    ['not_activated', '', 'Prefill router not yet activated'],
    ['prefill', 'worker 3 lost', 'Prefill execution failed: worker 3 lost'],
    [
      'no_disaggregated_params',
      'first output had no data',
      'No disaggregated params in prefill response: first output had no data',
    ],
  ] as const)('kind %s reads "%s"', (kind, detail, message) => {
    const error = new PrefillError(kind, detail);
    expect(error.message).toBe(message);
    expect(error.kind).toBe(kind);
    expect(error.detail).toBe(detail);
    expect(error.name).toBe('PrefillError');
  });

  it('a kind without detail reads as the kind alone', () => {
    expect(new PrefillError('not_activated').message).toBe('Prefill router not yet activated');
    expect(new PrefillError('prefill').detail).toBe('');
  });

  it('refuses an unknown kind, naming the ones it knows', () => {
    expect(() => new PrefillError('bogus' as 'prefill')).toThrow(
      new TypeError(
        'Unknown PrefillError kind "bogus": expected "not_activated", "prefill" or "no_disaggregated_params"',
      ),
    );
  });

  it('an Error without a message is described by its name', () => {
    expect(PrefillError.from(new TypeError('')).message).toBe('Prefill execution failed: TypeError');
  });

  it('is() is false for other errors and values', () => {
    for (const value of [new Error('x'), null, undefined, 'PrefillError', { kind: 'prefill' }]) {
      expect(PrefillError.is(value)).toBe(false);
    }
  });
});

describe('PrefillError.retryable, from the cause chain', () => {
  const withCode = (code: string) => Object.assign(new Error(code), { code });
  it.each([
    ['a refused connection', withCode('ECONNREFUSED'), true],
    ['a reset connection', withCode('ECONNRESET'), true],
    ['an undici socket error', withCode('UND_ERR_SOCKET'), true],
    ['a timeout', new DOMException('timed out', 'TimeoutError'), true],
    ['a 503 answer', Object.assign(new Error('unavailable'), { status: 503 }), true],
    ['a 500 answer', Object.assign(new Error('internal'), { status: 500 }), true],
    ['a code that names no connection fault', withCode('EWHATEVER'), false],
    ['an error of someone else that claims to be retryable', Object.assign(new Error('x'), { retryable: true }), false],
    ['a 400 answer', Object.assign(new Error('bad request'), { status: 400 }), false],
    ['a cancellation', new DOMException('aborted', 'AbortError'), false],
    ['an unknown error', new Error('something'), false],
    ['a string', 'worker said no', false],
    ['nothing', undefined, false],
  ])('%s: %s', (_, cause, retryable) => {
    expect(PrefillError.from(cause).retryable).toBe(retryable);
  });

  it('looks through wrapped causes, and stops at the first that says either way', () => {
    const deep = new Error('fetch failed', { cause: new Error('socket', { cause: withCode('ECONNRESET') }) });
    expect(PrefillError.from(deep).retryable).toBe(true);
    const cancelledFirst = new DOMException('aborted', 'AbortError');
    Object.defineProperty(cancelledFirst, 'cause', { value: withCode('ECONNRESET') });
    expect(PrefillError.from(cancelledFirst).retryable).toBe(false);
  });

  it('a library error that says nothing of retries is read like any other: by its status, before its causes', () => {
    const refused = new RequestError(400, 'bad body', { cause: withCode('ECONNRESET') });
    expect(PrefillError.from(refused).retryable).toBe(false);
  });

  it("a library error's own verdict comes before its causes: a stream broken after the worker answered is not retried, though its socket was reset", () => {
    const broken = UpstreamError.fromFailure('http://p0/v1/completions', withCode('ECONNRESET'), {
      afterResponse: true,
    });
    expect(broken.retryable).toBe(false);
    expect(PrefillError.from(broken).retryable).toBe(false);
    const unreachable = UpstreamError.fromFailure('http://p0/v1/completions', withCode('ECONNREFUSED'));
    expect(PrefillError.from(unreachable).retryable).toBe(true);
  });

  it('a cycle in the cause chain ends the search', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    Object.defineProperty(a, 'cause', { value: b });
    expect(PrefillError.from(a).retryable).toBe(false);
  });
});

describe('PrefillTask.state', () => {
  it('reads pending, then succeeded or failed, synchronously once the prefill settles', async () => {
    const ok = deferred();
    const bad = deferred();
    const { logger } = recordingLogger();
    const succeeding = PrefillTask.spawn(ok.promise, { logger });
    const failing = PrefillTask.spawn(bad.promise, { logger });
    expect([succeeding.state, failing.state]).toEqual(['pending', 'pending']);
    ok.resolve();
    bad.reject(new Error('prefill worker gone'));
    await succeeding.wait();
    await failing.wait().catch(() => {});
    expect([succeeding.state, failing.state]).toEqual(['succeeded', 'failed']);
  });
});

describe('PrefillTask.spawn takes any promise', () => {
  it('a prefill that resolves to something (a drained answer) is a success; what it resolves to is ignored (a type error before)', async () => {
    const task = PrefillTask.spawn(async () => ({ drained: 3 }));
    await expect(task.wait()).resolves.toBeUndefined();
    const adopted = PrefillTask.spawn(Promise.resolve(42));
    await expect(adopted.wait()).resolves.toBeUndefined();
  });

  it('handled: a failure the caller reports itself is logged at debug, not warn', async () => {
    const recorded = recordingLogger();
    const task = PrefillTask.spawn(Promise.reject(new Error('boom')), { logger: recorded.logger, handled: true });
    await task.wait().catch(() => {});
    expect(recorded.records.map((record) => [record.level, record.message])).toEqual([
      ['debug', 'Prefill background task failed'],
    ]);
  });
});
