import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { earlyBootstrap } from '../../src/flow/connectors.js';
import { type Deadlines, deadlineIn } from '../../src/flow/deadlines.js';
import { disaggregate, type Engine } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { FinishReason } from '../../src/protocol/finish-reason.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { deferred, flush, type Item, isPending, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { client, eventLog, handoffItem } from '../support/flow.js';
import { propertyOptions } from '../support/property.js';

const ACTIONS = [
  'prefillOutput',
  'prefillOk',
  'prefillError',
  'prefillThrow',
  'decodeOpen',
  'decodeToken',
  'decodeTerminal',
  'decodeEnd',
  'decodeError',
  'decodeThrow',
  'read',
  'read',
  'return',
  'clientStop',
  'clientKill',
  'tick',
  'flush',
] as const;
type Action = (typeof ACTIONS)[number];

const families = { sequential: vllmNixl, concurrent: sglangBootstrap, early: earlyBootstrap } as const;

const bootstrapItem = () =>
  Annotated.fromData<LLMEngineOutput>({
    token_ids: [],
    disaggregated_params: { bootstrap_host: 'p0', bootstrap_port: 8998, bootstrap_room: '9007199254740993' },
  });

/**
 * How the client reads: up to `inFlight` calls of `next()` at once, each `read` action issuing
 * one the next of `depths` microtasks later (the depths are used in turn).
 */
interface ReaderPlan {
  inFlight: number;
  depths: number[];
}

