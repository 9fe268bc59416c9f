import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { type Lease, NoWorkerError, WorkerPool } from '../../src/flow/worker-pool.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { cacheAware } from '../../src/routing/cache-aware.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { Scheduler } from '../../src/routing/scheduler.js';
import { sessionAffinity } from '../../src/routing/session-affinity.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, flush, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { client, decodeTokens, engine, eventLog, prefillWithParams, runFlow } from '../support/flow.js';
import { propertyOptions } from '../support/property.js';

const logger = recordingLogger().logger;

describe('WorkerPool', () => {
  it('round-robin (the default) takes each worker in turn', () => {
    const pool = new WorkerPool(['a', 'b', 'c']);
    expect([1, 2, 3, 4, 5].map(() => pool.acquire().worker)).toEqual(['a', 'b', 'c', 'a', 'b']);
  });

  it('least-in-flight takes the least busy worker, ties in turn, and counts until release', () => {
    const pool = new WorkerPool(['a', 'b', 'c'], { selection: 'least-in-flight' });
    const first = pool.acquire();
    const second = pool.acquire();
    expect([first.worker, second.worker]).toEqual(['a', 'b']);
    expect(pool.acquire().worker).toBe('c');
    first.release();
    first.release(); // idempotent
    expect(pool.inFlight('a')).toBe(0);
    expect(pool.acquire().worker).toBe('a');
    second.release();
    expect(pool.acquire().worker).toBe('b');
    expect(pool.workers.map((w) => pool.inFlight(w))).toEqual([1, 1, 1]);
  });

  it('a selection function chooses among the candidates and must return one of them', () => {
    const pool = new WorkerPool([{ id: 1 }, { id: 2 }], { selection: (candidates) => candidates[1] as { id: number } });
    expect(pool.acquire().worker).toEqual({ id: 2 });
    const wrong = new WorkerPool([{ id: 1 }], { selection: () => ({ id: 1 }) });
    expect(() => wrong.acquire()).toThrow('which is not a worker of this pool');
  });

  it('workers marked down leave the rotation until marked up; none left is a NoWorkerError', () => {
    const pool = new WorkerPool(['a', 'b', 'c'], { selection: 'least-in-flight' });
    pool.setAvailable('b', false);
    expect(pool.available).toEqual(['a', 'c']);
    expect([pool.acquire().worker, pool.acquire().worker, pool.acquire().worker]).not.toContain('b');
    pool.setAvailable('a', false);
    pool.setAvailable('c', false);
    expect(() => pool.acquire()).toThrow(NoWorkerError);
    expect(() => pool.acquire()).toThrow('No worker is available: all 3 workers of the pool are out of rotation');
    pool.setAvailable('b', true);
    expect(pool.acquire().worker).toBe('b');
    expect(pool.isAvailable('b')).toBe(true);
    expect(() => pool.setAvailable('z', true)).toThrow('is not a worker of this pool');
  });

  it('refuses what is not a list, a worker listed twice or an unknown selection, saying what was expected', () => {
    expect(() => new WorkerPool('a' as never)).toThrow('WorkerPool expects an array of workers, got "a"');
    expect(() => new WorkerPool(['a', 'a'])).toThrow('each worker once');
    expect(() => new WorkerPool(['a'], { selection: 'random' as never })).toThrow(
      "expected 'round-robin', 'least-in-flight', a routing policy (such as cacheAware()) or a function",
    );
  });
});

