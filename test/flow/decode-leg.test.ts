import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { CleanupError, type LegPhase, nextPhase } from '../../src/flow/decode-leg.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, flush, type Item, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { engine, eventLog, runFlow } from '../support/flow.js';

const sglangWorker = { bootstrapHost: '10.0.0.3', bootstrapPort: 8998 };
const length = () => Annotated.fromData(LLMEngineOutput.length());
const withReason = (reason: unknown) =>
  Annotated.fromData({ token_ids: [7], finish_reason: reason } as LLMEngineOutput);

/** Reads `count` items of the flow's stream, then closes it; what decode's call saw. */
async function readThenClose(decodeItems: Item[], count: number) {
  const decodeSource = new ScriptedSource(decodeItems); // left open: decode could say more
  const decode = engine(() => decodeSource);
  const stream = await runFlow({ context: new Controller('req-leg'), decode: decode.run });
  const iterator = stream[Symbol.asyncIterator]();
  for (let i = 0; i < count; i++) await iterator.next();
  await iterator.return?.();
  await flush();
  const call = decode.calls[0];
  return { stopped: call?.context.isStopped(), closed: decodeSource.closed };
}

describe('the decode leg, when its consumer stops early', () => {
  it('a decode that has not sent its terminal is stopped and closed', async () => {
    expect(await readThenClose([token(1), token(2)], 2)).toEqual({ stopped: true, closed: true });
  });

  it('a decode that already sent its terminal is closed, not stopped: it has nothing left to generate', async () => {
    expect(await readThenClose([token(1), length()], 2)).toEqual({ stopped: false, closed: true });
  });

  it('an error item from decode also ends its output: closed, not stopped', async () => {
    const error = Annotated.fromError<LLMEngineOutput>(new Error('decode OOM'));
    expect(await readThenClose([token(1), error], 2)).toEqual({ stopped: false, closed: true });
  });

  it('an item whose finish_reason is null is not a terminal', async () => {
    expect(await readThenClose([token(1), withReason(null)], 2)).toEqual({ stopped: true, closed: true });
  });
});

describe('the decode leg, while prefill runs (concurrent)', () => {
  async function concurrent(decodeItems: Item[]) {
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource(decodeItems);
    const log = eventLog();
    const stream = await runFlow({
      context: new Controller('req-leg'),
      prefill: engine(() => prefillSource).run,
      decode: engine(() => decodeSource).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const reading = collect(stream);
    await flush();
    return { log, prefillSource, decodeSource, reading };
  }

  it('only a successful terminal is held for prefill: plain tokens are not', async () => {
    const { log, prefillSource, decodeSource, reading } = await concurrent([token(1), token(2)]);
    expect(log.of('terminalHeld')).toHaveLength(0);
    decodeSource.push(length()).end();
    await flush();
    expect(log.of('terminalHeld')).toHaveLength(1);
    prefillSource.push(length()).end();
    expect((await reading).map((item) => item.data?.token_ids)).toEqual([[1], [2], []]);
  });

  it("a decode failure's finish is not held: the failure is the answer", async () => {
    const { log, prefillSource, reading } = await concurrent([token(1), withReason({ error: 'decode failed' })]);
    await flush();
    expect(log.of('terminalHeld')).toHaveLength(0);
    prefillSource.push(length()).end();
    await reading.catch(() => undefined);
    expect(log.of('terminalReleased')).toHaveLength(0);
  });

  it('a held terminal reports how long it waited: from its arrival to its release', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const { log, prefillSource, decodeSource, reading } = await concurrent([token(1)]);
      vi.advanceTimersByTime(100); // decode's terminal comes 100 ms into the request
      decodeSource.push(length()).end();
      await flush();
      vi.advanceTimersByTime(250); // and waits 250 ms for prefill
      prefillSource.push(length()).end();
      await reading;
      expect(log.of('terminalReleased')[0]?.heldMs).toBe(250);
    } finally {
      vi.useRealTimers();
    }
  });
});

afterEach(() => {
  vi.useRealTimers();
});

describe("the decode leg's phases: what has happened stays happened", () => {
  const reading: LegPhase = { kind: 'reading' };
  const cleaningUp: LegPhase = { kind: 'cleaning-up' };
  const claimed = (abandoned: boolean): LegPhase => ({ kind: 'claimed', abandoned });
  const ended = (claimed: boolean, abandoned: boolean): LegPhase => ({ kind: 'ended', claimed, abandoned });
  it.each([
    [reading, 'claim', claimed(false)],
    [reading, 'abandon', cleaningUp],
    [reading, 'end', ended(false, false)],
    [cleaningUp, 'claim', claimed(true)], // a late first answer of a leg read for the claim
    [cleaningUp, 'abandon', cleaningUp],
    [cleaningUp, 'end', ended(false, true)],
    [claimed(false), 'claim', claimed(false)],
    [claimed(false), 'abandon', claimed(true)],
    [claimed(false), 'end', ended(true, false)],
    [claimed(true), 'claim', claimed(true)],
    [claimed(true), 'end', ended(true, true)],
    [ended(false, false), 'claim', ended(true, false)], // a late answer still counts as the claim
    [ended(false, false), 'abandon', ended(false, true)],
    [ended(false, true), 'end', ended(false, true)],
    [ended(true, true), 'claim', ended(true, true)],
  ] as const)('%o on %s: %o', (phase, event, next) => {
    expect(nextPhase(phase, event)).toStrictEqual(next);
  });
});