/** One request through the flow, driven by `actions`, then run to its end; returns what was observed. */
async function scenario(
  family: keyof typeof families,
  actions: Action[],
  deadlines: Deadlines,
  deferDecode: boolean,
  plan: ReaderPlan = { inFlight: 1, depths: [0] },
  /** The client reads to the end once both workers have finished; false: a reader that never comes back. */
  readToEnd = true,
) {
  const context = new Controller('req-p');
  const prefillSource = new ScriptedSource();
  const decodeSource = new ScriptedSource();
  let prefillContext: Controller | undefined;
  let decodeContext: Controller | undefined;
  const opening = deferred<void>();
  if (!deferDecode) opening.resolve();
  const prefill: Engine = async (_, ctx) => {
    prefillContext = ctx as Controller;
    return new ResponseStream(prefillSource, ctx);
  };
  const decode: Engine = async (_, ctx) => {
    decodeContext = ctx as Controller;
    await opening.promise;
    return new ResponseStream(decodeSource, ctx);
  };
  const prefillWorkers = new WorkerPool([{ bootstrapHost: 'p0', bootstrapPort: 8998, dpRank: 1, dpSize: 2 }]);
  const decodeWorkers = new WorkerPool(['d0']);
  const log = eventLog();
  const outcome: {
    items: Item[];
    rejected?: unknown;
    readError?: unknown;
    afterEnd: Item[];
    clientLeft: boolean;
    /** Calls in flight when the consumer closed the stream. */
    closedWith: Promise<unknown>[];
  } = { items: [], afterEnd: [], clientLeft: false, closedWith: [] };
  const call = disaggregate({
    request: client,
    context,
    prefill,
    decode,
    connector: families[family],
    prefillWorkers,
    decodeWorkers,
    deadlines,
    cleanupBudgetMs: 500,
    onEvent: log.onEvent,
    logger: recordingLogger().logger,
  });
  let iterator: AsyncIterator<Item> | undefined;
  call.then(
    (stream) => {
      iterator = stream[Symbol.asyncIterator]();
    },
    (error: unknown) => {
      outcome.rejected = error;
    },
  );
  /** Every call of next(), in call order, with its answer once it has one. */
  const calls: Array<{ promise: Promise<unknown>; answer?: { step: IteratorResult<Item> } | { error: unknown } }> = [];
  const answerOrder: number[] = [];
  let unanswered = 0;
  let depthAt = 0;
  let closed = false;
  let ended = false;
  let prefillPushed = false;
  const prefillOutput = () => {
    const first = !prefillPushed;
    prefillPushed = true;
    if (family === 'early' && first) return bootstrapItem();
    return Annotated.fromData<LLMEngineOutput>({ token_ids: [] });
  };
  const issue = () => {
    if (iterator === undefined || ended || closed || unanswered >= plan.inFlight) return;
    const index = calls.length;
    const answered = (answer: { step: IteratorResult<Item> } | { error: unknown }) => {
      const call = calls[index] as (typeof calls)[number];
      call.answer = answer;
      answerOrder.push(index);
      unanswered -= 1;
      if ('error' in answer || answer.step.done === true) ended = true;
    };
    unanswered += 1;
    const promise = iterator.next().then(
      (step) => answered({ step }),
      (error: unknown) => answered({ error }),
    );
    calls.push({ promise });
  };
  /** Issues a call the next planned number of microtasks from now. */
  const read = () => {
    const depth = plan.depths[depthAt++ % plan.depths.length] as number;
    let turn = Promise.resolve();
    for (let i = 0; i < depth; i++) turn = turn.then();
    turn.then(issue);
  };
  const reading = () => calls.filter((call) => call.answer === undefined).map((call) => call.promise);

  for (const action of actions) {
    switch (action) {
      case 'prefillOutput':
        prefillSource.push(prefillOutput());
        break;
      case 'prefillOk':
        if (family === 'early' && !prefillPushed) prefillSource.push(prefillOutput());
        prefillSource.push(family === 'sequential' ? handoffItem() : Annotated.fromData(LLMEngineOutput.length()));
        prefillSource.end();
        prefillPushed = true;
        break;
      case 'prefillError':
        prefillSource.push(Annotated.fromError('prefill failed')).end();
        break;
      case 'prefillThrow':
        prefillSource.fail(new Error('prefill connection reset'));
        break;
      case 'decodeOpen':
        opening.resolve();
        break;
      case 'decodeToken':
        decodeSource.push(token(1));
        break;
      case 'decodeTerminal':
        decodeSource.push(Annotated.fromData(LLMEngineOutput.length()));
        break;
      case 'decodeEnd':
        decodeSource.end();
        break;
      case 'decodeError':
        decodeSource.push(Annotated.fromError('decode failed'));
        break;
      case 'decodeThrow':
        decodeSource.fail(new Error('decode connection reset'));
        break;
      case 'read':
        read();
        break;
      case 'return':
        if (iterator !== undefined) {
          if (!ended) outcome.clientLeft = true; // the consumer left: 'cancelled' is a fair outcome
          closed = true;
          // Calls still in flight answer afterwards: done, never an item.
          for (const call of calls) if (call.answer === undefined) outcome.closedWith.push(call.promise);
          await iterator.return?.();
          ended = true;
        }
        break;
      case 'clientStop':
      case 'clientKill':
        if (!context.isStopped() && log.of('finished').length === 0) outcome.clientLeft = true;
        if (action === 'clientStop') context.stopGenerating();
        else context.kill();
        break;
      case 'tick':
        await vi.advanceTimersByTimeAsync(60);
        break;
      case 'flush':
        await flush();
        break;
    }
  }

  // Run everything to its end: both workers finish, the client reads to the end.
  if (family === 'early' && !prefillPushed) prefillSource.push(prefillOutput());
  prefillSource.push(family === 'sequential' ? handoffItem() : Annotated.fromData(LLMEngineOutput.length())).end();
  opening.resolve();
  decodeSource.push(token(2)).push(Annotated.fromData(LLMEngineOutput.length())).end();
  for (let round = 0; round < 40; round++) {
    await flush();
    await vi.advanceTimersByTimeAsync(100);
    const inFlight = reading();
    if (inFlight.length > 0) {
      if (await isPending(Promise.all(inFlight))) continue;
    }
    if (ended || outcome.rejected !== undefined || !readToEnd) break;
    for (let i = 0; i < plan.inFlight; i++) read();
  }
  const stuckRead = reading().length > 0 && (await isPending(Promise.all(reading())));
  // Past every budget: clean-ups finish or give up.
  await vi.advanceTimersByTimeAsync(5000);
  await flush();
  // What the client saw, in call order: items until the end, then nothing but done.
  expect(answerOrder).toEqual([...answerOrder].sort((a, b) => a - b));
  let over = false;
  for (const call of calls) {
    const answer = call.answer;
    if (answer === undefined) continue;
    if ('error' in answer) {
      if (over) outcome.afterEnd.push({ error: String(answer.error) } as Item);
      else outcome.readError = answer.error;
      over = true;
    } else if (answer.step.done === true) {
      over = true;
    } else if (over || outcome.closedWith.includes(call.promise)) {
      outcome.afterEnd.push(answer.step.value);
    } else {
      outcome.items.push(answer.step.value);
    }
  }
  return {
    outcome,
    ended: ended || outcome.rejected !== undefined,
    stuckRead,
    log,
    context,
    prefillContext,
    decodeContext,
    decodeSource,
    leases: [prefillWorkers.inFlight(prefillWorkers.workers[0] as never), decodeWorkers.inFlight('d0')],
  };
}

const isTerminal = (item: Item) => {
  if (Annotated.isError(item)) return true;
  const reason = item?.data?.finish_reason;
  return reason !== undefined && reason !== null;
};

afterEach(() => {
  vi.useRealTimers();
});