describe('WorkerPool membership at run time', () => {
  it('an empty pool is a NoWorkerError that says so, until a worker is added', () => {
    const pool = new WorkerPool<string>([]);
    expect(() => pool.acquire()).toThrow('the pool has none');
    pool.add('a');
    expect(pool.acquire().worker).toBe('a');
    expect(() => pool.add('a')).toThrow('already a worker of this pool');
  });

  it('a worker added out of rotation waits for setAvailable; its state says so', () => {
    const pool = new WorkerPool(['a']);
    pool.add('b', { available: false });
    expect(pool.workers).toEqual(['a', 'b']);
    expect(pool.stateOf('b')).toBe('down');
    expect([pool.acquire().worker, pool.acquire().worker]).toEqual(['a', 'a']);
    pool.setAvailable('b', true);
    expect(pool.stateOf('b')).toBe('ready');
    expect(pool.available).toEqual(['a', 'b']);
    expect(pool.stateOf('z')).toBeUndefined();
  });

  it('draining: no new lease, the worker stays listed while leases are out, and leaves at the last release', async () => {
    const pool = new WorkerPool(['a', 'b']);
    const first = pool.acquire();
    const second = pool.acquire();
    const again = pool.acquire();
    expect([first.worker, second.worker, again.worker]).toEqual(['a', 'b', 'a']);
    let left = false;
    const drained = pool.drain('a').then(() => {
      left = true;
    });
    expect(pool.drain('a')).toBe(pool.drain('a'));
    expect(pool.stateOf('a')).toBe('draining');
    expect(pool.isAvailable('a')).toBe(false);
    expect(pool.available).toEqual(['b']);
    expect(pool.workers).toEqual(['a', 'b']);
    expect([pool.acquire().worker, pool.acquire().worker]).toEqual(['b', 'b']);
    // Health checks do not bring a draining worker back.
    pool.setAvailable('a', true);
    expect(pool.isAvailable('a')).toBe(false);
    first.release();
    await flush();
    expect(left).toBe(false);
    expect(pool.inFlight('a')).toBe(1);
    again.release();
    await drained;
    expect(left).toBe(true);
    expect(pool.workers).toEqual(['b']);
    expect(pool.stateOf('a')).toBeUndefined();
    expect(() => pool.drain('a')).toThrow('is not a worker of this pool');
  });

  it('draining an idle worker lets it leave at once', async () => {
    const pool = new WorkerPool(['a', 'b']);
    await pool.drain('b');
    expect(pool.workers).toEqual(['a']);
  });

  it('removing: gone from the list at once, leases under way stay valid and their release is counted', async () => {
    const pool = new WorkerPool(['a', 'b'], { selection: 'least-in-flight' });
    const lease = pool.acquire();
    expect(lease.worker).toBe('a');
    let left = false;
    const removed = pool.remove('a').then(() => {
      left = true;
    });
    expect(pool.workers).toEqual(['b']);
    expect(pool.stateOf('a')).toBeUndefined();
    expect(pool.inFlight('a')).toBe(1);
    expect(pool.acquire().worker).toBe('b');
    await flush();
    expect(left).toBe(false);
    lease.release();
    await removed;
    expect(left).toBe(true);
    expect(pool.inFlight('a')).toBe(0);
    expect(() => pool.remove('a')).toThrow('remove: ');
    expect(() => pool.setAvailable('a', true)).toThrow('is not a worker of this pool');
  });

  it('removing a draining worker takes it off the list; it leaves when idle', async () => {
    const pool = new WorkerPool(['a', 'b']);
    const lease = pool.acquire();
    const drained = pool.drain('a');
    const removed = pool.remove('a');
    expect(pool.workers).toEqual(['b']);
    lease.release();
    await Promise.all([drained, removed]);
    expect(pool.inFlight('a')).toBe(0);
  });

  it('a worker removed with leases out and added again keeps an exact count and is in rotation', async () => {
    const pool = new WorkerPool(['a', 'b'], { selection: 'least-in-flight' });
    const lease = pool.acquire();
    const removed = pool.remove('a');
    pool.add('a');
    await removed; // answered: it is back
    expect(pool.inFlight('a')).toBe(1);
    expect(pool.isAvailable('a')).toBe(true);
    lease.release();
    expect(pool.inFlight('a')).toBe(0);
    expect(pool.workers).toEqual(['b', 'a']);
  });

  it('a routing policy forgets a worker that drains or is removed', () => {
    const forgotten: string[] = [];
    const policy = {
      name: 'first',
      select: (candidates: readonly string[]) => candidates[0] as string,
      forget: (w: string) => {
        forgotten.push(w);
      },
    };
    const pool = new WorkerPool(['a', 'b', 'c'], { selection: policy });
    void pool.drain('a');
    void pool.remove('b');
    expect(forgotten).toEqual(['a', 'b']);
  });
});

