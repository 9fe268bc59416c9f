import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker, FakeWorkerOptions } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

/** Two prefill and two decode workers behind one proxy; the first of each as the test says. */
async function twoOfEach(
  protocol: 'vllm' | 'sglang',
  first: { prefill?: Partial<FakeWorkerOptions>; decode?: Partial<FakeWorkerOptions>; prefillUrl?: string },
  options: Partial<ProxyOptions> = {},
) {
  const prefill = [
    await fakes.start({ role: 'prefill', protocol, ...first.prefill }),
    await fakes.start({ role: 'prefill', protocol }),
  ];
  const decode = [
    await fakes.start({ role: 'decode', protocol, tokens: 3, ...first.decode }),
    await fakes.start({ role: 'decode', protocol, tokens: 3 }),
  ];
  const logger = recordingLogger();
  const proxy = createProxy({
    connector: protocol,
    prefill: prefill.map((worker, i) => ({
      url: i === 0 && first.prefillUrl !== undefined ? first.prefillUrl : worker.url,
      bootstrapPort: worker.bootstrapPort,
    })),
    decode: decode.map((worker) => ({ url: worker.url })),
    logger: logger.logger,
    // Round-robin: the first request goes to the first worker of each pool.
    selection: 'round-robin',
    ...options,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  // Probes must not take the first worker out before the request meets it.
  proxy.prefillWorkers.setAvailable(proxy.prefillWorkers.workers[0] as { url: string }, true);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  return { prefill, decode, proxy, url, client, logs: logger.records };
}

const retries = async (url: string) =>
  (await (await request(`${url}/metrics`)).body.text())
    .split('\n')
    .filter((line) => line.startsWith('disagg_retries_total{'));

/** The per-worker leg counts, as `role worker outcome count` lines in the registry's order. */
const legs = async (url: string) =>
  (await (await request(`${url}/metrics`)).body.text())
    .split('\n')
    .filter((line) => line.startsWith('disagg_worker_legs_total{'))
    .map((line) => line.replace(/^.*role="(\w+)",worker="([\w-]+)",outcome="(\w+)"\} (\d+)$/, '$1 $2 $3 $4'))
    .sort();

describe('retries before the first byte', () => {
  it('a prefill worker that answers 503 is skipped: the client gets its answer from the next one and never notices', async () => {
    const { client, prefill, url, logs } = await twoOfEach('vllm', {
      prefill: { fault: { type: 'status', status: 503 } },
    });
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-1');
    expect([prefill[0]?.requests.length, prefill[1]?.requests.length]).toEqual([1, 1]);
    expect(await retries(url)).toEqual(['disagg_retries_total{leg="prefill"} 1']);
    expect(logs.filter((record) => String(record.message).startsWith('Retrying the request'))).toHaveLength(1);
    // The failure the retry hid from the client is still charged to the worker that failed,
    // by its class.
    const failures = (await (await request(`${url}/metrics`)).body.text())
      .split('\n')
      .filter((line) => line.startsWith('disagg_worker_failures_total{'));
    expect(failures).toEqual([
      'disagg_worker_failures_total{role="prefill",worker="prefill-0",class="worker-error"} 1',
    ]);
    expect(await legs(url)).toEqual([
      'decode decode-1 success 1',
      'prefill prefill-0 retried 1',
      'prefill prefill-1 success 1',
    ]);
  });

  it('a prefill worker that refuses connections is skipped, and leaves the rotation', async () => {
    const { client, proxy } = await twoOfEach('vllm', { prefillUrl: 'http://127.0.0.1:1' });
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: false })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-1');
    expect(proxy.prefillWorkers.available).toHaveLength(1);
  });

  it('vLLM: a decode worker that answers 503 freed the KV (its rejection clean-up): the request runs again with a fresh prefill, never on freed blocks', async () => {
    const { client, prefill, decode, url, logs } = await twoOfEach('vllm', {
      decode: { fault: { type: 'status', status: 503 } },
    });
    const { data: stream, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: true })
      .withResponse();
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe('tok0 tok1 tok2 ');
    expect(response.headers.get('x-disagg-decode-worker')).toBe('decode-1');
    // vLLM's decode refused the request in its handler and told prefill to free the KV at once.
    expect(prefill[0]?.ledger.released()).toHaveLength(1);
    // A fresh prefill: the second decode worker takes KV of its own, not the freed blocks.
    expect([prefill[0]?.requests.length, prefill[1]?.requests.length]).toEqual([1, 1]);
    expect(decode[1]?.requests[0]?.body.kv_transfer_params).not.toEqual(
      decode[0]?.requests[0]?.body.kv_transfer_params,
    );
    expect(decode[1]?.requests[0]?.kv).toBe('taken');
    expect(prefill.flatMap((worker) => worker.ledger.staleReads())).toEqual([]);
    expect(await retries(url)).toEqual(['disagg_retries_total{leg="decode"} 1']);
    expect(await legs(url)).toContain('decode decode-0 retried 1');
    const retried = logs.filter((record) => String(record.message).startsWith('Retrying the request'));
    expect(retried).toHaveLength(1);
    expect(retried[0]?.fields).toMatchObject({ leg: 'decode', attempt: 1, worker: 'decode-0', url: decode[0]?.url });
  });

  it('vLLM: a 503 from something in front of decode (the KV waits for its lease) is retried with a fresh prefill too', async () => {
    const { client, prefill, decode } = await twoOfEach('vllm', {
      prefill: { kvTimeoutMs: 50 },
      decode: { fault: { type: 'status', status: 503, stage: 'front' } },
    });
    const completion = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 });
    expect(completion.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(decode[1]?.requests[0]?.kv).toBe('taken');
    // Nothing told prefill: the first handoff's KV is freed by the lease, as on vLLM.
    await eventually(() => prefill[0]?.ledger.stranded().length === 1, 'the lease freed the first KV');
    fakes.leaveKv(prefill[0] as FakeWorker);
  });

  it('vLLM: when every decode worker fails, the client gets the failure (a 502), never a 200', async () => {
    const { client, prefill, decode } = await twoOfEach(
      'vllm',
      { decode: { fault: { type: 'status', status: 503 } } },
      { retry: { maxRetries: 3, initialBackoffMs: 0 } },
    );
    decode[1]?.setFault({ type: 'status', status: 500 });
    const error = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 502 });
    // Four attempts in all, each with its own prefill; each refusal freed its KV.
    expect((prefill[0]?.requests.length ?? 0) + (prefill[1]?.requests.length ?? 0)).toBe(4);
    expect(prefill.flatMap((worker) => worker.ledger.released())).toHaveLength(4);
    expect(prefill.flatMap((worker) => worker.ledger.staleReads())).toEqual([]);
  });

  it("--retry-reuse-handoff always (vLLM before 0.21) gives the same handoff to the next decode: on today's vLLM that reads freed blocks, which is why it is not the default", async () => {
    const { client, prefill, decode } = await twoOfEach(
      'vllm',
      { decode: { fault: { type: 'status', status: 503 } } },
      { retry: { reuseHandoff: 'always' } },
    );
    const completion = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 });
    expect([prefill[0]?.requests.length, prefill[1]?.requests.length]).toEqual([1, 0]);
    expect(decode[1]?.requests[0]?.body.kv_transfer_params).toEqual(decode[0]?.requests[0]?.body.kv_transfer_params);
    // What a client of vLLM 0.21 or later would get: a 200, computed on blocks already freed.
    expect(decode[1]?.requests[0]?.kv).toBe('stale');
    expect(completion.choices[0]?.text).toBe('stale0 stale1 stale2 ');
    expect(prefill[0]?.ledger.staleReads()).toHaveLength(1);
    fakes.expectStaleReads(prefill[0] as FakeWorker);
  });

  it('vLLM: a decode worker that refuses connections never saw the request: the next one gets the same handoff, prefill runs once, and the first leaves the rotation', async () => {
    const { client, proxy, prefill, decode, logs, url } = await twoOfEach('vllm', {});
    // The first decode worker goes away after the proxy has it in rotation.
    const first = proxy.decodeWorkers.workers[0] as { url: string };
    await decode[0]?.close();
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: false })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(response.headers.get('x-disagg-decode-worker')).toBe('decode-1');
    expect(proxy.decodeWorkers.isAvailable(first)).toBe(false);
    expect([prefill[0]?.requests.length, prefill[1]?.requests.length]).toEqual([1, 0]);
    expect(decode[1]?.requests[0]?.kv).toBe('taken');
    await eventually(() => prefill[0]?.ledger.claimed().length === 1, 'the KV was taken');
    const retried = logs.filter((record) => String(record.message).startsWith('Retrying decode on another worker'));
    expect(retried).toHaveLength(1);
    expect(retried[0]?.fields).toMatchObject({ leg: 'decode', attempt: 1, worker: 'decode-0', url: decode[0]?.url });
    expect(await legs(url)).toEqual([
      'decode decode-0 retried 1',
      'decode decode-1 success 1',
      'prefill prefill-0 success 1',
    ]);
  });

  it('SGLang: a decode that answers 500 before its stream opens is retried as a pair with a fresh room', async () => {
    const { client, prefill, decode } = await twoOfEach('sglang', {
      decode: { fault: { type: 'status', status: 500 } },
    });
    const stream = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe('tok0 tok1 tok2 ');
    const rooms = [...(prefill[0]?.requests ?? []), ...(prefill[1]?.requests ?? [])].map((r) =>
      String(r.body.bootstrap_room),
    );
    expect(new Set(rooms).size).toBe(2);
    expect([decode[0]?.requests.length, decode[1]?.requests.length]).toEqual([1, 1]);
    // The first pair's prefill was stopped and freed its KV (the ledger calls it stranded).
    await eventually(() => prefill[0]?.ledger.outstanding().length === 0, 'the first prefill freed its KV');
    fakes.leaveKv(prefill[0] as FakeWorker);
  });

  it('never for what another worker would refuse too (a 400), nor with --disable-retries', async () => {
    const refused = await twoOfEach('vllm', { prefill: { fault: { type: 'status', status: 400, message: 'bad' } } });
    const error = await refused.client.completions
      .create({ model: 'fake-model', prompt: 'Say' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused.prefill[1]?.requests).toHaveLength(0);
    const off = await twoOfEach(
      'vllm',
      { prefill: { fault: { type: 'status', status: 503 } } },
      { retry: { disabled: true } },
    );
    const failed = await off.client.completions.create({ model: 'fake-model', prompt: 'Say' }).catch((e: unknown) => e);
    expect(failed).toMatchObject({ status: 502 });
    expect(off.prefill[1]?.requests).toHaveLength(0);
  });

  it('a worker failing requests opens its circuit (out of rotation), gets a half-open trial, and comes back', async () => {
    const { client, proxy, decode, prefill, logs, url } = await twoOfEach(
      'vllm',
      { decode: { fault: { type: 'status', status: 500, message: 'decode broken' } } },
      // Retries off: each failure reaches the client, so the results show the circuit.
      { breaker: { failureThreshold: 2, successThreshold: 1, openMs: 200 }, retry: { disabled: true } },
    );
    const faulty = proxy.decodeWorkers.workers[0] as { url: string };
    const results: Array<number | undefined> = [];
    for (let i = 0; i < 4; i++) {
      results.push(
        await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }).then(
          () => 200,
          (e: { status?: number }) => e.status,
        ),
      );
    }
    // Round-robin: the faulty worker failed two requests in a row (one alone never ejects it).
    expect(results).toEqual([502, 200, 502, 200]);
    expect(proxy.decodeWorkers.isAvailable(faulty)).toBe(false);
    expect(logs.filter((record) => String(record.message).startsWith('Worker circuit open'))).toHaveLength(1);
    const circuits = async () =>
      (await (await request(`${url}/metrics`)).body.text())
        .split('\n')
        .filter((line) => line.startsWith('disagg_worker_circuit_state{role="decode"') && line.endsWith(' 1'));
    expect(await circuits()).toEqual([
      'disagg_worker_circuit_state{role="decode",worker="decode-0",state="open"} 1',
      'disagg_worker_circuit_state{role="decode",worker="decode-1",state="closed"} 1',
    ]);
    // While open every request goes to the other worker.
    await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect(decode[0]?.requests).toHaveLength(2);
    decode[0]?.setFault(undefined);
    await eventually(() => proxy.decodeWorkers.isAvailable(faulty), 'the circuit went half-open');
    // On trial: requests reach it again, and one success closes the circuit.
    for (let i = 0; i < 2; i++) await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect(decode[0]?.requests.length).toBeGreaterThan(2);
    expect(logs.some((record) => record.message === 'Worker circuit closed after its trial')).toBe(true);
    expect(await circuits()).toEqual([
      'disagg_worker_circuit_state{role="decode",worker="decode-0",state="closed"} 1',
      'disagg_worker_circuit_state{role="decode",worker="decode-1",state="closed"} 1',
    ]);
    // Each decode that answered 500 freed its handoff's KV (vLLM's rejection clean-up): none waits.
    expect(prefill.flatMap((worker) => worker.ledger.outstanding())).toEqual([]);
  });
});
