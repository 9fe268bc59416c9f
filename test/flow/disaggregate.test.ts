import { describe, expect, it, vi } from 'vitest';
import { sglangBootstrap, trtllmContextFirst, vllmNixl } from '../../src/engines/registry.js';
import { earlyBootstrap } from '../../src/flow/connectors.js';
import { disaggregate, type Engine } from '../../src/flow/disaggregate.js';
import { HandoffFieldError } from '../../src/flow/handoff-fields.js';
import type { RequestBody } from '../../src/flow/request-shaping.js';
import { NoWorkerError, WorkerPool } from '../../src/flow/worker-pool.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { Scheduler } from '../../src/routing/scheduler.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import {
  client,
  decodeTokens,
  engine,
  eventLog,
  handoffItem,
  kvParams,
  prefillWithParams,
  runFlow,
} from '../support/flow.js';

const logger = recordingLogger().logger;

/** The sequential vLLM flow for `client` on a fresh context, with the given fake engines. */
const viaVllm = (prefill: { run: Engine }, decode: { run: Engine }) =>
  runFlow({
    prefill: prefill.run,
    decode: decode.run,
  });

/** A flow with SGLang's rendezvous to a fixed prefill worker, on the given engines. */
function sglangFlow(prefill: Engine<unknown>, decode: Engine<unknown>, context: Controller) {
  return disaggregate({
    request: client,
    context,
    prefill,
    decode,
    connector: sglangBootstrap,
    prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
    logger,
  });
}

describe('disaggregate, sequential (vLLM NIXL)', () => {
  it('prefill with a one-token budget, then decode with its kv_transfer_params and the client values', async () => {
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    const context = new Controller('req-7');
    const stream = await runFlow({ context, prefill: prefill.run, decode: decode.run });
    expect((await collect(stream)).map((i) => i.data?.token_ids)).toEqual([[1], [2], []]);
    const [prefillCall] = prefill.calls;
    expect(prefillCall?.body).toMatchObject({ max_tokens: 1, max_completion_tokens: 1, stream: false, n: 1 });
    expect(prefillCall?.body).not.toHaveProperty('min_tokens');
    expect(prefillCall?.body.kv_transfer_params).toEqual({
      do_remote_decode: true,
      do_remote_prefill: false,
      remote_engine_id: null,
      remote_block_ids: null,
      remote_host: null,
      remote_port: null,
    });
    expect(decode.calls[0]?.body).toEqual({ ...client, kv_transfer_params: kvParams });
    // Each leg ran on its own context with the client's id.
    expect(prefillCall?.context).not.toBe(context);
    expect(prefillCall?.context.id).toBe('req-7');
    expect(decode.calls[0]?.context).not.toBe(context);
    expect(decode.calls[0]?.context.id).toBe('req-7');
  });

  it('a client stop never reaches prefill, and decode is still dispatched to claim the KV', async () => {
    const context = new Controller('req-8');
    const prefill = engine(() => {
      context.stopGenerating(); // the client leaves while prefill runs
      return new ScriptedSource([
        Annotated.fromData({ token_ids: [9], finish_reason: 'length', disaggregated_params: kvParams }),
      ]).end();
    });
    const decode = decodeTokens();
    await runFlow({ context, prefill: prefill.run, decode: decode.run });
    expect(prefill.calls[0]?.context.isStopped()).toBe(false);
    expect(decode.calls).toHaveLength(1);
  });

  it('a prefill that finishes the request is the whole answer: no decode, no disaggregated_params', async () => {
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData({ token_ids: [2], finish_reason: 'eos', disaggregated_params: kvParams }),
      ]).end(),
    );
    const decode = decodeTokens();
    const stream = await viaVllm(prefill, decode);
    expect((await collect(stream)).map((i) => i.data)).toEqual([{ token_ids: [2], finish_reason: 'eos' }]);
    expect(decode.calls).toHaveLength(0);
  });

  it.each([
    ['an error first item', () => new ScriptedSource([Annotated.fromError('prefill OOM')]).end(), 'prefill OOM'],
    ['no output', () => new ScriptedSource([]).end(), 'returned no output'],
    [
      'no disaggregated_params',
      () => new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end(),
      'No disaggregated params',
    ],
  ])('%s fails the request with a PrefillError before any decode', async (_, answer, text) => {
    const prefill = engine(answer);
    const decode = decodeTokens();
    const call = viaVllm(prefill, decode);
    await expect(call).rejects.toBeInstanceOf(PrefillError);
    await expect(call).rejects.toThrow(text);
    expect(decode.calls).toHaveLength(0);
  });

  it('a prefill dispatch that fails is a PrefillError keeping the cause', async () => {
    const refused = new Error('connect ECONNREFUSED');
    const call = runFlow({
      prefill: () => Promise.reject(refused),
      decode: decodeTokens().run,
    });
    await expect(call).rejects.toMatchObject({ name: 'PrefillError', cause: refused });
  });

  it('client handoff fields are stripped by default, refused when configured', async () => {
    const request = { ...client, kv_transfer_params: { remote_host: 'attacker' } };
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    await disaggregate({
      request,
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: vllmNixl,
      logger,
    });
    expect(decode.calls[0]?.body.kv_transfer_params).toEqual(kvParams);
    await expect(
      disaggregate({
        request,
        context: new Controller(),
        prefill: prefill.run,
        decode: decode.run,
        connector: vllmNixl,
        clientHandoffFields: 'reject',
      }),
    ).rejects.toBeInstanceOf(HandoffFieldError);
  });
});

