import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, type Item, recordingLogger, ScriptedSource } from '../support/async.js';
import { eventLog, prefillWithParams, runFlow } from '../support/flow.js';
import { propertyOptions } from '../support/property.js';

const piece = (id: number) => Annotated.fromData<LLMEngineOutput>({ token_ids: [id], text: `t${id} ` });
const request = { model: 'm', prompt: [1, 2, 3], max_tokens: 6, stream: true };
/**
 * The flow of `request` aggregated on two decode workers taken in turn (d0 first), with
 * migration on once, its decode leg `decode`; `extra` replaces any option.
 */
const migratingFlow = (decode: unknown, extra: Parameters<typeof runFlow<unknown, string>>[0] = {}) =>
  runFlow<unknown, string>({
    request,
    decode: decode as never,
    decodeWorkers: new WorkerPool(['d0', 'd1'], { selection: 'round-robin' }),
    skipPrefill: () => true,
    migration: { limit: 1 },
    ...extra,
  });

const texts = (items: { data?: LLMEngineOutput }[]) => items.map((item) => item.data?.text ?? '').join('');

describe('a decode stream that breaks after its first token, with migration on', () => {
  it('goes on on another decode worker as one stream, with a migration event, and settles after it', async () => {
    const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
    const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
      calls.push({ worker, body });
      const source =
        worker === 'd0'
          ? new ScriptedSource([piece(2000), piece(2001)]).fail(new Error('connection reset'))
          : new ScriptedSource([piece(2002), piece(2003), piece(2004), piece(2005)])
              .push(Annotated.fromData(LLMEngineOutput.length()))
              .end();
      return new ResponseStream(source, context);
    };
    const log = eventLog();
    const stream = await migratingFlow(decode, {
      onEvent: log.onEvent,
    });
    const items = await collect(stream);
    expect(texts(items)).toBe('t2000 t2001 t2002 t2003 t2004 t2005 ');
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
    expect(calls[0]?.body.return_token_ids).toBe(true);
    expect(calls[1]?.body).toMatchObject({ prompt: [1, 2, 3, 2000, 2001], max_tokens: 4, return_token_ids: true });
    const [migration] = log.of('migration');
    expect(migration).toMatchObject({
      attempt: 1,
      reason: 'stream_error',
      outcome: 'migrated',
      mode: 'resume',
      generatedTokens: 2,
      fromWorker: 'd0',
      toWorker: 'd1',
    });
    await flush();
    expect(log.of('finished')).toEqual([expect.objectContaining({ outcome: 'success' })]);
    expect(log.types().at(-1)).toBe('settled');
  });

  it('past its limit the break reaches the client as its one error, and the log says why', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(new ScriptedSource([piece(2000)]).fail(new Error('connection reset')), context);
    const logger = recordingLogger();
    const log = eventLog();
    const stream = await migratingFlow(decode, {
      onEvent: log.onEvent,
      logger: logger.logger,
    });
    const items = await collect(stream);
    // The first worker's token, the second's, then the second break as the error.
    expect(texts(items.filter((item) => !Annotated.isError(item)))).toBe('t2000 t2000 ');
    expect(Annotated.err(items.at(-1))?.message).toBe('connection reset');
    expect(log.of('migration').map((event) => event.outcome)).toEqual(['migrated', 'refused']);
    expect(log.of('migration')[1]?.why).toBe('the migration limit (1) is reached');
    expect(logger.records.some((record) => record.message === 'Decode stream broke; not migrated')).toBe(true);
  });

  it('a break after the last token of the budget, before its finish, ends with length: nothing is left to generate', async () => {
    const calls: unknown[] = [];
    const decode = async (_: unknown, context: Controller, worker: unknown) => {
      calls.push(worker);
      const ids = [2000, 2001, 2002, 2003, 2004, 2005];
      return new ResponseStream(new ScriptedSource(ids.map(piece)).fail(new Error('connection reset')), context);
    };
    const log = eventLog();
    const items = await collect(await migratingFlow(decode, { onEvent: log.onEvent }));
    expect(texts(items)).toBe('t2000 t2001 t2002 t2003 t2004 t2005 ');
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(calls).toEqual(['d0']);
    expect(log.of('migration')[0]?.why).toBe('the token budget was all generated: finished with length');
  });

  it('a break before the first token is not a migration: it fails as without it', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(new ScriptedSource([]).fail(new Error('gone')), context);
    const log = eventLog();
    const items = await collect(
      await runFlow({
        request,
        decode: decode as never,
        skipPrefill: () => true,
        migration: { limit: 3 },
        onEvent: log.onEvent,
      }),
    );
    expect(Annotated.err(items.at(-1))?.message).toBe('gone');
    expect(log.of('migration')).toEqual([]);
  });

  it("a client that stops reading closes the continuation's stream", async () => {
    const second = new ScriptedSource([piece(2001), piece(2002)]);
    const decode = async (_: unknown, context: Controller, worker: unknown) =>
      new ResponseStream(
        worker === 'd0' ? new ScriptedSource([piece(2000)]).fail(new Error('connection reset')) : second,
        context,
      );
    const stream = await migratingFlow(decode, {
      context: new Controller(),
    });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.text).toBe('t2000 ');
    expect((await iterator.next()).value?.data?.text).toBe('t2001 ');
    await iterator.return?.();
    await flush();
    expect(second.returnCalls).toBeGreaterThan(0);
  });

  it('migration off: the flow does not ask the workers for token ids', async () => {
    const calls: Array<Record<string, unknown>> = [];
    const decode = async (body: Record<string, unknown>, context: Controller) => {
      calls.push(body);
      return new ResponseStream(new ScriptedSource([piece(1)]).end(), context);
    };
    await collect(await runFlow({ request, decode: decode as never, skipPrefill: () => true }));
    await collect(
      await runFlow({ request, decode: decode as never, skipPrefill: () => true, migration: { limit: 0 } }),
    );
    expect(calls.map((body) => body.return_token_ids)).toEqual([undefined, undefined]);
  });
});

