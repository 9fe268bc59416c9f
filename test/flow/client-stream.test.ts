import { describe, expect, it } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { failedLeg, legOf } from '../../src/flow/client-stream.js';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { CleanupError } from '../../src/flow/decode-leg.js';
import { UnsupportedRequestError } from '../../src/flow/request-shaping.js';
import { NoWorkerError } from '../../src/flow/worker-pool.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated, AnnotatedError } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { deferred, flush, type Item, isPending, ScriptedSource, token } from '../support/async.js';
import { engine, eventLog, handoffItem, heldEngine, runFlow } from '../support/flow.js';

/** The ids (or 'done') of the answers, and the order in which the calls were answered. */
async function answers(calls: Promise<IteratorResult<Item>>[]) {
  const order: number[] = [];
  for (const [i, call] of calls.entries())
    call.then(
      () => order.push(i),
      () => order.push(i),
    );
  const steps = await Promise.all(calls);
  const ids = steps.map((step) =>
    step.done === true ? 'done' : (step.value.data?.token_ids[0] ?? step.value.data?.finish_reason),
  );
  return { ids, order };
}

/** A concurrent (SGLang) request whose decode source the test drives, prefill held until released. */
async function concurrentFlow(options: { deadlines?: { idleMs?: number; totalMs?: number } } = {}) {
  const prefillDone = deferred();
  const prefill = engine(() => new ScriptedSource());
  const decodeSource = new ScriptedSource();
  const decode = engine(() => decodeSource);
  const log = eventLog();
  const stream = await runFlow({
    context: new Controller('req-pipe'),
    connector: sglangBootstrap,
    prefillWorker: { bootstrapHost: 'p0', bootstrapPort: 8998 },
    prefill: prefill.run,
    decode: decode.run,
    onEvent: log.onEvent,
    ...options,
  });
  await flush();
  const prefillSource = (prefill.calls[0] as { source: ScriptedSource }).source;
  prefillDone.promise.then(() => prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end());
  return { stream, decodeSource, finishPrefill: () => prefillDone.resolve(), log };
}

/** A sequential (vLLM) request: prefill hands off at once; decode's source is the test's. */
async function sequentialFlow(deadlines: { idleMs?: number; decodeFirstTokenMs?: number } = {}) {
  const decodeSource = new ScriptedSource();
  const stream = await runFlow({ decode: engine(() => decodeSource).run, deadlines });
  return { stream, decodeSource };
}