describe('disaggregate, sequential (TensorRT-LLM context first)', () => {
  it('context_only, then generation_only with the context response parameters', async () => {
    const ctx = { ctx_request_id: 77, first_gen_tokens: [5], request_type: 'context_only' };
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData({ token_ids: [5], finish_reason: 'length', disaggregated_params: ctx }),
      ]).end(),
    );
    const decode = decodeTokens();
    await disaggregate({
      request: client,
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: trtllmContextFirst,
      logger,
    });
    expect(prefill.calls[0]?.body.disaggregated_params).toEqual({ request_type: 'context_only' });
    expect(decode.calls[0]?.body.disaggregated_params).toEqual({ ...ctx, request_type: 'generation_only' });
  });
});

describe('disaggregate, concurrent (SGLang bootstrap)', () => {
  it('both legs at once with the same rendezvous, the room congruent to the dp rank', async () => {
    const prefill = engine(() => new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end());
    const decode = decodeTokens();
    const stream = await disaggregate({
      request: client,
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: { bootstrapHost: '10.0.0.3', bootstrapPort: 8998, dpRank: 2, dpSize: 4 },
      logger,
    });
    expect(await collect(stream)).toHaveLength(3);
    const prefillBody = prefill.calls[0]?.body as RequestBody;
    const decodeBody = decode.calls[0]?.body as RequestBody;
    for (const field of ['bootstrap_host', 'bootstrap_port', 'bootstrap_room'])
      expect(decodeBody[field]).toBe(prefillBody[field]);
    expect(typeof decodeBody.bootstrap_room).toBe('bigint');
    expect((decodeBody.bootstrap_room as bigint) % 4n).toBe(2n);
    expect(prefillBody).toMatchObject({ bootstrap_host: '10.0.0.3', bootstrap_port: 8998, max_tokens: 1 });
    expect(decodeBody.max_tokens).toBe(64);
  });

  it('a prefill failure while decode streams ends the client stream with one error item', async () => {
    const prefillSource = new ScriptedSource();
    const prefill = engine(() => prefillSource);
    const decodeSource = new ScriptedSource([token(1)]);
    const decode = engine(() => decodeSource);
    const context = new Controller();
    const stream = await sglangFlow(prefill.run, decode.run, context);
    const reading = collect(stream);
    await flush();
    prefillSource.push(Annotated.fromData(LLMEngineOutput.error('bootstrap timed out'))).end();
    const items = await reading;
    expect(items[0]).toEqual(token(1));
    expect(Annotated.err(items[1])?.message).toContain('bootstrap timed out');
    expect(context.isStopped()).toBe(true);
  });

  it('a decode leg that fails before taking the KV stops a prefill waiting for it, after the client was told decode failed', async () => {
    const prefillSource = new ScriptedSource();
    const prefill = engine(() => prefillSource);
    const decode: Engine<unknown> = async () => {
      throw new Error('decode answered 500');
    };
    const outcome = await sglangFlow(prefill.run, decode, new Controller())
      .then(collect)
      .then(
        (items) => Annotated.err(items.at(-1))?.message,
        (error: Error) => error.message,
      );
    expect(outcome).toContain('decode answered 500');
    await flush();
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
  });

  it('a decode leg that took the KV leaves prefill alone, even when it ends first', async () => {
    const prefillSource = new ScriptedSource();
    const prefill = engine(() => prefillSource);
    const decode = engine(() => new ScriptedSource([token(1), Annotated.fromData(LLMEngineOutput.length())]).end());
    const stream = await sglangFlow(prefill.run, decode.run, new Controller());
    const reading = collect(stream);
    await flush();
    expect(prefill.calls[0]?.context.isStopped()).toBe(false);
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    expect(await reading).toHaveLength(2);
    expect(prefill.calls[0]?.context.isStopped()).toBe(false);
  });

  it('refuses a concurrent connector without the prefill worker rendezvous', async () => {
    await expect(
      disaggregate({
        request: client,
        context: new Controller(),
        prefill: decodeTokens().run,
        decode: decodeTokens().run,
        connector: sglangBootstrap,
      }),
    ).rejects.toThrow("needs the prefill worker's rendezvous");
  });
});