describe('a migrated stream, wherever it breaks', () => {
  it('gives every token once, in order, then one finish, also with reads in flight', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 10 }),
        fc.integer({ min: 1, max: 9 }),
        fc.constantFrom('throws', 'error item'),
        fc.integer({ min: 1, max: 3 }),
        async (total, at, kind, inFlight) => {
          const breakAt = Math.min(at, total - 1);
          const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
            const prompt = body.prompt as number[];
            const done = prompt.filter((id) => id >= 2000).length;
            const ids = Array.from({ length: total - done }, (_, i) => 2000 + done + i);
            if (worker === 'd0') {
              const source = new ScriptedSource(ids.slice(0, breakAt).map(piece));
              if (kind === 'throws') source.fail(new Error('reset'));
              else source.push(Annotated.fromError(new Error('error event'))).end();
              return new ResponseStream(source, context);
            }
            const source = new ScriptedSource(ids.map(piece)).push(Annotated.fromData(LLMEngineOutput.length())).end();
            return new ResponseStream(source, context);
          };
          const stream = await migratingFlow(decode, {
            request: { ...request, max_tokens: total },
          });
          const iterator = stream[Symbol.asyncIterator]();
          const items = [];
          for (;;) {
            const steps = await Promise.all(Array.from({ length: inFlight }, () => iterator.next()));
            for (const step of steps) if (step.done !== true) items.push(step.value);
            if (steps.some((step) => step.done === true)) break;
          }
          const expected = Array.from({ length: total }, (_, i) => `t${2000 + i} `).join('');
          expect(texts(items)).toBe(expected);
          expect(items.filter((item) => item.data?.finish_reason != null || Annotated.isError(item))).toHaveLength(1);
          expect(items.at(-1)?.data?.finish_reason).toBe('length');
        },
      ),
      propertyOptions(200, 31),
    );
  });
});

