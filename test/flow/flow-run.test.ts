import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { earlyBootstrap, type Handoff } from '../../src/flow/connectors.js';
import { DeadlineError } from '../../src/flow/deadlines.js';
import {
  nextPrefill,
  type PrefillEvent,
  type PrefillPhase,
  prefillFailed,
  prefillRunning,
} from '../../src/flow/prefill-phase.js';
import type { RequestBody } from '../../src/flow/request-shaping.js';
import { Tripwire } from '../../src/flow/tripwire.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import type { PrefillTask } from '../../src/handoff/prefill-task.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated, type WireChunk } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import type { RoutingPolicy } from '../../src/routing/routing-policy.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, isPending, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { engine, eventLog, handoffItem, runFlow } from '../support/flow.js';

afterEach(() => {
  vi.useRealTimers();
});

/** `item` with `json` as what the worker sent for it. */
const withJson = (item: EngineItem, json: unknown, form: WireChunk['form'] = 'event') =>
  Annotated.withWire(item, [{ form, text: JSON.stringify(json), json: json as Record<string, unknown> }]);
const sglangWorker = { bootstrapHost: '10.0.0.3', bootstrapPort: 8998 };

/** A background task as the phase reads it: only its state. */
const task = (state: PrefillTask['state']) => ({ state }) as PrefillTask;

describe("the prefill leg's phases: an end is final", () => {
  const pending = task('pending');
  const idle: PrefillPhase = { kind: 'idle' };
  const reading: PrefillPhase = { kind: 'reading' };
  const background: PrefillPhase = { kind: 'background', task: pending };
  const done: PrefillPhase = { kind: 'done' };
  const failed: PrefillPhase = { kind: 'failed' };
  const dispatched: PrefillEvent = { kind: 'dispatched' };
  const handed: PrefillEvent = { kind: 'handed', task: pending };
  const succeeded: PrefillEvent = { kind: 'ended', failed: false };
  const failing: PrefillEvent = { kind: 'ended', failed: true };
  it.each([
    [idle, dispatched, reading],
    [reading, dispatched, reading], // a second dispatch (a rendezvous) reads on
    [background, dispatched, background],
    [idle, handed, background],
    [reading, handed, background],
    [reading, succeeded, done],
    [reading, failing, failed],
    [background, succeeded, done],
    [background, failing, failed],
    [done, dispatched, done],
    [done, handed, done],
    [done, failing, done], // a task's outcome reported late
    [failed, succeeded, failed],
  ] as const)('%o, then %o: %o', (phase, event, next) => {
    expect(nextPrefill(phase, event)).toStrictEqual(next);
  });

  it.each([
    [idle, false, false],
    [reading, true, false],
    [{ kind: 'background', task: task('pending') }, true, false],
    [{ kind: 'background', task: task('succeeded') }, false, false],
    [{ kind: 'background', task: task('failed') }, false, true], // a background failure counts at once
    [done, false, false],
    [failed, false, true],
  ] as const)('%o: running %s, failed %s', (phase, running, hasFailed) => {
    expect([prefillRunning(phase), prefillFailed(phase)]).toEqual([running, hasFailed]);
  });
});