describe('disaggregate, early handoff', () => {
  it('decode starts on the first prefill output while prefill keeps streaming; the terminal waits for it', async () => {
    const first = Annotated.fromData({
      token_ids: [9],
      disaggregated_params: { bootstrap_host: 'h', bootstrap_port: 7000, bootstrap_room: '18446744073709551615' },
    });
    const prefillSource = new ScriptedSource([first]);
    const prefill = engine(() => prefillSource);
    const decode = decodeTokens();
    const stream = await disaggregate({
      request: client,
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: earlyBootstrap,
      logger,
    });
    expect(decode.calls[0]?.body.bootstrap_room).toBe(18446744073709551615n);
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual(token(1));
    expect((await iterator.next()).value).toEqual(token(2));
    const terminal = iterator.next();
    await flush();
    prefillSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    expect((await terminal).value?.data?.finish_reason).toBe('length');
  });
});

describe('usage', () => {
  it("cached_tokens in the client's usage comes from the prefill leg, not from decode", async () => {
    const prefillUsage = {
      prompt_tokens: 900,
      completion_tokens: 1,
      total_tokens: 901,
      prompt_tokens_details: { cached_tokens: 512 },
    };
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData({
          token_ids: [9],
          finish_reason: 'length',
          disaggregated_params: kvParams,
          completion_usage: prefillUsage,
        }),
      ]).end(),
    );
    const decodeUsage = {
      prompt_tokens: 900,
      completion_tokens: 2,
      total_tokens: 902,
      prompt_tokens_details: { cached_tokens: 0 },
    };
    const tokenItem = token(1);
    const decode = engine(() =>
      new ScriptedSource([
        tokenItem,
        Annotated.fromData({ token_ids: [], finish_reason: 'length', completion_usage: decodeUsage }),
      ]).end(),
    );
    const stream = await viaVllm(prefill, decode);
    const items = await collect(stream);
    expect(items[0]).toBe(tokenItem); // items without usage pass through as they are
    expect(items[1]?.data?.completion_usage).toEqual({ ...decodeUsage, prompt_tokens_details: { cached_tokens: 512 } });
    expect(decodeUsage.prompt_tokens_details.cached_tokens).toBe(0); // decode's own object untouched
  });

  it("without prompt details from prefill, decode's usage goes to the client as decode gave it", async () => {
    const decodeUsage = { prompt_tokens: 900, completion_tokens: 2, total_tokens: 902 };
    const decode = engine(() =>
      new ScriptedSource([
        Annotated.fromData({ token_ids: [], finish_reason: 'length', completion_usage: decodeUsage }),
      ]).end(),
    );
    const items = await collect(await viaVllm(prefillWithParams(), decode));
    expect(items[0]?.data?.completion_usage).toEqual(decodeUsage);
  });

  it("decode's error and cancelled finishes are the request's outcome, charged to decode", async () => {
    for (const [finish, outcome] of [
      [{ error: 'CUDA error' }, { outcome: 'error', leg: 'decode' }],
      ['cancelled', { outcome: 'cancelled' }],
    ] as const) {
      const log = eventLog();
      const decode = engine(() =>
        new ScriptedSource([token(1), Annotated.fromData({ token_ids: [], finish_reason: finish as never })]).end(),
      );
      await collect(await runFlow({ decode: decode.run, onEvent: log.onEvent }));
      expect(log.of('finished')).toMatchObject([outcome]);
    }
  });

  it("throw() on the client's stream ends it as return() does: cancelled, decode closed, every later call done", async () => {
    const decodeSource = new ScriptedSource([token(1), token(2)]);
    const decode = engine(() => decodeSource);
    const log = eventLog();
    const iterator = (await runFlow({ decode: decode.run, onEvent: log.onEvent }))[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.token_ids).toEqual([1]);
    expect(await iterator.throw?.(new Error('consumer gave up'))).toEqual({ value: undefined, done: true });
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    await flush();
    expect(decodeSource.closed).toBe(true);
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
  });

  it('closing the client stream closes decode', async () => {
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData({
          token_ids: [9],
          finish_reason: 'length',
          disaggregated_params: kvParams,
          completion_usage: {
            prompt_tokens: 1,
            completion_tokens: 1,
            total_tokens: 2,
            prompt_tokens_details: { cached_tokens: 1 },
          },
        }),
      ]).end(),
    );
    const decode = engine(() => new ScriptedSource([token(1), token(2)]));
    const stream = await viaVllm(prefill, decode);
    for await (const _ of stream) break;
    expect(decode.calls[0]?.source.closed).toBe(true);
  });
});