/** A decode leg whose first worker (d0) sends `sent` tokens then breaks with `error`; d1 finishes. */
const breakingOn = (error: unknown, sent = 1) => {
  const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
  const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
    calls.push({ worker, body });
    const ids = Array.from({ length: sent }, (_, i) => 2000 + i);
    const source =
      worker === 'd0'
        ? new ScriptedSource(ids.map(piece)).fail(error)
        : new ScriptedSource([piece(2000 + sent)]).push(Annotated.fromData(LLMEngineOutput.length())).end();
    return new ResponseStream(source, context);
  };
  return { decode, calls };
};

describe('which breaks are not continued, and say why', () => {
  it.each([
    [
      'a 400 from the worker',
      Object.assign(new Error('bad request'), { status: 400 }),
      1,
      {},
      'the worker refused the request (a 4xx): another would too',
    ],
    [
      'a 499 from the worker',
      Object.assign(new Error('client closed'), { status: 499 }),
      1,
      {},
      'the worker refused the request (a 4xx): another would too',
    ],
    [
      'a 4xx kept as the cause',
      new Error('stream failed', { cause: Object.assign(new Error('no'), { status: 422 }) }),
      1,
      {},
      'the worker refused the request (a 4xx): another would too',
    ],
    [
      'a sequence longer than maxSeqLen',
      new Error('reset'),
      2,
      { maxSeqLen: 4 },
      "the sequence (5 tokens) is longer than the migration's maximum (4)",
    ],
  ])('%s: refused, the error reaches the client, the log says why', async (_, error, sent, migration, why) => {
    const { decode, calls } = breakingOn(error, sent);
    const log = eventLog();
    const logger = recordingLogger();
    const items = await collect(
      await migratingFlow(decode, {
        onEvent: log.onEvent,
        logger: logger.logger,
        migration: { limit: 1, ...migration },
      }),
    );
    expect(Annotated.err(items.at(-1))).toBe(error);
    expect(calls.map((call) => call.worker)).toEqual(['d0']);
    expect(log.of('migration')).toEqual([expect.objectContaining({ outcome: 'refused', why, reason: 'stream_error' })]);
    const warned = logger.records.find((record) => record.message === 'Decode stream broke; not migrated');
    expect(warned?.fields).toMatchObject({ why, reason: 'stream_error' });
  });

  it.each([
    ['a 408', Object.assign(new Error('timeout'), { status: 408 }), 1, {}],
    ['a 429', Object.assign(new Error('busy'), { status: 429 }), 1, {}],
    ['a 500', Object.assign(new Error('oops'), { status: 500 }), 1, {}],
    ['a sequence exactly maxSeqLen long', new Error('reset'), 1, { maxSeqLen: 4 }],
  ])('%s: continued on another worker', async (_, error, sent, migration) => {
    const { decode, calls } = breakingOn(error, sent);
    const log = eventLog();
    const items = await collect(
      await migratingFlow(decode, { onEvent: log.onEvent, migration: { limit: 1, ...migration } }),
    );
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(calls.map((call) => call.worker)).toEqual(['d0', 'd1']);
    expect(log.of('migration')).toEqual([
      expect.objectContaining({ outcome: 'migrated', mode: 'resume', toWorker: 'd1' }),
    ]);
  });

  it("a text prompt whose token ids nobody knows: refused, the prompt's ids are not known", async () => {
    const { decode, calls } = breakingOn(new Error('reset'));
    const log = eventLog();
    const items = await collect(
      await migratingFlow(decode, { request: { ...request, prompt: 'hello' }, onEvent: log.onEvent }),
    );
    expect(Annotated.err(items.at(-1))?.message).toBe('reset');
    expect(calls).toHaveLength(1);
    expect(log.of('migration')[0]).toMatchObject({ outcome: 'refused', why: "the prompt's token ids are not known" });
  });

  it('a continuation that cannot start: the break reaches the client, failed, and the log keeps both errors', async () => {
    const refusal = new Error('no capacity');
    const decode = async (_: unknown, context: Controller, worker: unknown) => {
      if (worker === 'd1') throw refusal;
      return new ResponseStream(new ScriptedSource([piece(2000)]).fail(new Error('reset')), context);
    };
    const log = eventLog();
    const logger = recordingLogger();
    const items = await collect(await migratingFlow(decode, { onEvent: log.onEvent, logger: logger.logger }));
    expect(Annotated.err(items.at(-1))?.message).toBe('reset');
    expect(texts(items.filter((item) => !Annotated.isError(item)))).toBe('t2000 ');
    const [migration] = log.of('migration');
    expect(migration).toMatchObject({
      outcome: 'failed',
      reason: 'stream_error',
      generatedTokens: 1,
      fromWorker: 'd0',
    });
    expect(String(migration?.why)).toContain('no capacity');
    const warned = logger.records.find(
      (record) => record.message === 'Decode stream broke; its continuation could not start',
    );
    expect(warned?.fields).toMatchObject({ cause: refusal, reason: 'stream_error' });
  });
});