describe('what the request asks of its prompt, through the flow', () => {
  const promptLogprobs = [null, { '42': { logprob: -1.5, rank: 3, decoded_token: ' there' } }];

  it("sequential: decode is not asked for prompt logprobs; the whole answer gets prefill's", async () => {
    const prefill = engine(() =>
      new ScriptedSource([
        withJson(handoffItem(), { choices: [{ index: 0, text: '!', prompt_logprobs: promptLogprobs }] }, 'body'),
      ]).end(),
    );
    const answer = Annotated.fromData<LLMEngineOutput>({ token_ids: [5], text: ' Bye', finish_reason: 'length' });
    const decode = engine(() =>
      new ScriptedSource([
        withJson(answer, { choices: [{ index: 0, text: ' Bye', finish_reason: 'length' }] }, 'body'),
      ]).end(),
    );
    const request = { model: 'm', prompt: 'Hi there', max_tokens: 4, prompt_logprobs: 1 };
    const items = await collect(await runFlow({ request, prefill: prefill.run, decode: decode.run }));
    expect(prefill.calls[0]?.body.prompt_logprobs).toBe(1);
    expect(decode.calls[0]?.body).not.toHaveProperty('prompt_logprobs');
    expect(Annotated.wire(items[0] as EngineItem)?.[0]?.json).toEqual({
      choices: [{ index: 0, text: ' Bye', finish_reason: 'length', prompt_logprobs: promptLogprobs }],
    });
  });

  describe("concurrent: decode's items wait for prefill's answer, which is merged into them", () => {
    const request = { model: 'm', prompt: 'Hi', max_tokens: 4, stream: true, echo: true, logprobs: 0 };
    const prefillAnswer = withJson(
      Annotated.fromData<LLMEngineOutput>({ token_ids: [7], finish_reason: 'length' }),
      {
        choices: [
          {
            index: 0,
            text: 'Hi!',
            logprobs: { tokens: ['Hi', '!'], token_logprobs: [null, -0.1], text_offset: [0, 2] },
          },
        ],
      },
      'body',
    );
    const decodeToken = withJson(Annotated.fromData<LLMEngineOutput>({ token_ids: [8], text: '?' }), {
      choices: [{ index: 0, text: '?', logprobs: { tokens: ['?'], token_logprobs: [-0.2], text_offset: [0] } }],
    });
    async function echoed() {
      const prefillSource = new ScriptedSource();
      const decodeSource = new ScriptedSource([decodeToken]);
      const prefill = engine(() => prefillSource);
      const decode = engine(() => decodeSource);
      const stream = await runFlow({
        request,
        prefill: prefill.run,
        decode: decode.run,
        connector: sglangBootstrap,
        prefillWorker: sglangWorker,
      });
      return { prefill, decode, prefillSource, decodeSource, iterator: stream[Symbol.asyncIterator]() };
    }

    it('the echo is prefill\u2019s: decode is not asked for it, and its first item begins with the prompt', async () => {
      const { prefill, decode, prefillSource, decodeSource, iterator } = await echoed();
      expect(prefill.calls[0]?.body.echo).toBe(true);
      expect(decode.calls[0]?.body).not.toHaveProperty('echo');
      const first = iterator.next();
      await flush();
      expect(await isPending(first)).toBe(true); // decode has an item; prefill has not answered
      prefillSource.push(prefillAnswer).end();
      const item = (await first).value as EngineItem;
      expect(item.data?.text).toBe('Hi?');
      expect(Annotated.wire(item)?.[0]?.json).toMatchObject({
        choices: [
          { text: 'Hi?', logprobs: { tokens: ['Hi', '?'], token_logprobs: [null, -0.2], text_offset: [0, 2] } },
        ],
      });
      decodeSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
      for (let step = await iterator.next(); step.done !== true; step = await iterator.next());
    });

    it("a stream closed while decode's read waits for prefill's answer closes decode at once", async () => {
      const { prefillSource, decodeSource, iterator } = await echoed();
      const first = iterator.next();
      await flush();
      await iterator.return?.();
      await flush();
      expect(decodeSource.closed).toBe(true);
      prefillSource.push(prefillAnswer).end();
      await first;
    });
  });

  it('a connector is given the prompt details prefill reported, with its handoff', async () => {
    const handoffs: Handoff[] = [];
    const connector = {
      ...vllmNixl,
      decodeBody: (body: RequestBody, handoff: Handoff) => {
        handoffs.push(handoff);
        return vllmNixl.decodeBody(body, handoff);
      },
    };
    const details = { cached_tokens: 16 };
    const withUsage = Annotated.fromData<LLMEngineOutput>({
      ...(handoffItem().data as LLMEngineOutput),
      completion_usage: { prompt_tokens: 20, completion_tokens: 1, total_tokens: 21, prompt_tokens_details: details },
    });
    await collect(await runFlow({ connector, prefill: engine(() => new ScriptedSource([withUsage]).end()).run }));
    await collect(await runFlow({ connector }));
    expect(handoffs[0]).toMatchObject({ kind: 'params', promptTokensDetails: details });
    expect(handoffs[1]).not.toHaveProperty('promptTokensDetails');
  });
});