describe('disaggregate with worker pools', () => {
  it('each engine gets the worker chosen for its leg, and the leases end with the legs', async () => {
    const prefillWorkers = new WorkerPool([{ url: 'http://p0' }, { url: 'http://p1' }]);
    const decodeWorkers = new WorkerPool([{ url: 'http://d0' }], { selection: 'least-in-flight' });
    const prefill = prefillWithParams();
    const decodeSource = new ScriptedSource([token(1)]);
    const decode = engine(() => decodeSource);
    const log = eventLog();
    const stream = await runFlow({
      prefill: prefill.run,
      decode: decode.run,
      prefillWorkers,
      decodeWorkers,
      onEvent: log.onEvent,
    });
    expect(prefill.calls[0]?.worker).toEqual({ url: 'http://p0' });
    expect(decode.calls[0]?.worker).toEqual({ url: 'http://d0' });
    expect(log.of('routed')).toMatchObject([
      { prefillWorker: { url: 'http://p0' }, decodeWorker: { url: 'http://d0' } },
    ]);
    expect(prefillWorkers.inFlight(prefillWorkers.workers[0] as { url: string })).toBe(0); // prefill is over
    expect(decodeWorkers.inFlight(decodeWorkers.workers[0] as { url: string })).toBe(1); // decode streams
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    decodeSource.push(Annotated.fromData(LLMEngineOutput.length())).end();
    await iterator.next();
    await flush();
    expect(decodeWorkers.inFlight(decodeWorkers.workers[0] as { url: string })).toBe(0);
  });

  it("concurrent: the rendezvous is the chosen prefill worker's, with its dp rank", async () => {
    const prefillWorkers = new WorkerPool([
      { bootstrapHost: 'p0', bootstrapPort: 8998, dpRank: 1, dpSize: 2 },
      { bootstrapHost: 'p1', bootstrapPort: 8999, dpRank: 3, dpSize: 4 },
    ]);
    const rooms: bigint[] = [];
    for (const expected of ['p0', 'p1']) {
      const decode = decodeTokens();
      await collect(
        await disaggregate({
          request: client,
          context: new Controller(),
          prefill: engine(() => new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end()).run,
          decode: decode.run,
          connector: sglangBootstrap,
          prefillWorkers,
          logger,
        }),
      );
      expect(decode.calls[0]?.body.bootstrap_host).toBe(expected);
      rooms.push(decode.calls[0]?.body.bootstrap_room as bigint);
    }
    expect((rooms[0] as bigint) % 2n).toBe(1n);
    expect((rooms[1] as bigint) % 4n).toBe(3n);
  });

  it('a request that fails before decode releases both leases', async () => {
    const prefillWorkers = new WorkerPool(['p']);
    const decodeWorkers = new WorkerPool(['d']);
    await expect(
      runFlow({
        prefill: engine(() => new ScriptedSource([Annotated.fromError('prefill OOM')]).end()).run,
        decode: decodeTokens().run,
        prefillWorkers,
        decodeWorkers,
      }),
    ).rejects.toThrow('prefill OOM');
    expect([prefillWorkers.inFlight('p'), decodeWorkers.inFlight('d')]).toEqual([0, 0]);
  });

  it('no prefill worker in rotation: the request is served aggregated (as the reference does); no decode worker: NoWorkerError', async () => {
    const prefillWorkers = new WorkerPool(['p']);
    prefillWorkers.setAvailable('p', false);
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    const log = eventLog();
    const recorded = recordingLogger();
    const items = await collect(
      await disaggregate({
        request: client,
        context: new Controller(),
        prefill: prefill.run,
        decode: decode.run,
        connector: vllmNixl,
        prefillWorkers,
        onEvent: log.onEvent,
        logger: recorded.logger,
      }),
    );
    expect(items).toHaveLength(3);
    expect(prefill.calls).toHaveLength(0);
    expect(log.of('routed')).toMatchObject([{ strategy: 'aggregated' }]);
    expect(recorded.records[0]?.message).toBe('No prefill worker is available; serving the request aggregated');
    const decodeWorkers = new WorkerPool(['d']);
    decodeWorkers.setAvailable('d', false);
    const both = new WorkerPool(['p']);
    await expect(
      runFlow({
        prefill: prefill.run,
        decode: decode.run,
        prefillWorkers: both,
        decodeWorkers,
      }),
    ).rejects.toBeInstanceOf(NoWorkerError);
    expect(both.inFlight('p')).toBe(0);
  });

  it('leases end also when prefill finishes the request, or the rendezvous is missing', async () => {
    const prefillWorkers = new WorkerPool(['p']);
    const decodeWorkers = new WorkerPool(['d']);
    const finishing = engine(() =>
      new ScriptedSource([Annotated.fromData<LLMEngineOutput>({ token_ids: [2], finish_reason: 'eos' })]).end(),
    );
    await collect(
      await runFlow({
        prefill: finishing.run,
        decode: decodeTokens().run,
        prefillWorkers,
        decodeWorkers,
      }),
    );
    expect([prefillWorkers.inFlight('p'), decodeWorkers.inFlight('d')]).toEqual([0, 0]);
    await expect(
      disaggregate({
        request: client,
        context: new Controller(),
        prefill: finishing.run,
        decode: decodeTokens().run,
        connector: sglangBootstrap,
        prefillWorkers, // 'p' has no bootstrap host or port
        decodeWorkers,
        logger,
      }),
    ).rejects.toThrow(TypeError);
    expect([prefillWorkers.inFlight('p'), decodeWorkers.inFlight('d')]).toEqual([0, 0]);
  });

  it('refuses a pool that is not a WorkerPool', async () => {
    await expect(
      runFlow({
        prefill: prefillWithParams().run,
        decode: decodeTokens().run,
        prefillWorkers: ['p'] as never,
      }),
    ).rejects.toThrow('prefillWorkers to be a WorkerPool');
  });
});