describe('a decode worker taken out of rotation mid-stream', () => {
  it('its stream ends at once and goes on on another worker (worker_down); the first worker is not read again', async () => {
    const pool = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const first = new ScriptedSource([piece(2000)]); // then silence: a worker that stopped answering
    const decode = async (_: unknown, context: Controller, worker: unknown) => {
      // As httpEngine does: a killed call ends its stream (there, the socket is closed).
      if (worker === 'd0') void context.stopped().then(() => first.end());
      return new ResponseStream(
        worker === 'd0'
          ? first
          : new ScriptedSource([piece(2001)]).push(Annotated.fromData(LLMEngineOutput.length())).end(),
        context,
      );
    };
    const log = eventLog();
    const stream = await migratingFlow(decode, { decodeWorkers: pool, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.text).toBe('t2000 ');
    const pending = iterator.next();
    await flush();
    pool.setAvailable('d0', false);
    expect((await pending).value?.data?.text).toBe('t2001 ');
    const rest = [];
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) rest.push(step.value);
    expect(rest.at(-1)?.data?.finish_reason).toBe('length');
    expect(log.of('migration')).toEqual([
      expect.objectContaining({ reason: 'worker_down', outcome: 'migrated', fromWorker: 'd0', toWorker: 'd1' }),
    ]);
    expect(first.returnCalls).toBeGreaterThan(0);
  });
});

describe('a decode worker silent past the idle budget', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('is given up (idle) and the stream goes on on another worker', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const first = new ScriptedSource([piece(2000)]); // then silence
    const decode = async (_: unknown, context: Controller, worker: unknown) =>
      new ResponseStream(
        worker === 'd0'
          ? first
          : new ScriptedSource([piece(2001)]).push(Annotated.fromData(LLMEngineOutput.length())).end(),
        context,
      );
    const log = eventLog();
    const stream = await migratingFlow(decode, { onEvent: log.onEvent, deadlines: { idleMs: 1_000 } });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.text).toBe('t2000 ');
    const pending = iterator.next();
    await vi.advanceTimersByTimeAsync(999);
    expect(log.of('migration')).toEqual([]);
    await vi.advanceTimersByTimeAsync(2);
    expect((await pending).value?.data?.text).toBe('t2001 ');
    expect(log.of('migration')).toEqual([
      expect.objectContaining({ reason: 'idle', outcome: 'migrated', toWorker: 'd1' }),
    ]);
    expect(first.returnCalls).toBeGreaterThan(0);
  });
});