describe('the events of the flow', () => {
  it('the routed event of a disaggregated request gives no reason; a policy\u2019s cache prediction is carried', async () => {
    const predicting: RoutingPolicy<string> = {
      name: 'predicting',
      select: (candidates) => candidates[0] as string,
      routed: (worker, input) => input?.notePredictedCached(worker, 12),
    };
    const log = eventLog();
    await collect(
      await runFlow({ prefillWorkers: new WorkerPool(['p0'], { selection: predicting }), onEvent: log.onEvent }),
    );
    const [routed] = log.of('routed');
    expect(routed).not.toHaveProperty('reason');
    expect(routed).toMatchObject({ prefillWorker: 'p0', predictedCachedTokens: 12 });
    const plain = eventLog();
    await collect(await runFlow({ onEvent: plain.onEvent }));
    expect(plain.of('routed')[0]).not.toHaveProperty('predictedCachedTokens');
  });

  it('prefill\u2019s first output is one event, at its first item: none for a prefill that answered nothing', async () => {
    const early = eventLog();
    const prefillSource = new ScriptedSource([
      Annotated.fromData({
        token_ids: [1],
        disaggregated_params: { bootstrap_room: 5, bootstrap_host: 'h', bootstrap_port: 1 },
      } as LLMEngineOutput),
    ]);
    const stream = await runFlow({
      prefill: engine(() => prefillSource).run,
      connector: earlyBootstrap,
      onEvent: early.onEvent,
    });
    prefillSource.push(token(2)).push(Annotated.fromData(LLMEngineOutput.length())).end();
    await collect(stream);
    expect(early.of('prefillFirstOutput')).toHaveLength(1);
    const empty = eventLog();
    await runFlow({ prefill: engine(() => new ScriptedSource().end()).run, onEvent: empty.onEvent }).catch(() => {});
    expect(empty.of('prefillFirstOutput')).toEqual([]);
  });

  it("an early handoff whose prefill is over before decode starts: prefill's end is still reported, once", async () => {
    const log = eventLog();
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData({
          token_ids: [1],
          disaggregated_params: { bootstrap_room: 5, bootstrap_host: 'h', bootstrap_port: 1 },
        } as LLMEngineOutput),
        Annotated.fromData(LLMEngineOutput.length()),
      ]).end(),
    );
    const items = await collect(
      await runFlow({ prefill: prefill.run, connector: earlyBootstrap, onEvent: log.onEvent }),
    );
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
    await flush();
    expect(log.of('prefillCompleted')).toHaveLength(1);
    expect(log.types().at(-1)).toBe('settled');
  });
});

describe('what each leg reports to the pools it came from', () => {
  /** A policy that takes the first worker and records each leg's outcome. */
  function recording() {
    const outcomes: Array<[string, string]> = [];
    const policy: RoutingPolicy<string> = {
      name: 'recording',
      select: (candidates) => candidates[0] as string,
      completed: (worker, _input, outcome) => outcomes.push([worker, outcome]),
    };
    return { outcomes, policy };
  }

  it('a request that went through: both legs succeeded', async () => {
    const prefill = recording();
    const decode = recording();
    await collect(
      await runFlow({
        prefillWorkers: new WorkerPool(['p0'], { selection: prefill.policy }),
        decodeWorkers: new WorkerPool(['d0'], { selection: decode.policy }),
      }),
    );
    await flush();
    expect([prefill.outcomes, decode.outcomes]).toEqual([[['p0', 'success']], [['d0', 'success']]]);
  });

  it('a prefill that failed, and a decode that failed before answering: each a failure of its own leg', async () => {
    const prefill = recording();
    await runFlow({
      prefill: engine(() => new ScriptedSource([Annotated.fromError('prefill OOM')]).end()).run,
      prefillWorkers: new WorkerPool(['p0'], { selection: prefill.policy }),
    }).catch(() => {});
    await flush();
    expect(prefill.outcomes).toEqual([['p0', 'failure']]);
    const decode = recording();
    await runFlow({
      decode: async () => {
        throw new Error('503');
      },
      decodeWorkers: new WorkerPool(['d0'], { selection: decode.policy }),
    }).catch(() => {});
    await flush();
    expect(decode.outcomes).toEqual([['d0', 'failure']]);
  });

  it('a decode stream that broke and went on elsewhere: a failure of the worker it left', async () => {
    const decode = recording();
    let call = 0;
    const run = async (_body: RequestBody, context: Controller) => {
      call++;
      const source =
        call === 1
          ? new ScriptedSource([Annotated.fromData({ token_ids: [2000], text: 'a' })]).fail(new Error('reset'))
          : new ScriptedSource([Annotated.fromData({ token_ids: [2001], text: 'b' })])
              .push(Annotated.fromData(LLMEngineOutput.length()))
              .end();
      return new ResponseStream(source, context);
    };
    await collect(
      await runFlow<unknown, string>({
        request: { model: 'm', prompt: [1, 2], max_tokens: 4, stream: true },
        decode: run as never,
        skipPrefill: () => true,
        decodeWorkers: new WorkerPool(['d0', 'd1'], { selection: decode.policy }),
        migration: { limit: 1 },
      }),
    );
    await flush();
    expect(decode.outcomes[0]).toEqual(['d0', 'failure']);
  });
});

