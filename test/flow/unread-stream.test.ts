import { describe, expect, it } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, flush, ScriptedSource, token } from '../support/async.js';
import { client, engine, eventLog, runFlow } from '../support/flow.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();

describe('a stream nobody reads releases itself once the client has gone', () => {
  it.each(['stopGenerating', 'kill'] as const)(
    'the client leaves (%s) and the router never reads: decode is stopped, the lease is back, settled fires, drain() resolves',
    async (leave) => {
      const decodeWorkers = new WorkerPool(['d0']);
      const decode = engine(() => new ScriptedSource([token(1), token(2)]));
      const log = eventLog();
      const context = new Controller('req-unread');
      const stream = await runFlow({ context, decode: decode.run, decodeWorkers, onEvent: log.onEvent });
      await flush();
      expect(decodeWorkers.inFlight('d0')).toBe(1);
      context[leave]();
      await flush();
      expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
      expect(decode.calls[0]?.context.isStopped()).toBe(true);
      expect(decode.calls[0]?.context.isKilled()).toBe(leave === 'kill');
      expect(decode.calls[0]?.source.closed).toBe(true);
      expect(decodeWorkers.inFlight('d0')).toBe(0);
      expect(log.types().at(-1)).toBe('settled');
      await decodeWorkers.drain('d0'); // resolves: nothing in flight
      // A router that reads after all is told the request was cancelled, once.
      expect((await collect(stream)).map((item) => item.data?.finish_reason)).toEqual(['cancelled']);
    },
  );

  it('a stream being read when the client leaves goes on to its own end (the reader sees decode stop)', async () => {
    const decodeSource = new ScriptedSource([token(1)]);
    const decode = engine(() => decodeSource);
    const context = new Controller('req-read');
    const stream = await runFlow({ context, decode: decode.run });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.token_ids).toEqual([1]);
    const pending = iterator.next(); // waiting for decode
    context.stopGenerating();
    await flush();
    decodeSource.push(Annotated.fromData(LLMEngineOutput.cancelled())).end();
    expect((await pending).value?.data?.finish_reason).toBe('cancelled');
    expect((await iterator.next()).done).toBe(true);
  });

  it('a prefill that fails while nobody reads (a rendezvous): the request ends as that error, the reader gets it later', async () => {
    const prefillSource = new ScriptedSource();
    const decodeWorkers = new WorkerPool(['d0']);
    const log = eventLog();
    const stream = await runFlow({
      connector: sglangBootstrap,
      prefill: engine(() => prefillSource).run,
      decode: engine(() => new ScriptedSource([token(1)])).run,
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
      decodeWorkers,
      onEvent: log.onEvent,
    });
    prefillSource.push(Annotated.fromError('prefill OOM')).end();
    await flush();
    expect(log.of('finished')).toMatchObject([{ outcome: 'error', leg: 'prefill' }]);
    expect(decodeWorkers.inFlight('d0')).toBe(0);
    expect(log.types().at(-1)).toBe('settled');
    const items = await collect(stream);
    expect(items.map((item) => Annotated.err(item)?.message)).toEqual([expect.stringContaining('prefill OOM')]);
  });

  it('cancel(): a router that knows it will not read closes the stream; a decode that has not taken the KV is cleaned up first', async () => {
    const decodeSource = new ScriptedSource();
    const decodeWorkers = new WorkerPool(['d0']);
    const log = eventLog();
    const stream = await runFlow({
      decode: engine(() => decodeSource).run,
      decodeWorkers,
      onEvent: log.onEvent,
    });
    stream.cancel();
    await flush();
    expect(log.of('finished')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(decodeSource.nextCalls).toBe(1); // read for the claim
    expect(decodeWorkers.inFlight('d0')).toBe(1);
    decodeSource.push(token(1));
    await flush();
    expect(decodeSource.closed).toBe(true);
    expect(decodeWorkers.inFlight('d0')).toBe(0);
    expect(log.types().at(-1)).toBe('settled');
    stream.cancel(); // again: nothing more happens
  });

  it('a stream is iterated once: a second iteration throws instead of continuing the first', async () => {
    const stream = await runFlow();
    const first = stream[Symbol.asyncIterator]();
    expect(() => stream[Symbol.asyncIterator]()).toThrow(TypeError);
    await collect({ [Symbol.asyncIterator]: () => first });
  });

  it('over HTTP (vLLM fakes): the client leaves mid-stream, the router never reads again: no lease, no KV left', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 50, tokenIntervalMs: 5 });
    const decodeWorkers = new WorkerPool([{ url: decode.url }]);
    const context = new Controller('req-http');
    const log = eventLog();
    const engineCall = httpEngine<{ url: string }>();
    const stream = await disaggregate({
      request: { ...client, min_tokens: undefined },
      context,
      prefill: engineCall,
      decode: engineCall,
      connector: vllmNixl,
      prefillWorkers: new WorkerPool([{ url: prefill.url }]),
      decodeWorkers,
      onEvent: log.onEvent,
    });
    const worker = decodeWorkers.workers[0] as { url: string };
    const first = await stream[Symbol.asyncIterator]().next();
    expect(first.done).toBe(false);
    context.stopGenerating(); // the client left; this router does `if (res.destroyed) return`
    await eventually(() => log.types().includes('settled'), 'the request settled');
    expect(decodeWorkers.inFlight(worker)).toBe(0);
    await decodeWorkers.drain(worker);
    await eventually(() => decode.requests[0]?.aborted === true, 'decode aborted');
    expect(prefill.ledger.claimed()).toHaveLength(1);
  });
});