describe('how a break goes on', () => {
  it('a request with stop strings is replayed: the client request again, and what the client has is skipped', async () => {
    const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
    const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
      calls.push({ worker, body });
      const source =
        worker === 'd0'
          ? new ScriptedSource([piece(2000)]).fail(new Error('reset'))
          : new ScriptedSource([piece(2000), piece(2001)]).push(Annotated.fromData(LLMEngineOutput.length())).end();
      return new ResponseStream(source, context);
    };
    const log = eventLog();
    const items = await collect(
      await migratingFlow(decode, { request: { ...request, stop: ['zzz'] }, onEvent: log.onEvent }),
    );
    expect(texts(items)).toBe('t2000 t2001 ');
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(calls[1]?.body).toMatchObject({ prompt: [1, 2, 3], max_tokens: 6, stop: ['zzz'], stream: true });
    expect(log.of('migration')).toEqual([expect.objectContaining({ outcome: 'migrated', mode: 'replay' })]);
  });

  it('a break once every token of the budget came, with usage asked: ends with length and the usage of every token', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(new ScriptedSource([piece(2000), piece(2001)]).fail(new Error('reset')), context);
    const items = await collect(
      await migratingFlow(decode, {
        request: { ...request, max_tokens: 2, stream_options: { include_usage: true } },
      }),
    );
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(items.at(-1)?.data?.completion_usage).toMatchObject({
      prompt_tokens: 3,
      completion_tokens: 2,
      total_tokens: 5,
    });
  });

  it('without usage asked, the length finish carries none', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(new ScriptedSource([piece(2000), piece(2001)]).fail(new Error('reset')), context);
    const items = await collect(await migratingFlow(decode, { request: { ...request, max_tokens: 2 } }));
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    expect(items.at(-1)?.data?.completion_usage ?? undefined).toBeUndefined();
  });
});

describe('how disaggregate sets a continuation up', () => {
  /**
   * A decode leg that breaks after one token on its first call and finishes on every later
   * one: a replay (the client's chat again) from the start, a resume from the token after.
   */
  function breakingOnce() {
    const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
    const run = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
      calls.push({ worker, body });
      const rest = Array.isArray(body.messages) ? [piece(2000), piece(2001)] : [piece(2001)];
      const source =
        calls.length === 1
          ? new ScriptedSource([piece(2000)]).fail(new Error('connection reset'))
          : new ScriptedSource(rest).push(Annotated.fromData(LLMEngineOutput.length())).end();
      return new ResponseStream(source, context);
    };
    return { run, calls };
  }
  const chat = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true };

  it('a whole (not streamed) answer that breaks is not continued: it has sent nothing to go on from', async () => {
    const decode = breakingOnce();
    const log = eventLog();
    const reading = migratingFlow(decode.run, { request: { ...request, stream: false }, onEvent: log.onEvent }).then(
      collect,
    );
    await expect(reading).rejects.toThrow('connection reset');
    expect(log.of('migration')).toEqual([]);
    expect(decode.calls).toHaveLength(1);
  });

  it.each([
    [
      'a chat on SGLang, whose chat stream has no token ids: replayed',
      { connector: sglangBootstrap },
      { ...chat, max_tokens: 8 },
      'replay',
    ],
    ['a chat with a budget on vLLM: resumed', {}, { ...chat, max_tokens: 8 }, 'resume'],
    ['a chat without a budget on vLLM, the context length unknown: replayed', {}, chat, 'replay'],
    ['a chat without a budget, the context length known: resumed', { maxModelLen: 4096 }, chat, 'resume'],
  ])('%s', async (_, given, body, mode) => {
    const { connector, maxModelLen } = given as { connector?: typeof sglangBootstrap; maxModelLen?: number };
    const log = eventLog();
    const items = await collect(
      await migratingFlow(breakingOnce().run, {
        request: body,
        promptTokenIds: [1, 2, 3], // as the caller's tokenizer made them
        ...(connector === undefined ? {} : { connector }),
        migration: { limit: 1, ...(maxModelLen === undefined ? {} : { maxModelLen }) },
        onEvent: log.onEvent,
      }),
    );
    expect(texts(items)).toBe('t2000 t2001 ');
    expect(log.of('migration')).toMatchObject([{ outcome: 'migrated', mode }]);
  });

  it('the continuation passes over the worker that broke, and the workers the caller said to avoid', async () => {
    const decode = breakingOnce();
    const first = (candidates: readonly string[]) => candidates[0] as string;
    await collect(
      await migratingFlow(decode.run, {
        decodeWorkers: new WorkerPool(['d0', 'd1', 'd2'], { selection: first }),
        avoid: { decode: ['d1'] },
      }),
    );
    expect(decode.calls.map((call) => call.worker)).toEqual(['d0', 'd2']);
  });

  it("via 'decode' (the default) a continuation computes its prompt on decode; via 'prefill' it goes through a new prefill", async () => {
    for (const via of ['decode', 'prefill'] as const) {
      const prefill = prefillWithParams();
      const decode = breakingOnce();
      const items = await collect(
        await runFlow<unknown, string>({
          request,
          prefill: prefill.run,
          decode: decode.run as never,
          decodeWorkers: new WorkerPool(['d0', 'd1'], { selection: 'round-robin' }),
          migration: { limit: 1, via },
        }),
      );
      expect(texts(items)).toBe('t2000 t2001 ');
      expect(prefill.calls).toHaveLength(via === 'prefill' ? 2 : 1);
    }
  });

  it('without a decode pool a break goes on on the same decode engine', async () => {
    const decode = breakingOnce();
    const log = eventLog();
    const items = await collect(
      await runFlow({
        request,
        decode: decode.run as never,
        skipPrefill: () => true,
        migration: { limit: 1 },
        onEvent: log.onEvent,
      }),
    );
    expect(texts(items)).toBe('t2000 t2001 ');
    expect(log.of('migration')).toMatchObject([{ outcome: 'migrated' }]);
  });
});

