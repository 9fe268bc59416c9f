import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { CleanupError, orphanedHandoffs } from '../../src/flow/decode-leg.js';
import type { DisaggregateOptions } from '../../src/flow/disaggregate.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { decodeTokens, engine, eventLog, handoffItem, heldEngine, runFlow } from '../support/flow.js';

const run = (options: Partial<DisaggregateOptions<unknown, unknown>>) =>
  runFlow({ context: new Controller('req-c'), ...options });

afterEach(() => {
  vi.useRealTimers();
});

describe('after the KV commit, decode takes the KV even if the client has gone', () => {
  it('a client that left during prefill: decode is sent, read until it answers, then stopped; the client gets cancelled', async () => {
    const context = new Controller('req-left');
    const prefill = engine(() => {
      context.stopGenerating(); // the client leaves while prefill runs
      return new ScriptedSource([handoffItem()]).end();
    });
    const decode = engine(() => new ScriptedSource([token(1), token(2)]));
    const log = eventLog();
    const stream = await run({ context, prefill: prefill.run, decode: decode.run, onEvent: log.onEvent });
    await flush();
    const [call] = decode.calls;
    expect(call?.source.nextCalls).toBe(1); // one answer: the decode worker has the KV
    expect(call?.source.closed).toBe(true);
    expect(call?.context.isStopped()).toBe(true);
    const items = [];
    for await (const item of stream) items.push(item);
    expect(items.map((item) => item.data?.finish_reason)).toEqual(['cancelled']);
    expect(log.types()).toContain('kvClaimed');
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('a client stop before decode has answered waits for that answer, then reaches decode', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller();
    const stream = await run({ context, decode: decode.run });
    const reading = stream[Symbol.asyncIterator]().next();
    context.stopGenerating();
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(false);
    decodeSource.push(token(1));
    expect((await reading).value).toEqual(token(1));
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });

  it('a client stop or kill after decode has answered reaches decode at once', async () => {
    for (const leave of ['stopGenerating', 'kill'] as const) {
      const decode = engine(() => new ScriptedSource([token(1)]));
      const context = new Controller();
      const stream = await run({ context, decode: decode.run });
      await stream[Symbol.asyncIterator]().next();
      context[leave]();
      await flush();
      expect(decode.calls[0]?.context.isStopped()).toBe(true);
      expect(decode.calls[0]?.context.isKilled()).toBe(leave === 'kill');
    }
  });

  it('a consumer that closes the stream before decode answered: decode is read once for the claim, then closed', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const stream = await run({ decode: decode.run });
    const iterator = stream[Symbol.asyncIterator]();
    expect(await iterator.return?.()).toEqual({ value: undefined, done: true });
    await flush();
    expect(decodeSource.nextCalls).toBe(1);
    expect(decodeSource.closed).toBe(false);
    decodeSource.push(token(1));
    await flush();
    expect(decodeSource.closed).toBe(true);
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });

  it('gives up after the clean-up budget (120 s by default): decode killed, CleanupError logged, orphan counted', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const recorded = recordingLogger();
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller('req-orphan');
    const log = eventLog();
    const before = orphanedHandoffs();
    await run({ context, decode: decode.run, logger: recorded.logger, onEvent: log.onEvent });
    context.stopGenerating();
    await flush();
    await vi.advanceTimersByTimeAsync(119_999);
    expect(decode.calls[0]?.context.isKilled()).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
    expect(decodeSource.closed).toBe(true);
    expect(orphanedHandoffs()).toBe(before + 1);
    const [expired] = log.of('cleanupExpired');
    expect(CleanupError.is(expired?.error)).toBe(true);
    expect(expired?.error).toMatchObject({ name: 'CleanupError', kind: 'cleanup', budgetMs: 120_000 });
    expect(expired?.error.message).toContain('request req-orphan within 120000 ms');
    expect(recorded.records.map((r) => [r.level, r.message])).toContainEqual(['warn', 'Orphaned handoff']);
    expect(log.types().at(-1)).toBe('settled');
  });

  it('the budget is configurable, and an answer in time cancels it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller();
    const before = orphanedHandoffs();
    await run({ context, decode: decode.run, cleanupBudgetMs: 5000 });
    context.kill();
    await flush();
    await vi.advanceTimersByTimeAsync(4999);
    decodeSource.push(token(1));
    await flush();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(orphanedHandoffs()).toBe(before);
    expect(decode.calls[0]?.context.isKilled()).toBe(true); // the client's kill, passed on after the claim
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a prefill failure stops decode at once: no clean-up for KV that never came', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const log = eventLog();
    const before = orphanedHandoffs();
    const stream = await run({
      prefill: engine(() => prefillSource).run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
      onEvent: log.onEvent,
    });
    const reading = stream[Symbol.asyncIterator]().next();
    prefillSource.push(Annotated.fromData(LLMEngineOutput.error('bootstrap failed'))).end();
    expect(Annotated.err((await reading).value)?.message).toContain('bootstrap failed');
    expect(decode.calls[0]?.context.isStopped()).toBe(true); // rule 9, at once
    expect(decodeSource.closed).toBe(true);
    await vi.advanceTimersByTimeAsync(200_000);
    expect(orphanedHandoffs()).toBe(before);
    expect(log.types()).not.toContain('cleanupExpired');
  });

  it('a decode that finished normally is never stopped, also when the stream is closed after it', async () => {
    const decode = decodeTokens();
    const stream = await run({ decode: decode.run });
    const iterator = stream[Symbol.asyncIterator]();
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next());
    await iterator.return?.();
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(false);
  });

  it('a client that stops, then kills, before decode answered: the kill reaches decode once it has', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller();
    await run({ context, decode: decode.run });
    context.stopGenerating();
    await flush();
    context.kill();
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(false);
    decodeSource.push(token(1));
    await flush();
    expect(decode.calls[0]?.context.isKilled()).toBe(true);
  });

  it('a client that stops and a consumer that closes start one clean-up budget, not two', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller();
    const stream = await run({ context, decode: decode.run });
    context.stopGenerating();
    await flush();
    await stream[Symbol.asyncIterator]().return?.();
    await flush();
    expect(vi.getTimerCount()).toBe(1);
    decodeSource.push(token(1));
    await flush();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a decode stream that arrives after the clean-up gave up is closed and killed', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource();
    const slowDecode = heldEngine(decodeSource);
    const context = new Controller();
    const call = run({ context, decode: slowDecode.run, cleanupBudgetMs: 1000 });
    await flush();
    context.stopGenerating(); // the client leaves while the decode dispatch is pending
    await flush();
    await vi.advanceTimersByTimeAsync(1000);
    slowDecode.open();
    await flush();
    expect(decodeSource.closed).toBe(true);
    expect(slowDecode.contexts[0]?.isKilled()).toBe(true);
    await call.catch(() => {});
  });

  it('a leg reading for a client that left is closed when prefill then fails', async () => {
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource();
    const context = new Controller();
    await run({
      context,
      prefill: engine(() => prefillSource).run,
      decode: engine(() => decodeSource).run,
      connector: sglangBootstrap,
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
    });
    context.stopGenerating(); // nobody reads any more; the leg reads for the claim
    await flush();
    expect(decodeSource.nextCalls).toBe(1);
    prefillSource.push(Annotated.fromError('prefill lost')).end();
    await flush();
    expect(decodeSource.closed).toBe(true);
  });

  it('a deadline before the first read still lets decode take the KV, then stops it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    await run({ decode: decode.run, deadlines: { totalMs: 100 } });
    await vi.advanceTimersByTimeAsync(100); // nobody has read the stream yet
    expect(decodeSource.nextCalls).toBe(1); // read for the claim
    decodeSource.push(token(1));
    await flush();
    expect(decodeSource.closed).toBe(true);
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });

  it('aggregated (skipPrefill): no KV to take, so a client stop reaches decode at once', async () => {
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const context = new Controller();
    await run({ context, decode: decode.run, skipPrefill: () => true });
    context.stopGenerating();
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });
});