describe('the flow under random interleavings', () => {
  it('never hangs; answers in call order with up to three reads in flight; one terminal, nothing after it; exactly one outcome; settled last; leases back; the client never cancels prefill', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('sequential', 'concurrent', 'early') as fc.Arbitrary<keyof typeof families>,
        fc.array(fc.constantFrom(...ACTIONS), { maxLength: 24 }),
        fc.record(
          {
            idleMs: fc.constant(150),
            totalMs: fc.constant(900),
            decodeFirstTokenMs: fc.constant(300),
            prefillFirstOutputMs: fc.constant(200),
            handoffMs: fc.constant(400),
          },
          { requiredKeys: [] },
        ),
        fc.boolean(),
        fc.record({
          inFlight: fc.constantFrom(1, 2, 3),
          depths: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 6 }),
        }),
        async (family, actions, deadlines, deferDecode, plan) => {
          vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
          try {
            const seen = await scenario(family, actions, deadlines, deferDecode, plan);
            const { outcome, log } = seen;
            // Never hangs: the client stream (or the call) ends once both workers have.
            expect(seen.stuckRead).toBe(false);
            expect(seen.ended).toBe(true);
            // One terminal at most, and it is the last item; nothing after the end.
            const firstTerminal = outcome.items.findIndex(isTerminal);
            if (firstTerminal >= 0) expect(firstTerminal).toBe(outcome.items.length - 1);
            expect(outcome.afterEnd).toEqual([]);
            // Exactly one outcome, and settled once, last.
            const finished = log.of('finished');
            expect(finished).toHaveLength(1);
            expect(log.types().filter((type) => type === 'settled')).toHaveLength(1);
            expect(log.types().at(-1)).toBe('settled');
            // The outcome agrees with what the client saw, or is 'cancelled' if the client left
            // (or its consumer stopped reading) while the request was under way; a read already
            // in flight may still have delivered something afterwards.
            const last = outcome.items.at(-1);
            let expected: string | undefined;
            if (outcome.rejected !== undefined || outcome.readError !== undefined) expected = 'error';
            else if (last !== undefined && Annotated.isError(last)) expected = 'error';
            else if (last !== undefined && isTerminal(last)) {
              const reason = last.data?.finish_reason;
              expected = FinishReason.isError(reason)
                ? 'error'
                : FinishReason.isCancelled(reason)
                  ? 'cancelled'
                  : 'success';
            }
            // A prefill that failed before the consumer left (with nobody reading, the flow reads
            // its error itself) is an error, whoever was reading.
            const failedFirst = log.of('prefillFailed').some((event) => !event.late) ? ['error'] : [];
            if (outcome.clientLeft) expect(['cancelled', expected, ...failedFirst]).toContain(finished[0]?.outcome);
            else if (expected !== undefined) expect(finished[0]?.outcome).toBe(expected);
            // Every lease is back once the request has settled.
            expect(seen.leases).toEqual([0, 0]);
            // Nothing the client does cancels prefill: only a deadline may stop it.
            const prefillDeadline =
              deadlineIn(log.of('finished')[0]?.error) !== undefined ||
              deadlineIn(log.of('prefillFailed')[0]?.error) !== undefined;
            if (!prefillDeadline) expect(seen.prefillContext?.isStopped() ?? false).toBe(false);
            // A decode that was opened is closed or finished by the end.
            if (seen.decodeContext !== undefined && seen.decodeSource.nextCalls > 0) {
              expect(seen.decodeSource.finished).toBe(true);
            }
          } finally {
            vi.useRealTimers();
          }
        },
      ),
      propertyOptions(2000, 20261130),
    );
  }, 120_000);

  it('a reader that never comes: once the client has gone, every leg ends, its leases are back and settled comes last, with no read at all', async () => {
    const NO_READS: Action[] = ACTIONS.filter((action) => action !== 'read' && action !== 'return');
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('sequential', 'concurrent', 'early') as fc.Arbitrary<keyof typeof families>,
        fc.array(fc.constantFrom(...NO_READS), { maxLength: 16 }),
        fc.constantFrom<Action>('clientStop', 'clientKill'),
        fc.nat(),
        fc.boolean(),
        async (family, actions, leave, at, deferDecode) => {
          vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
          try {
            // The client leaves somewhere in the schedule; nobody ever reads the stream.
            const schedule = [...actions];
            schedule.splice(at % (schedule.length + 1), 0, leave);
            const seen = await scenario(family, schedule, {}, deferDecode, { inFlight: 1, depths: [0] }, false);
            const { log } = seen;
            expect(log.of('finished')).toHaveLength(1);
            expect(log.types().filter((type) => type === 'settled')).toHaveLength(1);
            expect(log.types().at(-1)).toBe('settled');
            expect(seen.leases).toEqual([0, 0]);
            // A decode that was opened was read for its claim and closed, or finished.
            if (seen.decodeContext !== undefined && seen.decodeSource.nextCalls > 0) {
              expect(seen.decodeSource.finished).toBe(true);
            }
          } finally {
            vi.useRealTimers();
          }
        },
      ),
      propertyOptions(500, 20261201),
    );
  }, 120_000);
});