describe('skipPrefill (conditional disaggregation)', () => {
  it('true sends the request straight to decode with the client values, and no prefill', async () => {
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    const stream = await disaggregate({
      request: { ...client, bootstrap_room: 1 },
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: vllmNixl,
      skipPrefill: async () => true,
      logger,
    });
    expect(await collect(stream)).toHaveLength(3);
    expect(prefill.calls).toHaveLength(0);
    expect(decode.calls[0]?.body).toEqual(client);
  });

  it('false, undefined or an empty reason disaggregates', async () => {
    for (const answer of [false, undefined, '']) {
      const prefill = prefillWithParams();
      await runFlow({
        prefill: prefill.run,
        decode: decodeTokens().run,
        skipPrefill: () => answer,
      });
      expect(prefill.calls).toHaveLength(1);
    }
  });

  it('the routed event says why a request is aggregated: the reason given, skipPrefill for true, or no prefill worker', async () => {
    const reasonOf = async (options: Parameters<typeof runFlow>[0]) => {
      const log = eventLog();
      await collect(await runFlow({ ...options, onEvent: log.onEvent }));
      return log.of('routed').map(({ strategy, reason }) => ({ strategy, reason }));
    };
    expect(await reasonOf({ skipPrefill: () => 'short-prompt' })).toEqual([
      { strategy: 'aggregated', reason: 'short-prompt' },
    ]);
    expect(await reasonOf({ skipPrefill: () => true })).toEqual([{ strategy: 'aggregated', reason: 'skipPrefill' }]);
    const prefillWorkers = new WorkerPool<unknown>(['p']);
    prefillWorkers.setAvailable('p', false);
    expect(await reasonOf({ prefillWorkers })).toEqual([{ strategy: 'aggregated', reason: 'no-prefill-worker' }]);
    expect(await reasonOf({})).toEqual([{ strategy: 'sequential', reason: undefined }]);
  });

  it("noPrefillWorker 'fail': without a prefill worker in rotation the request fails with NoWorkerError naming the pool, and nothing reaches decode", async () => {
    const prefillWorkers = new WorkerPool<unknown>(['p']);
    prefillWorkers.setAvailable('p', false);
    const decode = decodeTokens();
    const failure = await runFlow({ prefillWorkers, decode: decode.run, noPrefillWorker: 'fail' }).catch(
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(NoWorkerError);
    expect((failure as NoWorkerError).message).toBe(
      "No prefill worker is available: the prefill pool's one worker is out of rotation",
    );
    expect(decode.calls).toHaveLength(0);
  });

  it('a planning error falls back to remote prefill and is logged; a cancellation fails the request', async () => {
    const recorded = recordingLogger();
    const prefill = prefillWithParams();
    await disaggregate({
      request: client,
      context: new Controller(),
      prefill: prefill.run,
      decode: decodeTokens().run,
      connector: vllmNixl,
      skipPrefill: () => {
        throw new Error('cache index unavailable');
      },
      logger: recorded.logger,
    });
    expect(prefill.calls).toHaveLength(1);
    expect(recorded.records.map((r) => [r.level, r.message])).toEqual([
      ['warn', 'skipPrefill failed; disaggregating the request'],
    ]);
    const cancelled = new DOMException('client gone', 'AbortError');
    await expect(
      runFlow({
        prefill: prefill.run,
        decode: decodeTokens().run,
        skipPrefill: () => Promise.reject(cancelled),
      }),
    ).rejects.toBe(cancelled);
  });
});

describe("the scheduler's P/D deciders", () => {
  /** A prefill engine that fails its first call with a 500 and hands off on the next. */
  const failingOnce = () => {
    let calls = 0;
    const run: Engine<unknown> = async (_body, context) => {
      calls++;
      if (calls === 1) throw UpstreamError.fromStatus('http://p0', 500, 'prefill OOM');
      return new ResponseStream(new ScriptedSource([handoffItem()]).end(), context);
    };
    return { run, calls: () => calls };
  };

  it('a decider that answers later is waited for: its reason sends the request to decode alone', async () => {
    const prefill = prefillWithParams();
    const log = eventLog();
    const decider = vi.fn(async () => 'cache-hot');
    const scheduler = new Scheduler<unknown, unknown>({ decider });
    await collect(await runFlow({ scheduler, prefill: prefill.run, onEvent: log.onEvent }));
    expect(prefill.calls).toHaveLength(0);
    expect(log.of('routed').map(({ strategy, reason }) => ({ strategy, reason }))).toEqual([
      { strategy: 'aggregated', reason: 'cache-hot' },
    ]);
    expect(decider).toHaveBeenCalledOnce();
  });

  it('asked once per request: an attempt after a failed prefill keeps the verdict', async () => {
    const prefill = failingOnce();
    const decider = vi.fn(() => undefined);
    const scheduler = new Scheduler<unknown, unknown>({
      prefillWorkers: new WorkerPool<unknown>(['p0', 'p1']),
      decider,
    });
    await collect(await runFlow({ scheduler, prefill: prefill.run, retryPrefill: () => 0 }));
    expect(prefill.calls()).toBe(2);
    expect(decider).toHaveBeenCalledOnce();
  });

  it("the caller's skipPrefill (a verdict it asked already) decides instead of the scheduler's deciders", async () => {
    const log = eventLog();
    const decider = vi.fn(() => 'short-prompt');
    const scheduler = new Scheduler<unknown, unknown>({ decider });
    await collect(await runFlow({ scheduler, skipPrefill: () => 'asked-before', onEvent: log.onEvent }));
    expect(log.of('routed').map(({ reason }) => reason)).toEqual(['asked-before']);
    expect(decider).not.toHaveBeenCalled();
  });

  it('the verdict is asked of the decider once per routing input, whoever asks: a pipeline, then the flow', async () => {
    const decider = vi.fn(async () => undefined);
    const scheduler = new Scheduler<unknown, unknown>({ decider });
    const input = new RoutingInput(client);
    expect(await scheduler.verdict(input)).toBeUndefined();
    await collect(await runFlow({ scheduler, input }));
    expect(decider).toHaveBeenCalledOnce();
    await scheduler.verdict(new RoutingInput(client));
    expect(decider).toHaveBeenCalledTimes(2);
  });

  it('a decider that fails disaggregates the request, logged at warn', async () => {
    const recorded = recordingLogger();
    const prefill = prefillWithParams();
    const scheduler = new Scheduler<unknown, unknown>({
      decider: () => Promise.reject(new Error('cache index unavailable')),
    });
    await collect(await runFlow({ scheduler, prefill: prefill.run, logger: recorded.logger }));
    expect(prefill.calls).toHaveLength(1);
    expect(recorded.records.map((r) => [r.level, r.message])).toEqual([
      ['warn', 'The P/D decider failed; disaggregating the request'],
    ]);
  });
});

describe('disaggregate refuses options it cannot use, saying what it expected', () => {
  const valid = {
    request: client,
    context: new Controller(),
    prefill: prefillWithParams().run,
    decode: decodeTokens().run,
    connector: vllmNixl,
  };
  it.each([
    ['no options', undefined, 'disaggregate expects an options object, got undefined'],
    [
      'a context that is not one',
      { ...valid, context: {} },
      "disaggregate expects context to be the client's AsyncEngineContext",
    ],
    [
      'a prefill that is not a function',
      { ...valid, prefill: 'http://p' },
      'disaggregate expects prefill to be an engine function',
    ],
    [
      'a decode that is not a function',
      { ...valid, decode: null },
      'disaggregate expects decode to be an engine function',
    ],
    ['no connector', { ...valid, connector: undefined }, 'disaggregate expects connector to be a Connector'],
    [
      'a connector of no family',
      { ...valid, connector: { ...vllmNixl, family: 'other' } },
      'disaggregate expects connector to be a Connector',
    ],
    ['a connector without prefillBody', { ...valid, connector: { ...vllmNixl, prefillBody: 1 } }, 'to be a Connector'],
    ['a connector without decodeBody', { ...valid, connector: { ...vllmNixl, decodeBody: 1 } }, 'to be a Connector'],
    [
      'a pool that is not a WorkerPool',
      { ...valid, decodeWorkers: ['d0'] },
      'disaggregate expects decodeWorkers to be a WorkerPool',
    ],
    ['a session key that is not a string', { ...valid, sessionKey: 7 }, 'sessionKey must be a string, got 7'],
  ])('%s', async (_, options, message) => {
    await expect(disaggregate(options as never)).rejects.toThrow(message);
  });

  it('a retryDecode answer that is no finite wait is no retry', async () => {
    for (const wait of [Number.NaN, Number.POSITIVE_INFINITY, '10' as never]) {
      const decodeWorkers = new WorkerPool<unknown>(['d0', 'd1']);
      let calls = 0;
      const decode: Engine<unknown> = async () => {
        calls++;
        throw new Error('503');
      };
      await expect(runFlow({ decode, decodeWorkers, retryDecode: () => wait })).rejects.toThrow('503');
      expect(calls).toBe(1);
    }
  });
});

describe('what disaggregate refuses before any worker', () => {
  it('a request body that is not a JSON object is the client’s mistake (a 400 above), not a prefill failure', async () => {
    for (const request of [null, [1], 'text', 5]) {
      const failure = await runFlow({ request: request as never }).catch((error: unknown) => error);
      expect(failure).toMatchObject({ name: 'UnsupportedRequestError', param: 'body' });
    }
  });

  it('a prefill failure the flow reports (the call rejects, or the stream ends with it) is logged at debug, not warn', async () => {
    const recorded = recordingLogger();
    const failing = engine(() => new ScriptedSource([Annotated.fromError('prefill OOM')]).end());
    await runFlow({ prefill: failing.run, logger: recorded.logger }).catch(() => {});
    expect(recorded.records.filter((record) => record.level === 'warn')).toEqual([]);
  });
});

describe('disaggregate, the rules at the edges of its options', () => {
  it.each([
    ['null options', null, 'disaggregate expects an options object, got null'],
    ['a null connector', { connector: null }, 'disaggregate expects connector to be a Connector'],
  ])('%s are refused, saying what was expected', async (_, options, message) => {
    const given = options === null ? null : { request: client, context: new Controller(), ...options };
    const full = given === null ? null : { prefill: prefillWithParams().run, decode: decodeTokens().run, ...given };
    await expect(disaggregate(full as never)).rejects.toThrow(new TypeError(message).message);
  });

  it("a body that is not an object is refused with what it was; reuseHandoff 'unreached' and 'always' are both accepted", async () => {
    await expect(runFlow({ request: [1] as never })).rejects.toThrow('The request body must be a JSON object, got');
    for (const reuseHandoff of ['unreached', 'always'] as const) {
      await expect(collect(await runFlow({ reuseHandoff }))).resolves.toHaveLength(3);
    }
  });

  it('the routed event names no prefill worker when none was given', async () => {
    const log = eventLog();
    await collect(await runFlow({ onEvent: log.onEvent }));
    expect(log.of('routed')[0]).not.toHaveProperty('prefillWorker');
    expect(log.of('routed')[0]).not.toHaveProperty('decodeWorker');
  });

  it('serving aggregated for want of a prefill worker is logged with the request id', async () => {
    const recorded = recordingLogger();
    const prefillWorkers = new WorkerPool<unknown>(['p']);
    prefillWorkers.setAvailable('p', false);
    await collect(await runFlow({ context: new Controller('req-agg'), prefillWorkers, logger: recorded.logger }));
    expect(recorded.records).toContainEqual({
      level: 'warn',
      fields: { requestId: 'req-agg' },
      message: 'No prefill worker is available; serving the request aggregated',
    });
  });

  it('a request that never started (no worker at its first attempt) reports no outcome: the caller may try again', async () => {
    const prefillWorkers = new WorkerPool<unknown>(['p']);
    prefillWorkers.setAvailable('p', false);
    const decodeWorkers = new WorkerPool<unknown>(['d']);
    decodeWorkers.setAvailable('d', false);
    for (const options of [{ prefillWorkers, noPrefillWorker: 'fail' as const }, { decodeWorkers }]) {
      const log = eventLog();
      await expect(runFlow({ ...options, onEvent: log.onEvent })).rejects.toBeInstanceOf(NoWorkerError);
      expect(log.of('finished')).toEqual([]);
    }
  });

  it('a planning error is logged with its error; a thrown null is a planning error too', async () => {
    const recorded = recordingLogger();
    const failure = new Error('cache index unavailable');
    const prefill = prefillWithParams();
    await collect(
      await runFlow({
        prefill: prefill.run,
        logger: recorded.logger,
        skipPrefill: () => {
          throw failure;
        },
      }),
    );
    expect(recorded.records[0]?.fields).toEqual({ err: failure });
    await collect(
      await runFlow({
        prefill: prefill.run,
        skipPrefill: () => {
          throw null;
        },
      }),
    );
    expect(prefill.calls).toHaveLength(2);
  });

  it('a retryDecode answer that is not a number of milliseconds is no retry, also where the handoff may be reused', async () => {
    for (const wait of ['10' as never, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      let calls = 0;
      const decode: Engine<unknown> = async () => {
        calls++;
        throw new Error('503');
      };
      await expect(
        runFlow({
          decode,
          decodeWorkers: new WorkerPool<unknown>(['d0', 'd1']),
          reuseHandoff: 'always',
          retryDecode: () => wait,
        }),
      ).rejects.toThrow('503');
      expect(calls).toBe(1);
    }
  });
});
