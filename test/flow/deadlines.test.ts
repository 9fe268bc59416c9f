import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import {
  checkBudget,
  checkDeadlines,
  DEFAULT_DEADLINES,
  DeadlineError,
  pause,
  startTimer,
} from '../../src/flow/deadlines.js';
import { orphanedHandoffs } from '../../src/flow/decode-leg.js';
import type { DisaggregateOptions, Engine } from '../../src/flow/disaggregate.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import {
  decodeTokens,
  engine,
  eventLog,
  handoffItem,
  heldEngine,
  prefillWithParams,
  runFlow,
} from '../support/flow.js';

const _logger = recordingLogger().logger;

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

const run = (options: Partial<DisaggregateOptions<unknown, unknown>>) =>
  runFlow({ context: new Controller('req-d'), ...options });

/** Settles what can settle, then lets `ms` of fake time pass. */
async function elapse(ms: number): Promise<void> {
  await flush();
  await vi.advanceTimersByTimeAsync(ms);
  await flush();
}

const sglangWorker = { bootstrapHost: '10.0.0.3', bootstrapPort: 8998 };

describe('DeadlineError', () => {
  it('names its phase, budget and leg, and is not retryable as the failure rules say, also as the cause of a PrefillError', () => {
    const error = new DeadlineError('idle', 250);
    expect(error).toMatchObject({ name: 'DeadlineError', kind: 'deadline', phase: 'idle', budgetMs: 250 });
    expect(error.leg).toBe('decode');
    expect(new DeadlineError('handoff', 1).leg).toBe('prefill');
    expect(error.message).toBe("Deadline exceeded: decode's next item took longer than its budget of 250 ms (idle)");
    expect(error.retryable).toBe(false);
    expect(PrefillError.from(error).retryable).toBe(false);
    expect(DeadlineError.is({ [Symbol.for('disagg.error.brands')]: ['DeadlineError', 'DisaggError'] })).toBe(true);
    expect(DeadlineError.is(new Error('x'))).toBe(false);
  });

  it('every phase but the total has a deadline by default; given ones replace them one by one, 0 turns one off', () => {
    expect(checkDeadlines(undefined)).toEqual(DEFAULT_DEADLINES);
    expect(DEFAULT_DEADLINES).toEqual({
      prefillFirstOutputMs: 600_000,
      handoffMs: 600_000,
      decodeFirstTokenMs: 300_000,
      idleMs: 120_000,
    });
    expect(checkDeadlines({ idleMs: 5, totalMs: undefined, handoffMs: 0 })).toEqual({
      prefillFirstOutputMs: 600_000,
      decodeFirstTokenMs: 300_000,
      idleMs: 5,
    });
    expect(
      checkDeadlines({ prefillFirstOutputMs: 0, handoffMs: 0, decodeFirstTokenMs: 0, idleMs: 0, totalMs: 0 }),
    ).toEqual({});
  });

  it('refuses budgets that are not positive numbers of milliseconds (or 0), and unknown phases', () => {
    expect(() => checkDeadlines({ idleMs: -1 })).toThrow(
      'deadlines.idleMs must be a positive number of milliseconds, or 0 for none',
    );
    expect(() => checkDeadlines({ idleMs: Number.NaN })).toThrow(TypeError);
    expect(() => checkDeadlines({ totalMs: '5s' })).toThrow('got "5s"');
    expect(() => checkDeadlines({ idle: 5 })).toThrow('Unknown deadline "idle": expected one of totalMs');
    expect(() => checkDeadlines(5)).toThrow('deadlines must be an object');
    expect(checkBudget('cleanupBudgetMs', undefined, 7)).toBe(7);
    expect(() => checkBudget('cleanupBudgetMs', -1, 7)).toThrow('cleanupBudgetMs must be a positive number');
  });

  it('disaggregate refuses a bad deadline before dispatching anything', async () => {
    const prefill = prefillWithParams();
    await expect(run({ prefill: prefill.run, deadlines: { idleMs: -1 } })).rejects.toThrow(TypeError);
    await expect(run({ cleanupBudgetMs: Number.POSITIVE_INFINITY })).rejects.toThrow('cleanupBudgetMs');
    expect(prefill.calls).toHaveLength(0);
  });
});