describe('the client stream, read with several calls in flight', () => {
  it('sequential family: answers in call order as decode is taken (observed) and after (read through)', async () => {
    for (const deadlines of [{}, { decodeFirstTokenMs: 60_000 }, { idleMs: 60_000 }]) {
      for (let depth = 0; depth <= 4; depth++) {
        const { stream, decodeSource } = await sequentialFlow(deadlines);
        const iterator = stream[Symbol.asyncIterator]();
        const calls = [iterator.next(), iterator.next()];
        decodeSource.push(token(1));
        for (let i = 0; i < depth; i++) await Promise.resolve();
        calls.push(iterator.next());
        decodeSource.push(token(2)).push(token(3));
        calls.push(iterator.next());
        decodeSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
        expect({ deadlines, depth, ...(await answers(calls)) }).toEqual({
          deadlines,
          depth,
          ids: [1, 2, 3, 'length'],
          order: [0, 1, 2, 3],
        });
      }
    }
  });

  it('answers in call order while prefill is pending, across its success and after, and holds the terminal', async () => {
    for (const deadlines of [{}, { idleMs: 60_000, totalMs: 600_000 }]) {
      const { stream, decodeSource, finishPrefill, log } = await concurrentFlow({ deadlines });
      const iterator = stream[Symbol.asyncIterator]();
      const calls = [iterator.next(), iterator.next(), iterator.next()];
      decodeSource.push(token(1));
      await Promise.resolve();
      calls.push(iterator.next());
      decodeSource.push(token(2));
      finishPrefill();
      await Promise.resolve();
      calls.push(iterator.next(), iterator.next());
      decodeSource.push(token(3)).push(token(4)).push(Annotated.fromData(LLMEngineOutput.length())).end();
      expect(await answers(calls)).toEqual({ ids: [1, 2, 3, 4, 'length', 'done'], order: [0, 1, 2, 3, 4, 5] });
      expect(log.of('finished').map((event) => event.outcome)).toEqual(['success']);
    }
  });

  it('nothing follows the terminal: calls in flight past it, and calls made as it arrives, answer done in order', async () => {
    for (const deadlines of [{}, { totalMs: 600_000 }]) {
      const { stream, decodeSource, finishPrefill } = await concurrentFlow({ deadlines });
      finishPrefill();
      await flush();
      const iterator = stream[Symbol.asyncIterator]();
      const calls = [iterator.next(), iterator.next(), iterator.next()];
      // A decode that sends more after its terminal (rule 10 forwards it; the client stream does not).
      decodeSource.push(token(1)).push(Annotated.fromData(LLMEngineOutput.length()));
      await calls[1];
      calls.push(iterator.next());
      decodeSource.push(token(9)).push(token(10));
      expect({ deadlines, ...(await answers(calls)) }).toEqual({
        deadlines,
        ids: [1, 'length', 'done', 'done'],
        order: [0, 1, 2, 3],
      });
    }
  });

  it('a terminal answered by a closing guard: the calls behind it answer done in call order', async () => {
    // Found by the flow's property test: decode opens after prefill has settled (its terminal
    // already waiting), read by three calls placed a few microtasks apart.
    for (let depth = 0; depth <= 6; depth++) {
      const prefillSource = new ScriptedSource();
      const decodeSource = new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]);
      const decode = heldEngine(decodeSource);
      const stream = runFlow({
        connector: sglangBootstrap,
        prefillWorker: { bootstrapHost: 'p0', bootstrapPort: 8998 },
        prefill: engine(() => prefillSource).run,
        decode: decode.run,
        deadlines: { handoffMs: 400 },
      });
      await flush();
      prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
      decode.open();
      const iterator = (await stream)[Symbol.asyncIterator]();
      const calls = [iterator.next()];
      for (let i = 0; i < depth; i++) await Promise.resolve();
      calls.push(iterator.next());
      await Promise.resolve();
      calls.push(iterator.next());
      expect({ depth, ...(await answers(calls)) }).toEqual({
        depth,
        ids: ['length', 'done', 'done'],
        order: [0, 1, 2],
      });
    }
  });

  it('return() with calls in flight ends the stream: they answer done, in order, and so does every later call at once', async () => {
    const { stream, decodeSource, log } = await concurrentFlow();
    const iterator = stream[Symbol.asyncIterator]();
    decodeSource.push(token(1));
    const calls = [iterator.next(), iterator.next(), iterator.next()];
    await flush();
    expect(await iterator.return?.()).toEqual({ value: undefined, done: true });
    expect(await answers(calls)).toEqual({ ids: [1, 'done', 'done'], order: [0, 1, 2] });
    const later = iterator.next();
    expect(await isPending(later)).toBe(false);
    expect(log.of('finished').map((event) => event.outcome)).toEqual(['cancelled']);
  });
});

describe('the leg a failure belongs to', () => {
  const upstream = 'http://10.0.0.7:8200';
  const refused = Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
  it.each([
    ['a PrefillError', new PrefillError('prefill', 'x'), 'prefill', 'prefill'],
    ["a deadline of prefill's", new DeadlineError('prefillFirstOutput', 5), 'prefill', 'prefill'],
    ["a deadline of decode's", new DeadlineError('idle', 5, 'decode'), 'decode', 'decode'],
    [
      "a prefill failure caused by a deadline of prefill's",
      PrefillError.from(new DeadlineError('handoff', 5, 'prefill')),
      'prefill',
      'prefill',
    ],
    ['a worker status', UpstreamError.fromStatus(upstream, 500, 'x'), 'decode', 'decode'],
    ['a connection failure', UpstreamError.fromFailure(upstream, refused), 'decode', 'decode'],
    ['a protocol failure', UpstreamError.fromFailure(upstream, new Error('not JSON')), 'decode', 'decode'],
    ['an error item of a stream', new AnnotatedError('engine said no'), 'decode', 'decode'],
    ['a clean-up given up', new CleanupError('r', 5), 'decode', 'decode'],
    ['an engine of your own that threw', new Error('mine'), 'decode', 'decode'],
    ['no worker in rotation', new NoWorkerError(0), undefined, 'decode'],
    ['a request refused before any worker', new UnsupportedRequestError('n', 'no'), undefined, 'decode'],
    ['an option that is wrong', new TypeError('bad option'), undefined, 'decode'],
  ])('%s', (_, error, failed, leg) => {
    expect(failedLeg(error)).toBe(failed);
    expect(legOf(error)).toBe(leg);
  });
});