describe('disaggregate with routing policies', () => {
  it('both pools see the request: cache-aware prefill keeps each conversation on one worker, session decode by its key', async () => {
    const prefillWorkers = new WorkerPool(['p0', 'p1', 'p2'], { selection: cacheAware<string>() });
    const decodeWorkers = new WorkerPool(['d0', 'd1', 'd2'], { selection: sessionAffinity<string>() });
    const winner = (key: string) =>
      sessionAffinity<string>().select(decodeWorkers.workers, decodeWorkers, new RoutingInput({}, key));
    // Two sessions that rendezvous hashing puts on different decode workers, neither the first.
    const keys: string[] = [];
    for (let i = 0; keys.length < 2; i++) {
      const key = `conversation-${i}`;
      if (winner(key) !== 'd0' && !keys.some((other) => winner(other) === winner(key))) keys.push(key);
    }
    const histories = keys.map((key) => [{ role: 'system', content: `You are ${key}. `.repeat(20) }]);
    const chosen = keys.map(() => ({ prefill: new Set<unknown>(), decode: new Set<unknown>() }));
    for (let turn = 0; turn < 3; turn++) {
      for (const [i, key] of keys.entries()) {
        const history = histories[i] as Array<{ role: string; content: string }>;
        history.push({ role: 'user', content: `question ${turn}` });
        const prefill = prefillWithParams();
        const decode = decodeTokens();
        await collect(
          await runFlow({
            request: { model: 'm', messages: [...history], max_tokens: 4 },
            prefill: prefill.run,
            decode: decode.run,
            prefillWorkers,
            decodeWorkers,
            sessionKey: key,
          }),
        );
        chosen[i]?.prefill.add(prefill.calls[0]?.worker);
        chosen[i]?.decode.add(decode.calls[0]?.worker);
        history.push({ role: 'assistant', content: `answer ${turn}` });
      }
    }
    expect(chosen.map(({ prefill }) => [...prefill])).toEqual([['p0'], ['p1']]);
    expect(chosen.map(({ decode }) => [...decode])).toEqual(keys.map((key) => [winner(key)]));
  });
});