describe('deadlines per phase', () => {
  it('without any deadline given, a hang still ends: a decode that never answers meets the default first-token budget (5 min)', async () => {
    const stuck: Engine = () => new Promise(() => {});
    const call = run({ decode: stuck });
    call.catch(() => {});
    await elapse(DEFAULT_DEADLINES.decodeFirstTokenMs - 1);
    expect(
      await Promise.race([
        call.then(
          () => 'open',
          () => 'failed',
        ),
        flush().then(() => 'pending'),
      ]),
    ).toBe('pending');
    await elapse(1);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'decodeFirstToken', leg: 'decode' });
    // Turned off with 0, the same decode holds the call as long as it likes.
    const unbounded = run({ decode: stuck, deadlines: { decodeFirstTokenMs: 0, handoffMs: 0 } });
    unbounded.catch(() => {});
    await elapse(DEFAULT_DEADLINES.handoffMs * 2);
    expect(
      await Promise.race([
        unbounded.then(
          () => 'open',
          () => 'failed',
        ),
        flush().then(() => 'pending'),
      ]),
    ).toBe('pending');
  });

  it('prefillFirstOutput: a prefill that says nothing fails the request, and the prefill leg is killed', async () => {
    const prefill = engine(() => new ScriptedSource());
    const decode = decodeTokens();
    const call = run({ prefill: prefill.run, decode: decode.run, deadlines: { prefillFirstOutputMs: 1000 } });
    call.catch(() => {});
    await elapse(999);
    expect(prefill.calls[0]?.context.isKilled()).toBe(false);
    await elapse(1);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'prefillFirstOutput', leg: 'prefill' });
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
    expect(prefill.calls[0]?.source.closed).toBe(true);
    expect(decode.calls).toHaveLength(0);
  });

  it('prefillFirstOutput also covers a prefill dispatch that never answers', async () => {
    let prefillContext: Controller | undefined;
    const stuck: Engine = (_, context) => {
      prefillContext = context as Controller;
      return new Promise(() => {});
    };
    const call = run({ prefill: stuck, deadlines: { prefillFirstOutputMs: 50 } });
    call.catch(() => {});
    await elapse(50);
    await expect(call).rejects.toMatchObject({ phase: 'prefillFirstOutput' });
    expect(prefillContext?.isKilled()).toBe(true);
  });

  it('prefillFirstOutput: a prefill stream that arrives after the deadline is closed', async () => {
    const late = new ScriptedSource([handoffItem()]);
    const slowPrefill = heldEngine(late);
    const call = run({ prefill: slowPrefill.run, deadlines: { prefillFirstOutputMs: 100 } });
    call.catch(() => {});
    await elapse(100);
    await expect(call).rejects.toMatchObject({ phase: 'prefillFirstOutput' });
    slowPrefill.open();
    await flush();
    expect(late.closed).toBe(true);
  });

  it('handoff (concurrent): decode opening while prefill still runs does not end the handoff budget', async () => {
    const prefillSource = new ScriptedSource([Annotated.fromData({ token_ids: [] })]);
    const slowDecode = heldEngine(new ScriptedSource([token(1)]));
    const call = run({
      prefill: engine(() => prefillSource).run,
      decode: slowDecode.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      deadlines: { handoffMs: 300 },
    });
    await elapse(100); // prefill's first output is in: the handoff budget runs
    slowDecode.open(); // decode opens, prefill has not completed
    const iterator = (await call)[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const waiting = iterator.next();
    await elapse(300);
    expect(Annotated.err((await waiting).value)).toMatchObject({ phase: 'handoff' });
  });

  it('handoff: a prefill that answered but never completes fails the request before decode', async () => {
    const prefill = engine(() => new ScriptedSource([handoffItem()]));
    const decode = decodeTokens();
    const call = run({ prefill: prefill.run, decode: decode.run, deadlines: { handoffMs: 200 } });
    call.catch(() => {});
    await elapse(200);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'handoff', leg: 'prefill' });
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
    expect(decode.calls).toHaveLength(0);
  });

  it('handoff: a decode dispatch that hangs after the KV commit fails the request, and decode is still cleaned up', async () => {
    const decodeSource = new ScriptedSource([token(1)]);
    const slowDecode = heldEngine(decodeSource);
    const call = run({ decode: slowDecode.run, deadlines: { handoffMs: 200 } });
    call.catch(() => {});
    await elapse(200);
    await expect(call).rejects.toMatchObject({ phase: 'handoff', leg: 'decode' });
    // The decode worker answers late: it is read until it has taken the KV, then stopped.
    slowDecode.open();
    await flush();
    expect(decodeSource.nextCalls).toBe(1);
    expect(decodeSource.closed).toBe(true);
    expect(slowDecode.contexts[0]?.isStopped()).toBe(true);
  });

  it('handoff (concurrent): a prefill that never completes ends a streaming decode with the deadline', async () => {
    const prefillSource = new ScriptedSource([Annotated.fromData({ token_ids: [] })]);
    const prefill = engine(() => prefillSource);
    const decode = engine(() => new ScriptedSource([token(1), Annotated.fromData(LLMEngineOutput.length())]).end());
    const stream = await run({
      prefill: prefill.run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      deadlines: { handoffMs: 300 },
    });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const held = iterator.next(); // the length terminal waits for prefill
    await elapse(300);
    const error = Annotated.err((await held).value);
    expect(error).toMatchObject({ name: 'DeadlineError', phase: 'handoff', leg: 'prefill' });
    expect((await iterator.next()).done).toBe(true);
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });

  it('decodeFirstToken: a decode that never answers ends the client stream with the deadline, and is cleaned up', async () => {
    const decode = engine(() => new ScriptedSource());
    const before = orphanedHandoffs();
    const stream = await run({ decode: decode.run, deadlines: { decodeFirstTokenMs: 400 }, cleanupBudgetMs: 1000 });
    const iterator = stream[Symbol.asyncIterator]();
    const first = iterator.next();
    await elapse(400);
    expect(Annotated.err((await first).value)).toMatchObject({ phase: 'decodeFirstToken', leg: 'decode' });
    expect((await iterator.next()).done).toBe(true);
    // It may still be the only claim on the KV prefill committed: given the clean-up budget
    // to answer, then killed.
    expect(decode.calls[0]?.context.isStopped()).toBe(false);
    await elapse(1000);
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
    expect(decode.calls[0]?.source.closed).toBe(true);
    expect(orphanedHandoffs()).toBe(before + 1);
  });

  it('decodeFirstToken: a decode that answers after its deadline is stopped as soon as it has taken the KV', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const stream = await run({ decode: decode.run, deadlines: { decodeFirstTokenMs: 400 } });
    const first = stream[Symbol.asyncIterator]().next();
    await elapse(400);
    expect(Annotated.err((await first).value)).toMatchObject({ phase: 'decodeFirstToken' });
    decodeSource.push(token(1));
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
    expect(decodeSource.closed).toBe(true);
  });

  it('idle: a decode that stalls between tokens ends the stream; the time a slow reader takes does not count', async () => {
    const decodeSource = new ScriptedSource([token(1), token(2)]);
    const decode = engine(() => decodeSource);
    const stream = await run({ decode: decode.run, deadlines: { idleMs: 100, decodeFirstTokenMs: 100 } });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    await elapse(10_000); // the client is slow to read again: not decode's fault
    expect((await iterator.next()).value).toEqual(token(2));
    const third = iterator.next();
    await elapse(99);
    decodeSource.push(token(3));
    expect((await third).value).toEqual(token(3));
    const fourth = iterator.next();
    await elapse(100);
    expect(Annotated.err((await fourth).value)).toMatchObject({ name: 'DeadlineError', phase: 'idle' });
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
  });

  it('total: the whole request is bounded, also while tokens keep coming', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const prefill = prefillWithParams();
    const stream = await run({ prefill: prefill.run, decode: decode.run, deadlines: { totalMs: 1000, idleMs: 600 } });
    const iterator = stream[Symbol.asyncIterator]();
    for (let i = 0; i < 2; i++) {
      const next = iterator.next();
      await elapse(400);
      decodeSource.push(token(i));
      expect((await next).value).toEqual(token(i));
    }
    const last = iterator.next();
    await elapse(200);
    expect(Annotated.err((await last).value)).toMatchObject({ phase: 'total', leg: 'decode', budgetMs: 1000 });
    expect((await iterator.next()).done).toBe(true);
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
    expect(prefill.calls[0]?.context.isStopped()).toBe(false); // prefill had completed: left alone
  });

  it('total: a decode stuck mid-stream is interrupted even with no decode budget set', async () => {
    const decodeSource = new ScriptedSource([token(1)]);
    const decode = engine(() => decodeSource);
    const stream = await run({ decode: decode.run, deadlines: { totalMs: 500 } });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const stuck = iterator.next();
    await elapse(500);
    expect(Annotated.err((await stuck).value)).toMatchObject({ name: 'DeadlineError', phase: 'total' });
    expect((await iterator.next()).done).toBe(true);
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
  });

  it('handoff (concurrent): with no decode budget, a decode read waiting for its first token is interrupted', async () => {
    const prefillSource = new ScriptedSource([Annotated.fromData({ token_ids: [] })]);
    const decode = engine(() => new ScriptedSource());
    const stream = await run({
      prefill: engine(() => prefillSource).run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      deadlines: { handoffMs: 300 },
    });
    const first = stream[Symbol.asyncIterator]().next();
    await elapse(300);
    expect(Annotated.err((await first).value)).toMatchObject({ name: 'DeadlineError', phase: 'handoff' });
  });

  it('total: before the client stream exists, the request fails with the deadline of the leg that was running', async () => {
    const prefill = engine(() => new ScriptedSource());
    const call = run({ prefill: prefill.run, deadlines: { totalMs: 700 } });
    call.catch(() => {});
    await elapse(700);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'total', leg: 'prefill' });
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
  });

  it('total: once the client has left, the deadline no longer stops a prefill still running', async () => {
    const prefillSource = new ScriptedSource([Annotated.fromData({ token_ids: [] })]);
    const prefill = engine(() => prefillSource);
    const context = new Controller();
    await run({
      context,
      prefill: prefill.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      deadlines: { totalMs: 500 },
    });
    context.stopGenerating();
    await elapse(500);
    expect(prefill.calls[0]?.context.isStopped()).toBe(false);
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
  });

  it('a request that finishes in time leaves no timer behind and reports success', async () => {
    const log = eventLog();
    const stream = await run({
      deadlines: { totalMs: 5000, prefillFirstOutputMs: 5000, handoffMs: 5000, decodeFirstTokenMs: 5000, idleMs: 5000 },
      onEvent: log.onEvent,
    });
    for await (const _ of stream);
    await flush();
    expect(vi.getTimerCount()).toBe(0);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
  });
});