describe('the flow under its deadlines', () => {
  it('a handoff budget ends with the handoff: a stream that goes on past it is not cut', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    for (const concurrent of [false, true]) {
      const prefillSource = new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end();
      const decodeSource = new ScriptedSource([token(1)]);
      const stream = await runFlow({
        ...(concurrent
          ? { connector: sglangBootstrap, prefillWorker: sglangWorker, prefill: engine(() => prefillSource).run }
          : {}),
        decode: engine(() => decodeSource).run,
        deadlines: { handoffMs: 100, idleMs: 0 },
      });
      const iterator = stream[Symbol.asyncIterator]();
      expect((await iterator.next()).value).toEqual(token(1));
      await vi.advanceTimersByTimeAsync(500);
      decodeSource.push(token(2)).push(Annotated.fromData(LLMEngineOutput.length())).end();
      const rest: EngineItem[] = [];
      for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) rest.push(step.value);
      expect(rest.map((item) => item.data?.token_ids[0] ?? item.data?.finish_reason)).toEqual([2, 'length']);
      expect(vi.getTimerCount()).toBe(0);
    }
  });

  it('a decode stream that comes after its first-token budget gave up on it is closed', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const decodeSource = new ScriptedSource([token(1)]);
    let open: (() => void) | undefined;
    const decode = (_body: RequestBody, context: Controller) =>
      new Promise((resolve) => {
        open = () => resolve(new ResponseStream(decodeSource, context));
      });
    const call = runFlow({ decode: decode as never, deadlines: { decodeFirstTokenMs: 100 } });
    call.catch(() => {});
    await vi.advanceTimersByTimeAsync(100);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'decodeFirstToken' });
    open?.();
    await flush();
    await flush();
    expect(decodeSource.closed).toBe(true);
  });

  it('a decode retry is not asked for after a request deadline', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const retryDecode = vi.fn(() => 0);
    const decode = (_body: RequestBody, context: Controller) =>
      new Promise((_, reject) => {
        context.stopped().then(() => reject(new Error('aborted')));
      });
    const call = runFlow({
      decode: decode as never,
      decodeWorkers: new WorkerPool(['d0', 'd1']),
      reuseHandoff: 'always',
      retryDecode,
      deadlines: { totalMs: 100, decodeFirstTokenMs: 0 },
    });
    call.catch(() => {});
    await vi.advanceTimersByTimeAsync(100);
    await expect(call).rejects.toMatchObject({ name: 'DeadlineError', phase: 'total' });
    expect(retryDecode).not.toHaveBeenCalled();
  });
});

describe('a prefill its decode leg left', () => {
  it('is stopped once the client was told why, and the log says so', async () => {
    const recorded = recordingLogger();
    const prefillSource = new ScriptedSource();
    const prefill = engine(() => prefillSource);
    const context = new Controller('req-peerless');
    await runFlow({
      context,
      prefill: prefill.run,
      decode: async () => {
        throw new Error('decode refused');
      },
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      logger: recorded.logger,
    }).catch(() => {});
    await flush();
    expect(prefill.calls[0]?.context.isKilled()).toBe(true);
    expect(recorded.records).toContainEqual({
      level: 'debug',
      fields: { requestId: 'req-peerless' },
      message: 'Stopping a prefill whose decode leg ended without taking the KV',
    });
  });

  it("a concurrent prefill's failure is the flow's to report: nothing at warn", async () => {
    const recorded = recordingLogger();
    const stream = await runFlow({
      prefill: engine(() => new ScriptedSource([Annotated.fromError('prefill OOM')]).end()).run,
      decode: engine(() => new ScriptedSource()).run,
      connector: sglangBootstrap,
      prefillWorker: sglangWorker,
      logger: recorded.logger,
    });
    await collect(stream).catch(() => {});
    await flush();
    expect(recorded.records.filter((record) => record.level !== 'debug')).toEqual([]);
  });
});

describe('the tripwire a deadline interrupts an await with', () => {
  it('settles like the work, unless tripped first; after a trip every guard rejects at once, with the first error', async () => {
    const wire = new Tripwire();
    await expect(wire.guard(Promise.resolve(1))).resolves.toBe(1);
    const first = new DeadlineError('total', 100, 'decode');
    const pending = wire.guard(new Promise(() => {}));
    wire.trip(first);
    await expect(pending).rejects.toBe(first);
    wire.trip(new DeadlineError('handoff', 50, 'decode'));
    expect(wire.error).toBe(first);
    await expect(wire.guard(Promise.resolve(2))).rejects.toBe(first);
  });
});