describe('WorkerPool, choice by choice', () => {
  it('least-in-flight takes the least loaded of all candidates; ties go in turn', () => {
    const pool = new WorkerPool(['a', 'b', 'c'], { selection: 'least-in-flight' });
    const held = [pool.acquire(), pool.acquire(), pool.acquire()]; // one each, in turn
    expect(held.map((lease) => lease.worker)).toEqual(['a', 'b', 'c']);
    pool.acquire(); // a: 2
    held[2]?.release(); // c: 0
    expect(pool.acquire().worker).toBe('c'); // the least, found past the first candidate
    expect([pool.inFlight('a'), pool.inFlight('b'), pool.inFlight('c')]).toEqual([2, 1, 1]);
  });

  it('a retry passes over the workers it failed on while another is in rotation, and takes them when none is', () => {
    const pool = new WorkerPool(['a', 'b', 'c']);
    for (let i = 0; i < 6; i++) {
      const lease = pool.acquire(['a', 'b']);
      expect(lease.worker).toBe('c');
      lease.release();
    }
    pool.setAvailable('c', false);
    expect(['a', 'b']).toContain(pool.acquire(['a', 'b']).worker);
    expect(pool.acquire([]).worker).toBeDefined();
  });

  it('says which workers are in rotation, and that a stranger is not', () => {
    const pool = new WorkerPool(['a', 'b']);
    expect(pool.available).toEqual(['a', 'b']);
    pool.setAvailable('a', false);
    expect(pool.available).toEqual(['b']);
    expect([pool.isAvailable('a'), pool.isAvailable('b'), pool.isAvailable('z')]).toEqual([false, true, false]);
    expect(pool.inFlight('z')).toBe(0);
  });

  it('with every worker out, a NoWorkerError: not retryable (no worker to send it to), with its code and kind', () => {
    const pool = new WorkerPool(['a']);
    pool.setAvailable('a', false);
    let error: unknown;
    try {
      pool.acquire();
    } catch (e) {
      error = e;
    }
    expect(NoWorkerError.is(error)).toBe(true);
    expect(error).toMatchObject({
      name: 'NoWorkerError',
      code: 'DISAGG_NO_WORKER',
      kind: 'no_worker',
      retryable: false,
      message: "No worker is available: the pool's one worker is out of rotation",
    });
  });
});

describe("a Scheduler's NoWorkerError", () => {
  it('names the pool that had none and the model it serves, never a worker', () => {
    const prefillWorkers = new WorkerPool([{ url: 'http://10.0.0.1:8100' }]);
    const decodeWorkers = new WorkerPool([{ url: 'http://10.0.0.2:8200' }, { url: 'http://10.0.0.3:8200' }]);
    const scheduler = new Scheduler({ prefillWorkers, decodeWorkers, noPrefillWorker: 'fail', model: 'qwen3' });
    const input = new RoutingInput({ model: 'qwen3', prompt: 'hi' });
    for (const worker of decodeWorkers.workers) decodeWorkers.setAvailable(worker, false);
    const decode = failureOf(() => scheduler.decide(input));
    expect(decode).toMatchObject({
      pool: 'decode',
      model: 'qwen3',
      message: 'No decode worker is available for model "qwen3": all 2 workers of the decode pool are out of rotation',
    });
    expect(failureOf(() => scheduler.decodeElsewhere([], input))).toMatchObject({ pool: 'decode' });
    // The prefill worker leased before decode found none is given back.
    expect(prefillWorkers.inFlight(prefillWorkers.workers[0] as { url: string })).toBe(0);
    prefillWorkers.setAvailable(prefillWorkers.workers[0] as { url: string }, false);
    expect(failureOf(() => scheduler.decide(input))).toMatchObject({
      pool: 'prefill',
      message: 'No prefill worker is available for model "qwen3": the prefill pool\'s one worker is out of rotation',
    });
    expect(failureOf(() => new Scheduler({ decodeWorkers: new WorkerPool<string>([]) }).decide(input))).toMatchObject({
      pool: 'decode',
      message: 'No decode worker is available: the decode pool has none (none configured or discovered yet)',
    });
  });
});