describe('what a deadline says, and its timers', () => {
  it.each([
    ['total', 'the request', 'decode'],
    ['prefillFirstOutput', "prefill's first output", 'prefill'],
    ['handoff', 'the handoff from prefill to decode', 'prefill'],
    ['decodeFirstToken', "decode's first token", 'decode'],
    ['idle', "decode's next item", 'decode'],
  ] as const)('%s: names %s, charged by default to %s', (phase, text, leg) => {
    const error = new DeadlineError(phase, 250);
    expect(error.message).toBe(`Deadline exceeded: ${text} took longer than its budget of 250 ms (${phase})`);
    expect(error.leg).toBe(leg);
  });

  it('refuses null and 0 where no 0 is meant, and lists the phases it knows', () => {
    expect(() => checkDeadlines(null)).toThrow('deadlines must be an object of millisecond budgets, got null');
    expect(() => checkDeadlines({ firstMs: 5 })).toThrow(
      'Unknown deadline "firstMs": expected one of totalMs, prefillFirstOutputMs, handoffMs, decodeFirstTokenMs, idleMs',
    );
    expect(() => checkBudget('cleanupBudgetMs', 0, 5)).toThrow('cleanupBudgetMs must be a positive number');
  });

  it('a deadline does not keep the process alive; a pause (work to do) does; a runtime without unref is fine', () => {
    const unref = vi.fn();
    const spy = vi.spyOn(globalThis, 'setTimeout').mockReturnValue({ unref } as never);
    try {
      startTimer(5, () => {});
      expect(unref).toHaveBeenCalledTimes(1);
      startTimer(5, () => {}, true);
      pause(5);
      expect(unref).toHaveBeenCalledTimes(1);
      spy.mockReturnValue({} as never);
      expect(() => startTimer(5, () => {})).not.toThrow();
    } finally {
      spy.mockRestore();
    }
  });
});
