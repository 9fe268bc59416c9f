import { describe, expect, it, vi } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, flush, type Item, ScriptedSource, token } from '../support/async.js';
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
