import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { httpEngine } from '../../src/http/http-engine.js';
import { Controller } from '../../src/runtime/controller.js';
import { KvLedger, startFakeWorker } from '../../src/testing/index.js';
import { collect } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();

describe('startFakeWorker', () => {
  it('answers /health and /v1/models, and 404 for anything else', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'llama-fake' });
    expect(await (await request(`${worker.url}/health`)).body.json()).toEqual({ status: 'ok' });
    expect(await (await request(`${worker.url}/v1/models`)).body.json()).toMatchObject({
      data: [{ id: 'llama-fake' }],
    });
    expect((await request(`${worker.url}/v2/nothing`, { method: 'POST', body: '{}' })).statusCode).toBe(404);
    expect((await request(`${worker.url}/generate`, { method: 'POST', body: '{}' })).statusCode).toBe(404); // vLLM has none
    expect((await request(`${worker.url}/v1/completions`, { method: 'POST', body: 'not json' })).statusCode).toBe(400);
  });

  it('streams deterministic tokens, at most max_tokens, ending with [DONE]', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 5 });
    const items = await collect(
      await httpEngine({ url: worker.url })({ prompt: 'p', max_tokens: 2, stream: true }, new Controller()),
    );
    expect(items.map((item) => [item.data?.text, item.data?.finish_reason ?? null])).toEqual([
      ['tok0 ', null],
      ['tok1 ', null],
      ['', 'length'],
    ]);
    expect(worker.requests[0]?.completed).toBe(true);
  });

  it('httpEngine keeps connections alive: ten calls in a row reuse their connections', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const engine = httpEngine({ url: worker.url });
    for (let i = 0; i < 10; i++) await collect(await engine({ prompt: 'p', stream: true }, new Controller()));
    expect(worker.requests).toHaveLength(10);
    // One, or two when a body's last bytes are still in flight as the next call starts.
    expect(worker.connections).toBeLessThanOrEqual(2);
  });

  it('chooses a fault per request with a function, and changes faults with setFault', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      fault: (req) => (req.body.prompt === 'bad' ? { type: 'status', status: 422 } : undefined),
    });
    const engine = httpEngine({ url: worker.url });
    await expect(engine({ prompt: 'bad', stream: true }, new Controller())).rejects.toMatchObject({ status: 422 });
    expect(await collect(await engine({ prompt: 'good', stream: true }, new Controller()))).not.toHaveLength(0);
    worker.setFault({ type: 'status', status: 503 });
    await expect(engine({ prompt: 'good', stream: true }, new Controller())).rejects.toMatchObject({ status: 503 });
  });

  it('close() ends open connections, also a request it never answers', async () => {
    const worker = await startFakeWorker({ role: 'decode', protocol: 'sglang', fault: { type: 'hang' } });
    const call = httpEngine({ url: worker.url })({ prompt: 'p', stream: true }, new Controller());
    await eventually(() => worker.requests.length === 1, 'request received');
    await worker.close();
    await expect(call).rejects.toMatchObject({ name: 'UpstreamError', kind: 'connection' });
  });

  it('refuses an unknown role or protocol', async () => {
    await expect(startFakeWorker({ role: 'router' as never, protocol: 'vllm' })).rejects.toThrow(
      "role 'prefill' or 'decode'",
    );
    await expect(startFakeWorker({ role: 'decode', protocol: 'trt' as never })).rejects.toThrow(
      "protocol 'vllm' or 'sglang'",
    );
  });
});

describe('KvLedger', () => {
  it('tracks each handoff from held to claimed or stranded', async () => {
    const ledger = new KvLedger();
    const waiting = ledger.whenCommitted('room-1');
    ledger.commit('room-1', 'req-1');
    expect((await waiting.promise)?.key).toBe('room-1');
    ledger.commit('room-2', 'req-2');
    expect(ledger.outstanding().map((h) => h.key)).toEqual(['room-1', 'room-2']);
    expect(ledger.claim('room-1')).toBe(true);
    expect(ledger.claim('room-1')).toBe(false); // once
    ledger.strand('room-2');
    expect(ledger.claim('room-2')).toBe(false);
    expect([ledger.claimed().length, ledger.stranded().length, ledger.outstanding().length]).toEqual([1, 1, 0]);
    const cancelled = ledger.whenCommitted('never');
    cancelled.cancel();
    expect(await cancelled.promise).toBeUndefined();
  });
});