describe('the client stream, item by item', () => {
  /** The sequential flow over a decode that answers `items` (ended), read by the test. */
  async function over(items: Item[], options: Parameters<typeof runFlow>[0] = {}) {
    const decodeSource = new ScriptedSource(items).end();
    const decode = engine(() => decodeSource);
    const log = eventLog();
    const stream = await runFlow({ decode: decode.run, onEvent: log.onEvent, ...options });
    return { log, decode, decodeSource, stream, iterator: stream[Symbol.asyncIterator]() };
  }

  it("decode's error item reaches the client as it came, with the worker's own words on the wire", async () => {
    const failed = Annotated.withWire(Annotated.fromError<LLMEngineOutput>(new Error('decode OOM')), [
      { form: 'event', text: '{"error":{"message":"decode OOM"}}', json: { error: { message: 'decode OOM' } } },
    ]);
    const { iterator } = await over([token(1), failed]);
    await iterator.next();
    expect((await iterator.next()).value).toBe(failed);
  });

  it.each([
    ['a failed finish', { error: 'decode failed' }, 'error'],
    ['a cancelled finish', 'cancelled', 'cancelled'],
    ['a finish', 'length', 'success'],
  ])(
    '%s is the outcome, reported once the reader is past it; decode is closed, not stopped',
    async (_, reason, outcome) => {
      const finish = Annotated.fromData({ token_ids: [], finish_reason: reason } as LLMEngineOutput);
      const { log, decode, decodeSource, iterator } = await over([token(1), finish]);
      await iterator.next();
      expect((await iterator.next()).value).toBe(finish);
      expect(log.of('finished')).toEqual([]);
      expect((await iterator.next()).done).toBe(true);
      expect(log.of('finished')).toMatchObject([{ outcome }]);
      await flush();
      expect(decodeSource.closed).toBe(true);
      expect(decode.calls[0]?.context.isStopped()).toBe(false);
    },
  );

  it('a decode stream that ends without a finish is a success', async () => {
    const { log, iterator } = await over([token(1), token(2)]);
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next());
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
  });

  it("an item whose usage is null keeps it: prefill's prompt details go only into a usage there is", async () => {
    const details = { cached_tokens: 16 };
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData<LLMEngineOutput>({
          ...(handoffItem().data as LLMEngineOutput),
          completion_usage: {
            prompt_tokens: 20,
            completion_tokens: 1,
            total_tokens: 21,
            prompt_tokens_details: details,
          },
        }),
      ]).end(),
    );
    const nullUsage = Annotated.fromData<LLMEngineOutput>({ token_ids: [3], completion_usage: null });
    const { iterator } = await over([nullUsage], { prefill: prefill.run });
    expect((await iterator.next()).value).toBe(nullUsage);
  });

  it('a stream is read once, saying so', async () => {
    const { stream, iterator } = await over([token(1)]);
    expect(() => stream[Symbol.asyncIterator]()).toThrow(
      "This request's stream is already being iterated; it can be iterated only once",
    );
    await iterator.return?.();
  });

  it('closed by its reader after the client left: done, not the cancelled item kept for a later read', async () => {
    const context = new Controller('req-left');
    const { iterator } = await over([token(1)], { context });
    await iterator.next();
    context.stopGenerating(); // nobody is reading now: a later read would get `cancelled`
    await flush();
    await iterator.return?.();
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });
});
