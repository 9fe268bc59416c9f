import { describe, expect, it } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { earlyBootstrap } from '../../src/flow/connectors.js';
import type { DisaggregateOptions } from '../../src/flow/disaggregate.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { engine, eventLog, handoffItem, runFlow } from '../support/flow.js';

const _logger = recordingLogger().logger;
const sglangWorker = { bootstrapHost: '10.0.0.3', bootstrapPort: 8998 };

const run = (options: Partial<DisaggregateOptions<unknown, unknown>>) =>
  runFlow({ context: new Controller('req-e'), ...options });

describe('lifecycle events', () => {
  it('sequential: every step in order, stamped with the request id and time, none late', async () => {
    const log = eventLog();
    await collect(await run({ onEvent: log.onEvent }));
    await flush();
    expect(log.types()).toEqual([
      'routed',
      'prefillDispatched',
      'prefillFirstOutput',
      'prefillCompleted',
      'handoff',
      'decodeDispatched',
      'decodeOpened',
      'kvClaimed',
      'firstToken',
      'finished',
      'settled',
    ]);
    expect(log.of('routed')).toMatchObject([{ strategy: 'sequential' }]);
    expect(log.of('handoff')).toMatchObject([{ handoff: 'params' }]);
    expect(log.of('finished')).toEqual([expect.objectContaining({ outcome: 'success' })]);
    let previous = 0;
    for (const event of log.events) {
      expect(event).toMatchObject({ requestId: 'req-e', late: false });
      expect(event.elapsedMs).toBeGreaterThanOrEqual(previous);
      previous = event.elapsedMs;
    }
  });

  it('concurrent: a decode terminal held for prefill is reported when held and when released', async () => {
    const prefillSource = new ScriptedSource();
    const log = eventLog();
    const stream = await run({
      prefill: engine(() => prefillSource).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const reading = collect(stream);
    await flush();
    expect(log.types()).toContain('terminalHeld');
    expect(log.types()).not.toContain('finished');
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    expect(await reading).toHaveLength(3);
    await flush();
    const types = log.types();
    expect(types.slice(0, 2)).toEqual(['routed', 'prefillDispatched']);
    expect(types.indexOf('terminalHeld')).toBeLessThan(types.indexOf('prefillCompleted'));
    expect(types.slice(-3)).toEqual(['terminalReleased', 'finished', 'settled']);
    expect(log.of('terminalReleased')[0]?.heldMs).toBeGreaterThanOrEqual(0);
    expect(log.of('routed')).toMatchObject([{ strategy: 'concurrent', prefillWorker: sglangWorker }]);
    expect(log.of('handoff')).toMatchObject([{ handoff: 'bootstrap' }]);
  });

  it('concurrent: a decode read for a departed client while the router reads, then by the guard, is counted once', async () => {
    // The client leaves before decode answers, while the router waits for an item: the leg
    // reads decode itself (for the claim); the router's reader gets that same read through
    // the guard. One claim, one hold.
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource();
    const context = new Controller('req-e');
    const log = eventLog();
    const stream = await run({
      context,
      prefill: engine(() => prefillSource).run,
      decode: engine(() => decodeSource).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const reading = collect(stream);
    await flush();
    context.stopGenerating();
    await flush();
    decodeSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    await flush();
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    expect((await reading).map((item) => item.data?.finish_reason)).toEqual(['length']);
    await flush();
    expect(log.of('kvClaimed')).toHaveLength(1);
    expect(log.of('terminalHeld')).toHaveLength(1);
    expect(log.of('finished').map((event) => event.outcome)).toEqual(['cancelled']);
  });

  it('concurrent: a departed client whose stream nobody reads: it ends at once, decode is still read for the claim, then every leg ends', async () => {
    const prefillSource = new ScriptedSource();
    const decodeSource = new ScriptedSource();
    const context = new Controller('req-gone');
    const log = eventLog();
    const stream = await run({
      context,
      prefill: engine(() => prefillSource).run,
      decode: engine(() => decodeSource).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    context.stopGenerating();
    await flush();
    expect(log.of('finished').map((event) => event.outcome)).toEqual(['cancelled']);
    expect(decodeSource.nextCalls).toBe(1); // read for the claim: nobody else will
    decodeSource.push(Annotated.fromData(LLMEngineOutput.length()));
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    await flush();
    expect(log.of('kvClaimed')).toHaveLength(1);
    expect(decodeSource.closed).toBe(true);
    expect(log.types().at(-1)).toBe('settled');
    // A reader that comes after all is told the request was cancelled.
    expect((await collect(stream)).map((item) => item.data?.finish_reason)).toEqual(['cancelled']);
  });

  it('concurrent: prefill completed is reported before the terminal it releases', async () => {
    const prefillSource = new ScriptedSource();
    const log = eventLog();
    const stream = await run({
      prefill: engine(() => prefillSource).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const reading = collect(stream);
    await flush();
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    await reading;
    await flush();
    const types = log.types();
    expect(types.indexOf('prefillCompleted')).toBeLessThan(types.indexOf('terminalReleased'));
  });

  it('a prefill failure after the client stream ended is a late event, and settled still comes last', async () => {
    const prefillSource = new ScriptedSource();
    const log = eventLog();
    const stream = await run({
      prefill: engine(() => prefillSource).run,
      decode: engine(() => new ScriptedSource([Annotated.fromError('decode OOM')])).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const items = await collect(stream); // a decode failure does not wait for prefill
    expect(Annotated.err(items[0])?.message).toBe('decode OOM');
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'decode' }]);
    expect(log.types()).not.toContain('settled'); // prefill is still running
    prefillSource.push(Annotated.fromError('KV transfer aborted')).end();
    await flush();
    expect(log.of('prefillFailed')).toMatchObject([{ late: true }]);
    expect(log.of('prefillFailed')[0]?.error.message).toContain('KV transfer aborted');
    expect(log.types().at(-1)).toBe('settled');
    expect(log.of('finished')).toHaveLength(1);
  });

  it.each([
    [
      'prefill fails before decode',
      { prefill: engine(() => new ScriptedSource([Annotated.fromError('prefill OOM')]).end()).run },
      { outcome: 'error', leg: 'prefill' },
    ],
    [
      'the decode dispatch fails',
      { decode: () => Promise.reject(Object.assign(new Error('decode refused'), { status: 503 })) },
      { outcome: 'error', leg: 'decode' },
    ],
    [
      'decode fails mid-stream',
      { decode: engine(() => new ScriptedSource([token(1)]).fail(new Error('connection reset'))).run },
      { outcome: 'error', leg: 'decode' },
    ],
    [
      'decode reports an error finish reason',
      { decode: engine(() => new ScriptedSource([Annotated.fromData(LLMEngineOutput.error('NaN logits'))])).run },
      { outcome: 'error', leg: 'decode' },
    ],
  ] as const)('exactly one finished event when %s', async (_, engines, finished) => {
    const log = eventLog();
    try {
      await collect(await run({ ...engines, onEvent: log.onEvent }));
    } catch {
      // The outcome is what the event says.
    }
    await flush();
    expect(log.of('finished')).toMatchObject([finished]);
    expect(log.of('finished')[0]?.error).toBeInstanceOf(Error);
    expect(log.types().at(-1)).toBe('settled');
  });

  it('a consumer that stops reading early finishes the request as cancelled, once', async () => {
    const log = eventLog();
    const stream = await run({
      decode: engine(() => new ScriptedSource([token(1), token(2)])).run,
      onEvent: log.onEvent,
    });
    for await (const _ of stream) break;
    await flush();
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(log.types().at(-1)).toBe('settled');
  });

  it('a client that leaves finishes the request as cancelled at once, even if the stream is still read', async () => {
    const log = eventLog();
    const context = new Controller();
    const stream = await run({ context, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    context.stopGenerating();
    await flush();
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    while (!(await iterator.next()).done); // the rest goes to nobody
    expect(log.of('finished')).toHaveLength(1);
  });

  it('the stop the library makes after a prefill failure is not the client leaving: the outcome is the error', async () => {
    const prefillSource = new ScriptedSource();
    const log = eventLog();
    const context = new Controller();
    const stream = await run({
      context,
      prefill: engine(() => prefillSource).run,
      decode: engine(() => new ScriptedSource([token(1)])).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      onEvent: log.onEvent,
    });
    const reading = collect(stream);
    await flush();
    prefillSource.push(Annotated.fromError('prefill OOM')).end();
    await reading;
    await flush();
    expect(context.isStopped()).toBe(true); // rule 9 stops the request context
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
  });

  it("decode's own cancelled finish reason is a cancelled outcome, not a success", async () => {
    const log = eventLog();
    const stream = await run({
      decode: engine(() => new ScriptedSource([token(1), Annotated.fromData(LLMEngineOutput.cancelled())]).end()).run,
      onEvent: log.onEvent,
    });
    expect((await collect(stream)).map((item) => item.data?.finish_reason ?? null)).toEqual([null, 'cancelled']);
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('a read in flight when the consumer closes the stream answers done, not a late item', async () => {
    const decodeSource = new ScriptedSource();
    const stream = await run({ decode: engine(() => decodeSource).run });
    const iterator = stream[Symbol.asyncIterator]();
    const reading = iterator.next();
    await iterator.return?.();
    decodeSource.push(token(1));
    expect(await reading).toEqual({ value: undefined, done: true });
  });

  it('a prefill that finishes the request: no decode events, one success', async () => {
    const log = eventLog();
    const prefill = engine(() =>
      new ScriptedSource([Annotated.fromData<LLMEngineOutput>({ token_ids: [2], finish_reason: 'eos' })]).end(),
    );
    await collect(await run({ prefill: prefill.run, onEvent: log.onEvent }));
    expect(log.types()).toEqual([
      'routed',
      'prefillDispatched',
      'prefillFirstOutput',
      'prefillCompleted',
      'firstToken',
      'finished',
      'settled',
    ]);
  });

  it('early handoff and skipped prefill say so in routed', async () => {
    const early = eventLog();
    const first = Annotated.fromData({
      token_ids: [9],
      disaggregated_params: { bootstrap_host: 'h', bootstrap_port: 7000, bootstrap_room: 5 },
    });
    await collect(
      await run({
        prefill: engine(() => new ScriptedSource([first, handoffItem()]).end()).run,
        connector: earlyBootstrap,
        onEvent: early.onEvent,
      }),
    );
    expect(early.of('routed')).toMatchObject([{ strategy: 'early' }]);
    expect(early.of('handoff')).toMatchObject([{ handoff: 'bootstrap' }]);
    const skipped = eventLog();
    await collect(await run({ skipPrefill: () => true, onEvent: skipped.onEvent }));
    expect(skipped.of('routed')).toMatchObject([{ strategy: 'aggregated' }]);
    expect(skipped.types()).not.toContain('prefillDispatched');
    expect(skipped.types()).not.toContain('kvClaimed');
  });

  it('a listener that throws is logged and changes nothing', async () => {
    const recorded = recordingLogger();
    const items = await collect(
      await run({
        logger: recorded.logger,
        onEvent: () => {
          throw new Error('metrics exporter down');
        },
      }),
    );
    expect(items).toHaveLength(3);
    expect(recorded.records[0]).toMatchObject({ level: 'warn', message: 'A flow event listener threw; ignored' });
  });

  it('refuses an onEvent that is not a function', async () => {
    await expect(run({ onEvent: 'log' as never })).rejects.toThrow('onEvent must be a function');
  });
});

describe('events a router acts on come when it has what they speak of', () => {
  const chatChunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({
        token_ids: [],
        text: typeof delta.content === 'string' ? delta.content : '',
        ...(finish === null ? {} : { finish_reason: finish as 'stop' }),
      }),
      [{ form: 'event', text: undefined, json: { choices: [{ index: 0, delta, finish_reason: finish }] } }],
    );

  // firstToken is the first token, not chat's opening chunk (a role, no content).
  it.each([
    ['a role and an empty content', { role: 'assistant', content: '' }, null, 'is not'],
    ['a role and a null content', { role: 'assistant', content: null }, null, 'is not'],
    ['a role alone', { role: 'assistant' }, null, 'is not'],
    ['a role and reasoning', { role: 'assistant', reasoning_content: 'Hmm' }, null, 'is'],
    ['a role and a tool call', { role: 'assistant', tool_calls: [{ index: 0 }] }, null, 'is'],
    ['a role with a finish', { role: 'assistant', content: '' }, 'stop', 'is'],
    ['an empty content without a role', { content: '' }, null, 'is'],
  ])('an opening chunk with %s %s the first token', async (_, delta, finish, token) => {
    const decodeSource = new ScriptedSource([
      chatChunk(delta, finish),
      chatChunk({ content: 'Hi' }),
      chatChunk({}, 'stop'),
    ]).end();
    const log = eventLog();
    const stream = await run({ decode: engine(() => decodeSource).run, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    expect(log.of('firstToken')).toHaveLength(token === 'is' ? 1 : 0);
    await iterator.next(); // 'Hi': a token whatever came before, and only one firstToken
    expect(log.of('firstToken')).toHaveLength(1);
    await iterator.return?.();
  });

  // The same rule where what the worker wrote and what was read from it say more.
  const role = { role: 'assistant', content: '' };
  const opening = (data: Partial<LLMEngineOutput>, chunks: Array<Record<string, unknown>> | undefined) => {
    const item = Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: '', ...data });
    return chunks === undefined
      ? item
      : Annotated.withWire(
          item,
          chunks.map((json) => ({ form: 'event' as const, text: undefined, json })),
        );
  };
  it.each([
    ['a role, its finish_reason left out', opening({}, [{ choices: [{ index: 0, delta: role }] }]), 'is not'],
    [
      'a role, yet a token id read from it',
      opening({ token_ids: [7] }, [{ choices: [{ index: 0, delta: role }] }]),
      'is',
    ],
    ['a role, yet text read from it', opening({ text: 'x' }, [{ choices: [{ index: 0, delta: role }] }]), 'is'],
    [
      'a role chunk and a content chunk in one item',
      opening({}, [{ choices: [{ index: 0, delta: role }] }, { choices: [{ index: 0, delta: { content: 'Hi' } }] }]),
      'is',
    ],
    [
      'one choice with a role, another with content',
      opening({}, [
        {
          choices: [
            { index: 0, delta: role },
            { index: 1, delta: { content: 'Hi' } },
          ],
        },
      ]),
      'is',
    ],
    ['a choice without a delta', opening({}, [{ choices: [{ index: 0, delta: null }] }]), 'is'],
    ['an empty item from an engine of your own (no wire)', opening({}, undefined), 'is'],
    ['an empty item with nothing on the wire', opening({}, []), 'is'],
    ['a chunk without choices (as SGLang /generate writes)', opening({}, [{ text: '', meta_info: {} }]), 'is'],
    ['a chunk whose choices are empty', opening({}, [{ choices: [] }]), 'is'],
    [
      'a role chunk with no data read from it',
      Annotated.withWire(Annotated.fromData<LLMEngineOutput>(undefined as never), [
        { form: 'event' as const, text: undefined, json: { choices: [{ index: 0, delta: role }] } },
      ]),
      'is',
    ],
  ])('an opening item: %s %s the first token', async (_, first, token) => {
    const decodeSource = new ScriptedSource([first, chatChunk({ content: 'Hi' }), chatChunk({}, 'stop')]).end();
    const log = eventLog();
    const stream = await run({ decode: engine(() => decodeSource).run, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    expect(log.of('firstToken')).toHaveLength(token === 'is' ? 1 : 0);
    await iterator.return?.();
  });

  it('an answer that ends on a role-only chunk (its finish in the data alone, from an engine of your own) has its first token at its end, once', async () => {
    const ending = Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: '', finish_reason: 'stop' }),
      [{ form: 'event' as const, text: undefined, json: { choices: [{ index: 0, delta: role }] } }],
    );
    const decodeSource = new ScriptedSource([opening({}, [{ choices: [{ index: 0, delta: role }] }]), ending]).end();
    const log = eventLog();
    const stream = await run({ decode: engine(() => decodeSource).run, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    expect(log.of('firstToken')).toHaveLength(0);
    await iterator.next();
    expect(log.of('firstToken')).toHaveLength(1);
    await iterator.return?.();
  });

  it('finished (and settled) come once the reader has the last item: at its next call, or its close', async () => {
    const log = eventLog();
    const stream = await run({ onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    await iterator.next();
    const terminal = await iterator.next();
    expect(terminal.value?.data?.finish_reason).toBe('length');
    // The reader holds the terminal and is writing it out: nothing is over for it yet.
    expect(log.of('finished')).toEqual([]);
    expect((await iterator.next()).done).toBe(true);
    expect(log.of('finished')).toMatchObject([{ outcome: 'success' }]);
    await flush();
    expect(log.types().at(-1)).toBe('settled');
    // A reader that closes the stream after the terminal reports it as it was: a success.
    const second = eventLog();
    const closing = (await run({ onEvent: second.onEvent }))[Symbol.asyncIterator]();
    for (let i = 0; i < 3; i++) await closing.next();
    await closing.return?.();
    expect(second.of('finished')).toMatchObject([{ outcome: 'success' }]);
  });
});