/** What `run` throws. */
function failureOf(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('WorkerPool against a model of one record per worker', () => {
  type Op =
    | { op: 'acquire' }
    | { op: 'release'; index: number }
    | { op: 'down' | 'up' | 'drain' | 'remove' | 'add'; worker: number };
  const workerIds = fc.integer({ min: 0, max: 3 });
  const ops = fc.array(
    fc.oneof(
      fc.constant<Op>({ op: 'acquire' }),
      fc.record({ op: fc.constant('release' as const), index: fc.nat(20) }),
      fc.record({ op: fc.constantFrom('down', 'up', 'drain', 'remove', 'add'), worker: workerIds }),
    ),
    { maxLength: 60 },
  );

  it('the state, the rotation and the counts always agree with what was done to each worker', () => {
    fc.assert(
      fc.property(ops, (script) => {
        const all = ['w0', 'w1', 'w2', 'w3'];
        const pool = new WorkerPool<string>(all.slice(0, 2), { selection: 'least-in-flight' });
        // The model: one record per worker, the list in order, leases out.
        const model = new Map<string, { listed: boolean; down: boolean; leaving: boolean; inFlight: number }>();
        for (const w of all.slice(0, 2)) model.set(w, { listed: true, down: false, leaving: false, inFlight: 0 });
        let order = all.slice(0, 2);
        const leases: Array<{ lease: Lease<string>; worker: string }> = [];
        const settle = (w: string) => {
          const m = model.get(w);
          if (m?.leaving && m.inFlight === 0) {
            model.delete(w);
            order = order.filter((x) => x !== w);
          }
        };
        for (const step of script) {
          if (step.op === 'acquire') {
            const ready = order.filter((w) => !model.get(w)?.down && !model.get(w)?.leaving);
            if (ready.length === 0) {
              expect(() => pool.acquire()).toThrow(NoWorkerError);
              continue;
            }
            const lease = pool.acquire();
            expect(ready).toContain(lease.worker);
            (model.get(lease.worker) as { inFlight: number }).inFlight++;
            leases.push({ lease, worker: lease.worker });
          } else if (step.op === 'release') {
            const taken = leases.splice(step.index % Math.max(leases.length, 1), 1)[0];
            if (taken === undefined) continue;
            taken.lease.release('success');
            const m = model.get(taken.worker);
            if (m !== undefined) m.inFlight--;
            settle(taken.worker);
          } else {
            const w = all[step.worker] as string;
            const m = model.get(w);
            const listed = order.includes(w);
            if (step.op === 'add') {
              if (listed) {
                expect(() => pool.add(w)).toThrow(TypeError);
                continue;
              }
              pool.add(w);
              order = [...order, w];
              model.set(w, { listed: true, down: false, leaving: false, inFlight: m?.inFlight ?? 0 });
            } else if (!listed) {
              if (step.op !== 'drain' || m === undefined) {
                expect(() =>
                  step.op === 'drain'
                    ? pool.drain(w)
                    : step.op === 'remove'
                      ? pool.remove(w)
                      : pool.setAvailable(w, step.op === 'up'),
                ).toThrow(TypeError);
              }
            } else if (step.op === 'down' || step.op === 'up') {
              pool.setAvailable(w, step.op === 'up');
              (m as { down: boolean }).down = step.op === 'down';
            } else if (step.op === 'drain') {
              void pool.drain(w);
              (m as { leaving: boolean }).leaving = true;
              settle(w);
            } else {
              void pool.remove(w);
              const r = m as { leaving: boolean; down: boolean };
              r.leaving = true;
              r.down = false;
              order = order.filter((x) => x !== w);
              settle(w);
            }
          }
          expect(pool.workers).toEqual(order);
          expect(pool.available).toEqual(order.filter((w) => !model.get(w)?.down && !model.get(w)?.leaving));
          for (const w of all) {
            const m = model.get(w);
            expect(pool.inFlight(w)).toBe(m?.inFlight ?? 0);
            const expected = !order.includes(w) ? undefined : m?.leaving ? 'draining' : m?.down ? 'down' : 'ready';
            expect(pool.stateOf(w)).toBe(expected);
            expect(pool.isAvailable(w)).toBe(expected === 'ready');
          }
        }
      }),
      propertyOptions(300, 29),
    );
  });
});

describe('watching a worker for being taken out of rotation (onDown)', () => {
  it('calls its listeners once when the worker is marked down, not for a drain, nor after the watch stops', async () => {
    const pool = new WorkerPool(['a', 'b', 'c']);
    const seen: string[] = [];
    pool.onDown('a', () => seen.push('a1'));
    const stop = pool.onDown('a', () => seen.push('a2'));
    pool.onDown('b', () => seen.push('b'));
    pool.onDown('c', () => seen.push('c'));
    stop();
    pool.setAvailable('a', true); // already up: nothing
    pool.setAvailable('a', false);
    pool.setAvailable('a', true);
    pool.setAvailable('a', false); // a watch is called once
    await pool.drain('b');
    expect(seen).toEqual(['a1']);
    pool.setAvailable('c', false);
    expect(seen).toEqual(['a1', 'c']);
  });
});

describe('following the list of workers (onChange)', () => {
  it('is told of each worker added, removed, or gone at the end of its drain; not of a change of rotation, nor once stopped', async () => {
    const pool = new WorkerPool(['a', 'b']);
    const seen: string[][] = [];
    const stop = pool.onChange(() => seen.push([...pool.workers]));
    pool.add('c');
    pool.setAvailable('a', false);
    pool.setAvailable('a', true);
    const lease = pool.acquire(['a', 'c']); // b
    const draining = pool.drain('b');
    expect(seen).toEqual([['a', 'b', 'c']]);
    lease.release();
    await draining;
    await pool.remove('a');
    expect(seen).toEqual([['a', 'b', 'c'], ['a', 'c'], ['c']]);
    stop();
    pool.add('d');
    expect(seen).toHaveLength(3);
  });

  it('a listener that throws changes nothing: the change stands and the next listener is told', () => {
    const pool = new WorkerPool(['a']);
    let told = 0;
    pool.onChange(() => {
      throw new Error('listener bug');
    });
    pool.onChange(() => {
      told++;
    });
    pool.add('b');
    expect([pool.workers, told]).toEqual([['a', 'b'], 1]);
  });
});

describe("a worker pool's policy hooks and its selection option, at the edges", () => {
  it('a worker taken out twice is forgotten once; a lease released without an outcome teaches nothing', () => {
    const forget = vi.fn();
    const completed = vi.fn();
    const pool = new WorkerPool(['a', 'b'], {
      selection: { name: 'spy', select: (candidates: readonly string[]) => candidates[0] as string, forget, completed },
    });
    pool.setAvailable('a', false);
    pool.setAvailable('a', false);
    expect(forget).toHaveBeenCalledTimes(1);
    pool.acquire().release();
    expect(completed).not.toHaveBeenCalled();
    pool.acquire().release('success');
    expect(completed).toHaveBeenCalledWith('b', undefined, 'success');
  });

  it('a selection object without select is refused, saying what was expected', () => {
    expect(() => new WorkerPool(['a'], { selection: {} as never })).toThrow(
      "expected 'round-robin', 'least-in-flight', a routing policy (such as cacheAware()) or a function",
    );
  });
});