describe('the decode leg, its deadlines and its clean-up', () => {
  it('a clean-up given up is a CleanupError: not retryable, with its budget and code', () => {
    const error = new CleanupError('req-1', 5000);
    expect(error).toMatchObject({ code: 'DISAGG_CLEANUP_EXPIRED', kind: 'cleanup', budgetMs: 5000, retryable: false });
    expect(CleanupError.is(error)).toBe(true);
  });

  it('the total deadline interrupts a read decode never answers, with no other budget on', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource([token(1)]);
    const off = { prefillFirstOutputMs: 0, handoffMs: 0, decodeFirstTokenMs: 0, idleMs: 0 };
    const stream = await runFlow({
      decode: engine(() => decodeSource).run,
      deadlines: { ...off, totalMs: 1000 },
    });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    const silent = iterator.next(); // decode says nothing more
    await vi.advanceTimersByTimeAsync(1000);
    const error = Annotated.err((await silent).value);
    expect(DeadlineError.is(error)).toBe(true);
    expect(error).toMatchObject({ phase: 'total' });
    expect(decodeSource.closed).toBe(true);
  });

  it('a clean-up given up is logged with its error and request id; a late answer after it claims nothing', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const recorded = recordingLogger();
    const decodeSource = new ScriptedSource();
    const log = eventLog();
    const context = new Controller('req-late');
    await runFlow({
      context,
      decode: engine(() => decodeSource).run,
      logger: recorded.logger,
      onEvent: log.onEvent,
      cleanupBudgetMs: 1000,
    });
    context.stopGenerating();
    await flush();
    await vi.advanceTimersByTimeAsync(1000);
    const warned = recorded.records.find((record) => record.message === 'Orphaned handoff');
    expect(warned?.fields).toMatchObject({ requestId: 'req-late' });
    expect(CleanupError.is((warned?.fields as { err?: unknown } | undefined)?.err)).toBe(true);
    decodeSource.push(token(1)); // decode answers after all
    await flush();
    expect(log.types()).not.toContain('kvClaimed');
    expect(decodeSource.returnCalls).toBe(1);
  });
});

describe('the decode leg, while prefill runs (concurrent), as it claims and ends', () => {
  async function concurrent(decodeItems: Item[], context = new Controller('req-leg')) {
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource(decodeItems);
    const log = eventLog();
    const decode = engine(() => decodeSource);
    const stream = await runFlow({
      context,
      prefill: engine(() => prefillSource).run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    return { log, prefillSource, decodeSource, decode, iterator: stream[Symbol.asyncIterator]() };
  }

  it('decode takes the KV once, however many of its items are seen', async () => {
    const { log, prefillSource, iterator } = await concurrent([token(1), token(2), length()]);
    await iterator.next();
    await iterator.next();
    await flush();
    prefillSource.push(length()).end();
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next());
    expect(log.of('kvClaimed')).toHaveLength(1);
  });

  it('prefill over before decode answers: the leg sees the claim itself, and a client that then leaves reaches decode', async () => {
    const context = new Controller('req-leg');
    const { log, prefillSource, decodeSource, decode, iterator } = await concurrent([], context);
    prefillSource.push(length()).end();
    await flush();
    expect(log.types()).toContain('prefillCompleted');
    const first = iterator.next();
    decodeSource.push(token(1));
    expect((await first).value).toEqual(token(1));
    expect(log.of('kvClaimed')).toHaveLength(1);
    context.stopGenerating();
    await flush();
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
  });

  it('a finish_reason of null is not a terminal: not held for prefill', async () => {
    const { log, prefillSource, iterator } = await concurrent([token(1), withReason(null)]);
    await iterator.next();
    await iterator.next();
    await flush();
    expect(log.of('terminalHeld')).toHaveLength(0);
    prefillSource.end();
  });

  it('a consumer that stops while decode\u2019s terminal is held for prefill: decode is closed, not stopped', async () => {
    const { log, prefillSource, decodeSource, decode, iterator } = await concurrent([token(1), length()]);
    await iterator.next();
    const held = iterator.next(); // decode's terminal, held until prefill succeeds
    await flush();
    expect(log.of('terminalHeld')).toHaveLength(1);
    await iterator.return?.();
    await flush();
    await held;
    expect(decodeSource.closed).toBe(true);
    expect(decode.calls[0]?.context.isStopped()).toBe(false);
    prefillSource.push(length()).end();
  });
});

describe('the decode leg, read for its claim while nobody reads it', () => {
  it('concurrent, no first-token or request budget: a client that leaves before decode answers still has decode stopped at its answer', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource();
    const decode = engine(() => decodeSource);
    const log = eventLog();
    const context = new Controller('req-away');
    await runFlow({
      context,
      prefill: engine(() => prefillSource).run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      deadlines: { decodeFirstTokenMs: 0, handoffMs: 0, prefillFirstOutputMs: 0, idleMs: 0 },
      onEvent: log.onEvent,
    });
    context.stopGenerating(); // nobody reads the stream any more
    await flush();
    decodeSource.push(token(1)); // decode answers: it has taken the KV
    await flush();
    expect(log.types()).toContain('kvClaimed');
    expect(decode.calls[0]?.context.isStopped()).toBe(true);
    prefillSource.push(length()).end();
    await vi.advanceTimersByTimeAsync(200_000);
    expect(log.types()).not.toContain('cleanupExpired');
  });
});