describe('a migrating stream, where the rules meet the edges', () => {
  /** A chat chunk as vLLM streams it with token ids: its delta, its ids. */
  const chatPiece = (id: number, delta: Record<string, unknown> = { content: `t${id} ` }) =>
    Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({
        token_ids: [id],
        text: typeof delta.content === 'string' ? delta.content : '',
      }),
      [
        {
          form: 'event',
          text: undefined,
          json: {
            id: 'chatcmpl-1',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'm',
            choices: [{ index: 0, delta, token_ids: [id] }],
          },
        },
      ],
    );
  const chat = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, stream: true };
  /** Decode on d0 answers `first` then breaks; on d1 `rest` then length. */
  const breaking = (first: Item[], rest: Item[] = [piece(2001)], error: unknown = new Error('reset')) => {
    const calls: Array<{ worker: unknown; body: Record<string, unknown> }> = [];
    const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown) => {
      calls.push({ worker, body });
      const source =
        worker === 'd0'
          ? new ScriptedSource(first).fail(error)
          : new ScriptedSource(rest).push(Annotated.fromData(LLMEngineOutput.length())).end();
      return new ResponseStream(source, context);
    };
    return { decode, calls };
  };

  it("a chat resumed: the continuation's chunks are the chat's, logged with what it was", async () => {
    const completion = Annotated.withWire(piece(2001), [
      {
        form: 'event',
        text: undefined,
        json: { id: 'cmpl-9', object: 'text_completion', choices: [{ index: 0, text: 't2001 ' }] },
      },
    ]);
    const { decode } = breaking([chatPiece(2000)], [completion]);
    const logger = recordingLogger();
    const items = await collect(
      await migratingFlow(decode, { request: chat, promptTokenIds: [1, 2], logger: logger.logger }),
    );
    expect(Annotated.wire(items[1] as Item)?.[0]?.json).toMatchObject({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      choices: [{ delta: { content: 't2001 ' } }],
    });
    const info = logger.records.find((record) => record.message === 'Decode stream broke; continued on another worker');
    expect(info?.fields).toMatchObject({ attempt: 1, mode: 'resume', generatedTokens: 1, reason: 'stream_error' });
  });

  it('the token ids the client asked for stay in what it is sent', async () => {
    const { decode } = breaking([chatPiece(2000)]);
    const items = await collect(
      await migratingFlow(decode, { request: { ...chat, return_token_ids: true }, promptTokenIds: [1, 2] }),
    );
    expect(Annotated.wire(items[0] as Item)?.[0]?.json).toMatchObject({ choices: [{ token_ids: [2000] }] });
  });

  it('an error item from the worker mid-stream is a break too (stream_error)', async () => {
    const { decode, calls } = breaking([piece(2000), Annotated.fromError<LLMEngineOutput>(new Error('engine died'))]);
    const log = eventLog();
    const items = await collect(await migratingFlow(decode, { onEvent: log.onEvent }));
    expect(texts(items)).toBe('t2000 t2001 ');
    expect(calls).toHaveLength(2);
    expect(log.of('migration')).toMatchObject([{ reason: 'stream_error', outcome: 'migrated' }]);
  });

  it('a stream that simply ends, without a finish, ends the client stream: no break, no error', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(new ScriptedSource([piece(2000)]).end(), context);
    const log = eventLog();
    const items = await collect(await migratingFlow(decode, { onEvent: log.onEvent }));
    expect(texts(items)).toBe('t2000 ');
    expect(items.some((item) => Annotated.isError(item))).toBe(false);
    expect(log.of('migration')).toEqual([]);
  });

  it('a worker that returns text without token ids: replayed, unless the client asked for token ids', async () => {
    const textOnly = (text: string) => Annotated.fromData<LLMEngineOutput>({ token_ids: [], text });
    const { decode } = breaking([textOnly('Hel')], [textOnly('Hello')]);
    const log = eventLog();
    const items = await collect(await migratingFlow(decode, { onEvent: log.onEvent }));
    expect(texts(items)).toBe('Hello');
    expect(log.of('migration')).toMatchObject([{ outcome: 'migrated', mode: 'replay' }]);
    const asked = eventLog();
    await collect(
      await migratingFlow(breaking([textOnly('Hel')]).decode, {
        request: { ...request, return_token_ids: true },
        onEvent: asked.onEvent,
      }),
    );
    expect(asked.of('migration')).toMatchObject([{ outcome: 'refused', why: 'the worker did not return token ids' }]);
  });

  it.each([['a request the plan refuses (logprobs)', { logprobs: 1 }, 'logprobs']])(
    '%s: refused, saying why',
    async (_, extra, why) => {
      const log = eventLog();
      await collect(
        await migratingFlow(breaking([piece(2000)]).decode, {
          request: { ...request, ...extra },
          onEvent: log.onEvent,
        }),
      );
      expect(log.of('migration')).toMatchObject([{ outcome: 'refused', why }]);
    },
  );

  it('a client that has left: the break is not continued', async () => {
    const context = new Controller('req-gone');
    const first = new ScriptedSource([piece(2000)]);
    const decode = async (_: unknown, ctx: Controller) => new ResponseStream(first, ctx);
    const log = eventLog();
    const stream = await migratingFlow(decode, { context, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    const pending = iterator.next();
    context.stopGenerating();
    first.fail(new Error('reset'));
    await pending.catch(() => undefined);
    await flush();
    expect(log.of('migration')).toMatchObject([{ outcome: 'refused', why: 'the client has left' }]);
  });

  it('output the chat server parses as a whole (reasoning) is not continued', async () => {
    const log = eventLog();
    await collect(
      await migratingFlow(breaking([chatPiece(2000), chatPiece(2001, { reasoning_content: 'hmm' })]).decode, {
        request: chat,
        promptTokenIds: [1],
        onEvent: log.onEvent,
      }),
    );
    expect(log.of('migration')).toMatchObject([
      { outcome: 'refused', why: 'the output is in reasoning, which the chat server parses as a whole' },
    ]);
  });

  it('maxSeqLen with a replay whose prompt ids nobody knows: the generated tokens are the sequence', async () => {
    const log = eventLog();
    await collect(
      await migratingFlow(breaking([piece(2000)], [piece(2000), piece(2001)]).decode, {
        request: { ...request, prompt: 'hello', stop: ['\n'] },
        migration: { limit: 1, maxSeqLen: 4 },
        onEvent: log.onEvent,
      }),
    );
    expect(log.of('migration')).toMatchObject([{ outcome: 'migrated', mode: 'replay' }]);
  });

  it('a spent budget: a migration event and an info line with the break', async () => {
    const decode = async (_: unknown, context: Controller) =>
      new ResponseStream(
        new ScriptedSource([2000, 2001, 2002, 2003, 2004, 2005].map(piece)).fail(new Error('connection reset')),
        context,
      );
    const log = eventLog();
    const logger = recordingLogger();
    await collect(await migratingFlow(decode, { onEvent: log.onEvent, logger: logger.logger }));
    expect(log.of('migration')).toMatchObject([{ outcome: 'migrated', mode: 'resume' }]);
    expect(logger.records).toContainEqual({
      level: 'info',
      fields: expect.objectContaining({ reason: 'stream_error', error: expect.any(String) }),
      message: 'Decode stream broke; the token budget was all generated: finished with length',
    });
  });

  it('a token on its way when its worker is taken out still reaches the client, once', async () => {
    const pool = new WorkerPool(['d0', 'd1'], { selection: 'round-robin' });
    const first = new ScriptedSource([piece(2000)]);
    const decode = async (_: unknown, context: Controller, worker: unknown) => {
      if (worker === 'd0') void context.stopped().then(() => first.end());
      return new ResponseStream(
        worker === 'd0'
          ? first
          : new ScriptedSource([piece(2002)]).push(Annotated.fromData(LLMEngineOutput.length())).end(),
        context,
      );
    };
    const log = eventLog();
    const stream = await migratingFlow(decode, { decodeWorkers: pool, onEvent: log.onEvent });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    const pending = iterator.next();
    await flush();
    pool.setAvailable('d0', false);
    first.push(piece(2001)); // already on its way
    expect((await pending).value?.data?.text).toBe('t2001 ');
    const rest: Item[] = [];
    for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) rest.push(step.value);
    expect(texts(rest)).toBe('t2002 ');
    const [migration] = log.of('migration');
    expect(migration).toMatchObject({ reason: 'worker_down', generatedTokens: 2 });
    expect(migration?.error.message).toContain('taken out of rotation');
  });
});

describe('a decode worker silent past the idle budget, as it is reported', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('the break is an idle deadline of decode; a stream that answers in time leaves no timer', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const first = new ScriptedSource([piece(2000)]);
    const decode = async (_: unknown, context: Controller, worker: unknown) =>
      new ResponseStream(
        worker === 'd0'
          ? first
          : new ScriptedSource([piece(2001)]).push(Annotated.fromData(LLMEngineOutput.length())).end(),
        context,
      );
    const log = eventLog();
    const stream = await migratingFlow(decode, { onEvent: log.onEvent, deadlines: { idleMs: 1_000 } });
    const reading = collect(stream);
    await vi.advanceTimersByTimeAsync(1_001);
    await reading;
    const [migration] = log.of('migration');
    expect(migration).toMatchObject({ reason: 'idle', error: { name: 'DeadlineError', phase: 'idle', leg: 'decode' } });
    expect(vi.getTimerCount()).toBe(0);
  });
});
