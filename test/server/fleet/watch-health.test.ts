import { afterEach, describe, expect, it } from 'vitest';
import { vllmNixl } from '../../../src/engines/registry.js';
import { disaggregate } from '../../../src/flow/disaggregate.js';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { httpEngine } from '../../../src/http/http-engine.js';
import { Annotated } from '../../../src/protocol/annotated.js';
import { Controller } from '../../../src/runtime/controller.js';
import { defaultRetries } from '../../../src/server/fleet/failure-rules.js';
import { type WorkerHealth, watchHealth } from '../../../src/server/fleet/watch-health.js';
import { type FakeWorker, startFakeWorker } from '../../../src/testing/index.js';
import { recordingLogger } from '../../support/async.js';

type Worker = { url: string };
const open: Array<{ close(): Promise<void> }> = [];
const watches: Array<WorkerHealth<Worker, Worker>> = [];
afterEach(async () => {
  for (const watch of watches.splice(0)) watch.stop();
  await Promise.all(open.splice(0).map((worker) => worker.close()));
});

async function fleet(decodes = 2) {
  const prefill = await startFakeWorker({ role: 'prefill', protocol: 'vllm' });
  const decode: FakeWorker[] = [];
  for (let i = 0; i < decodes; i++) decode.push(await startFakeWorker({ role: 'decode', protocol: 'vllm', tokens: 2 }));
  open.push(prefill, ...decode);
  const prefillWorkers = new WorkerPool<Worker>([{ url: prefill.url }]);
  const decodeWorkers = new WorkerPool<Worker>(decode.map((worker) => ({ url: worker.url })));
  return { prefill, decode, prefillWorkers, decodeWorkers };
}

function watch(pools: Parameters<typeof watchHealth<Worker, Worker>>[0], options = {}) {
  const { logger, records } = recordingLogger();
  const health = watchHealth(pools, { intervalMs: 60_000, logger, ...options });
  watches.push(health);
  return { health, records };
}

/** One request through the pools, read to its end: what the client read. */
async function serve(
  pools: { prefillWorkers: WorkerPool<Worker>; decodeWorkers: WorkerPool<Worker> },
  health: WorkerHealth<Worker, Worker>,
  retries = {},
): Promise<string> {
  const engine = httpEngine<Worker>();
  let text = '';
  try {
    const stream = await disaggregate({
      request: { model: 'm', prompt: 'hi', max_tokens: 2, stream: true },
      context: new Controller(),
      connector: vllmNixl,
      prefill: engine,
      decode: engine,
      ...pools,
      onEvent: health.onEvent,
      ...retries,
    });
    for await (const item of stream) text += Annotated.err(item)?.message ?? item.data?.text ?? '';
  } catch (error) {
    text = `failed: ${(error as Error).message}`;
  }
  return text;
}

describe('watchHealth: the proxy’s health checks on pools of your own', () => {
  it('a decode worker that is down leaves its pool’s rotation at the first round, saying why', async () => {
    const { decode, prefillWorkers, decodeWorkers } = await fleet();
    await decode[1]?.close();
    const { health, records } = watch({ prefill: prefillWorkers, decode: decodeWorkers });
    await health.check();
    const [live, dead] = decodeWorkers.workers as [Worker, Worker];
    expect(decodeWorkers.available).toEqual([live]);
    expect(health.lastFailure(dead)).toMatchObject({
      reason: 'ECONNREFUSED',
      hint: expect.stringContaining('nothing listens'),
    });
    expect(health.lastFailure(live)).toBeUndefined();
    expect(
      records.filter((record) => record.level === 'warn').map((record) => (record.fields as { url?: string }).url),
    ).toEqual([dead.url]);
  });

  it('fed the events, a worker a request could not reach leaves at once; with the default retries the client never sees it', async () => {
    const { decode, prefill, prefillWorkers, decodeWorkers } = await fleet();
    const { health } = watch({ prefill: prefillWorkers, decode: decodeWorkers });
    await health.check();
    expect(decodeWorkers.available).toHaveLength(2);
    await decode[0]?.close(); // dies between two rounds of probes
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) answers.push(await serve({ prefillWorkers, decodeWorkers }, health, defaultRetries()));
    expect(answers).toEqual(['tok0 tok1 ', 'tok0 tok1 ', 'tok0 tok1 ', 'tok0 tok1 ']);
    expect(decodeWorkers.available).toEqual([decodeWorkers.workers[1]]);
    expect(prefill.ledger.outstanding()).toEqual([]);
  });

  it('a worker failing request after request opens its circuit: out of rotation whatever its probes say', async () => {
    const { decode, prefillWorkers, decodeWorkers } = await fleet();
    const { health } = watch({ prefill: prefillWorkers, decode: decodeWorkers }, { breaker: { failureThreshold: 2 } });
    await health.check();
    const failing = decodeWorkers.workers[0] as Worker;
    decode[0]?.setFault({ type: 'status', status: 500, message: 'engine dead' });
    const onlyFailing = new WorkerPool<Worker>([failing]);
    await serve({ prefillWorkers, decodeWorkers: onlyFailing }, health);
    expect(health.circuit(failing)).toBe('closed');
    await serve({ prefillWorkers, decodeWorkers: onlyFailing }, health);
    expect(health.circuit(failing)).toBe('open');
    expect(decodeWorkers.isAvailable(failing)).toBe(false);
    await health.check();
    expect(decodeWorkers.isAvailable(failing)).toBe(false);
  });

  it('a worker removed from its pool is forgotten at the next round', async () => {
    const { decode, prefillWorkers, decodeWorkers } = await fleet();
    await decode[1]?.close();
    const { health } = watch({ prefill: prefillWorkers, decode: decodeWorkers });
    await health.check();
    const dead = decodeWorkers.workers[1] as Worker;
    expect(health.lastFailure(dead)).toBeDefined();
    await decodeWorkers.remove(dead);
    await health.check();
    expect(health.lastFailure(dead)).toBeUndefined();
  });

  it('refuses what it cannot watch, naming it', () => {
    expect(() => watchHealth({ decode: [] as never })).toThrow('watchHealth: decode must be a WorkerPool, got []');
    expect(() => watchHealth({ prefill: new WorkerPool([{ host: 'p0' } as never]) })).toThrow(
      /each prefill worker needs a url/,
    );
  });
});
