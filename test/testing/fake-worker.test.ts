import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { httpEngine } from '../../src/http/http-engine.js';
import { stringifyJson } from '../../src/http/json.js';
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

  it('reports its context as max_model_len and refuses, as vLLM does, a budget that is not a whole number or does not fit it', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', maxModelLen: 64 });
    expect(await (await request(`${worker.url}/v1/models`)).body.json()).toMatchObject({
      data: [{ max_model_len: 64 }],
    });
    const post = async (body: object) => {
      const answer = await request(`${worker.url}/v1/completions`, { method: 'POST', body: JSON.stringify(body) });
      return { status: answer.statusCode, text: await answer.body.text() };
    };
    expect(await post({ prompt: 'p', max_tokens: 0 })).toMatchObject({ status: 400 });
    expect(await post({ prompt: 'p', max_tokens: '4' })).toMatchObject({ status: 400 });
    const tooLong = await post({ prompt: Array.from({ length: 60 }, () => 1), max_tokens: 5 });
    expect(tooLong.status).toBe(400);
    expect(tooLong.text).toContain(
      "This model's maximum context length is 64 tokens. However, you requested 65 tokens",
    );
    expect((await post({ prompt: 'p', max_tokens: 4 })).status).toBe(200);
  });

  it.each(['vllm', 'sglang'] as const)(
    '%s: a body without the field its route needs (a Responses body sent to completions) is a 400, as the engines read it, not tokens',
    async (protocol) => {
      const worker = await fakes.start({ role: 'decode', protocol });
      for (const [path, field] of [
        ['/v1/completions', 'prompt'],
        ['/v1/chat/completions', 'messages'],
      ]) {
        const answer = await request(`${worker.url}${path}`, {
          method: 'POST',
          body: JSON.stringify({ model: 'm', input: 'Say hi', max_output_tokens: 4 }),
        });
        expect(answer.statusCode).toBe(400);
        expect(await answer.body.text()).toContain(`${field}: Field required`);
      }
      expect(worker.requests).toEqual([]);
    },
  );

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
      "protocol 'vllm', 'sglang' or 'trtllm'",
    );
  });
});

describe('the SGLang rendezvous sees aborted legs', () => {
  const room = '9007199254740993';
  /** Sends one leg as a router would; `abort()` cuts it as a router that gives up on it. */
  function leg(worker: { url: string }, bootstrap: { port: number }) {
    const controller = new AbortController();
    const body = {
      prompt: 'p',
      max_tokens: 4,
      stream: true,
      bootstrap_host: '127.0.0.1',
      bootstrap_port: bootstrap.port,
      bootstrap_room: 9007199254740993n,
    };
    const call = request(`${worker.url}/v1/completions`, {
      method: 'POST',
      body: stringifyJson(body),
      headers: { 'content-type': 'application/json' },
      signal: controller.signal,
    }).then(
      (answer) => answer.body.text(),
      () => 'aborted',
    );
    return { call, abort: () => controller.abort() };
  }

  it('a decode aborted while waiting for prefill never claims the room prefill commits later', async () => {
    // Prefill computes for 300 ms before it commits; the decode waits at the rendezvous meanwhile.
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', tokenIntervalMs: 300 });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang' });
    const decodeLeg = leg(decode, prefill);
    await eventually(() => prefill.ledger.waitingFor(room) === 1, 'decode waiting at the rendezvous');
    decodeLeg.abort();
    await eventually(() => prefill.ledger.waitingFor(room) === 0, 'the rendezvous saw the decode leave');
    const prefillLeg = leg(prefill, prefill);
    await eventually(() => prefill.ledger.outstanding().length === 1, 'prefill committed the room');
    expect(prefill.ledger.claimed()).toEqual([]);
    // The router gives up on prefill too: the KV it committed is freed, never claimed.
    prefillLeg.abort();
    await eventually(() => prefill.ledger.stranded().length === 1, 'prefill freed the room');
    expect(prefill.ledger.stranded().map((handoff) => handoff.key)).toEqual([room]);
    fakes.leaveKv(prefill);
  });

  it('a prefill aborted while waiting for its decode frees its KV at once, not at the bootstrap timeout', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', bootstrapTimeoutMs: 60_000 });
    const prefillLeg = leg(prefill, prefill);
    await eventually(() => prefill.ledger.outstanding().length === 1, 'prefill committed the room');
    prefillLeg.abort();
    await eventually(() => prefill.ledger.stranded().length === 1, 'prefill freed the room');
    expect(await prefillLeg.call).toBe('aborted');
    fakes.leaveKv(prefill);
  });

  it('a router that aborts both legs mid-rendezvous strands the KV; one that lets decode claim it strands none', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', transferMs: 300 });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokenIntervalMs: 50 });
    // Letting decode claim: both legs run to their end.
    const kept = [leg(prefill, prefill), leg(decode, prefill)];
    await Promise.all(kept.map((one) => one.call));
    expect(prefill.ledger.claimed()).toHaveLength(1);
    expect(prefill.ledger.stranded()).toEqual([]);
    // Aborting both after prefill committed, before decode reached the rendezvous (still queued).
    const other = await fakes.start({ role: 'prefill', protocol: 'sglang' });
    const queued = await fakes.start({ role: 'decode', protocol: 'sglang', fault: { type: 'never-bootstrap' } });
    const legs = [leg(other, other), leg(queued, other)];
    await eventually(
      () => other.ledger.outstanding().length === 1 && queued.requests.length === 1,
      'prefill committed, decode sent',
    );
    for (const one of legs) one.abort();
    await eventually(() => other.ledger.stranded().length === 1, 'the committed room was freed unclaimed');
    expect(other.ledger.claimed()).toEqual([]);
    fakes.leaveKv(other);
  });
});

describe('KvLedger', () => {
  it('a read claims held KV once; later reads, and reads of freed KV, are stale; a key never committed is unknown', () => {
    const ledger = new KvLedger();
    ledger.commit('a', 'req-a');
    ledger.commit('b', 'req-b');
    expect(ledger.read('a')).toBe('claimed');
    expect(ledger.read('a')).toBe('stale');
    ledger.release('b');
    expect(ledger.released().map((handoff) => handoff.key)).toEqual(['b']);
    expect(ledger.read('b')).toBe('stale');
    expect(ledger.read('c')).toBe('unknown');
    expect(ledger.staleReads().map((handoff) => [handoff.key, handoff.staleReads])).toEqual([
      ['a', 1],
      ['b', 1],
    ]);
    // Releasing what is no longer held changes nothing.
    ledger.release('a');
    expect(ledger.claimed().map((handoff) => handoff.key)).toEqual(['a']);
  });

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

describe('the vLLM fake behaves as vLLM 0.22 and later with NIXL', () => {
  /** A prefill leg as a router sends it: its JSON answer, with the kv_transfer_params to hand on. */
  async function prefillOn(worker: { url: string }, extra: Record<string, unknown> = {}) {
    const answer = await request(`${worker.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({
        prompt: 'Hello',
        max_tokens: 1,
        stream: false,
        kv_transfer_params: { do_remote_decode: true },
        ...extra,
      }),
    });
    return (await answer.body.json()) as { kv_transfer_params: Record<string, unknown>; choices: unknown[] };
  }
  async function decodeOn(worker: { url: string }, params: unknown, extra: Record<string, unknown> = {}) {
    const answer = await request(`${worker.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Hello', max_tokens: 3, kv_transfer_params: params, ...extra }),
    });
    return { status: answer.statusCode, text: await answer.body.text() };
  }

  it('prefill holds the blocks under a lease: unclaimed, they are freed when it runs out (kv_lease_duration)', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', kvTimeoutMs: 30 });
    const { kv_transfer_params: params } = await prefillOn(prefill);
    expect(params).toMatchObject({ do_remote_prefill: true, remote_engine_id: expect.any(String) });
    expect(prefill.ledger.outstanding()).toHaveLength(1);
    await eventually(() => prefill.ledger.stranded().length === 1, 'the lease ran out');
    fakes.leaveKv(prefill);
  });

  it('a stop on the first token holds the blocks as a length cap does, and names them', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', answer: { finishReason: 'stop' } });
    const answer = await prefillOn(prefill);
    expect(answer.choices).toMatchObject([{ finish_reason: 'stop' }]);
    expect(answer.kv_transfer_params).toMatchObject({ do_remote_prefill: true });
    expect(prefill.ledger.outstanding()).toHaveLength(1);
    fakes.leaveKv(prefill);
    // An abort, though, frees at once and names nothing.
    const aborted = await fakes.start({ role: 'prefill', protocol: 'vllm', answer: { finishReason: 'abort' } });
    expect((await prefillOn(aborted)).kv_transfer_params).toBeUndefined();
    expect(aborted.ledger.all()).toEqual([]);
  });

  it.each([
    ['a 503 from its request handler', { fault: { type: 'status', status: 503 } as const }, {}, 503],
    ['a prompt and budget beyond the context', { maxModelLen: 8 }, { max_tokens: 100 }, 400],
    ['a model it does not serve', { model: 'served' }, { model: 'other' }, 404],
  ])(
    'decode refusing in its handler (%s) frees the handoff at once: the rejection clean-up',
    async (_, options, extra, status) => {
      const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
      const decode = await fakes.start({ role: 'decode', protocol: 'vllm', ...options });
      const { kv_transfer_params: params } = await prefillOn(prefill);
      expect((await decodeOn(decode, params, extra)).status).toBe(status);
      expect(prefill.ledger.released()).toHaveLength(1);
    },
  );

  it('a refusal in front of the handler (body validation, a proxy) frees nothing: the KV waits for the lease', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const { kv_transfer_params: params } = await prefillOn(prefill);
    expect((await decodeOn(decode, params, { max_tokens: 'three' })).status).toBe(400);
    decode.setFault({ type: 'status', status: 503, stage: 'front' });
    expect((await decodeOn(decode, params)).status).toBe(503);
    expect(prefill.ledger.outstanding()).toHaveLength(1);
    fakes.leaveKv(prefill);
  });

  it('a decode aborted while it waits, before it pulled, frees the handoff at once', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', fault: { type: 'hang' } });
    const { kv_transfer_params: params } = await prefillOn(prefill);
    const controller = new AbortController();
    const call = request(`${decode.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Hello', kv_transfer_params: params }),
      signal: controller.signal,
    }).catch(() => 'aborted');
    await eventually(() => decode.requests.length === 1, 'decode received it');
    controller.abort();
    expect(await call).toBe('aborted');
    await eventually(() => prefill.ledger.released().length === 1, 'prefill freed the KV');
  });

  it('a second decode given the same handoff reads freed blocks: a 200 computed on them, counted as a stale read', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const { kv_transfer_params: params } = await prefillOn(prefill);
    expect(await decodeOn(decode, params)).toMatchObject({ status: 200, text: expect.stringContaining('tok0 tok1') });
    const again = await decodeOn(decode, params);
    expect(again.status).toBe(200);
    expect(again.text).toContain('stale0 stale1 stale2');
    expect(decode.requests.map((record) => record.kv)).toEqual(['taken', 'stale']);
    expect(prefill.ledger.staleReads()).toMatchObject([{ state: 'claimed', staleReads: 1 }]);
    fakes.expectStaleReads(prefill);
  });

  it('prompt logprobs: prefill answers them; a decode with its KV asked for them computes the prompt again (the KV unused)', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const answer = (await prefillOn(prefill, { prompt: 'Hello there', prompt_logprobs: 0 })) as unknown as {
      choices: Array<{ prompt_logprobs: unknown[] }>;
      kv_transfer_params: unknown;
    };
    expect(answer.choices[0]?.prompt_logprobs).toEqual([
      null,
      { '1001': { logprob: -0.5, rank: 1, decoded_token: 'o th' } },
      { '1002': { logprob: -0.5, rank: 1, decoded_token: 'ere' } },
    ]);
    expect(
      (await decodeOn(decode, answer.kv_transfer_params, { prompt: 'Hello there', prompt_logprobs: 0 })).status,
    ).toBe(200);
    expect(decode.requests[0]?.kv).toBe('recomputed');
    // Streamed, vLLM refuses them as it reads the body.
    const streamed = await decodeOn(decode, undefined, { prompt_logprobs: 1, stream: true });
    expect(streamed).toMatchObject({
      status: 400,
      text: expect.stringContaining('`prompt_logprobs` are not available'),
    });
  });

  it("SGLang's decode with a prefill's KV answers empty input logprobs; alone, it computes them", async () => {
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const body = {
      text: 'Hello there',
      return_logprob: true,
      logprob_start_len: 0,
      sampling_params: { max_new_tokens: 2 },
    };
    const alone = (await (
      await request(`${decode.url}/generate`, { method: 'POST', body: JSON.stringify(body) })
    ).body.json()) as { meta_info: { input_token_logprobs: unknown[]; output_token_logprobs: unknown[] } };
    expect(alone.meta_info.input_token_logprobs).toEqual([
      [null, 1000, null],
      [-0.5, 1001, null],
      [-0.5, 1002, null],
    ]);
    expect(alone.meta_info.output_token_logprobs).toEqual([
      [-0.25, 2000, null],
      [-0.25, 2001, null],
    ]);
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang' });
    const rendezvous = { bootstrap_host: '127.0.0.1', bootstrap_port: prefill.bootstrapPort, bootstrap_room: 7 };
    const [, remote] = await Promise.all(
      [prefill, decode].map(async (worker) =>
        (
          await request(`${worker.url}/generate`, { method: 'POST', body: JSON.stringify({ ...body, ...rendezvous }) })
        ).body.json(),
      ),
    );
    expect((remote as typeof alone).meta_info.input_token_logprobs).toEqual([]);
    expect((remote as typeof alone).meta_info.output_token_logprobs).toHaveLength(2);
  });

  it('a transfer that fails follows kv_load_failure_policy: fail (an error: 500 whole, an error chunk streamed) or recompute', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const { kv_transfer_params: params } = await prefillOn(prefill);
    const unknown = { ...params, remote_block_ids: [999, 1000] }; // never committed there
    const failing = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const whole = await decodeOn(failing, unknown);
    expect(whole.status).toBe(500);
    expect(whole.text).toContain('Internal server error');
    const streamed = await decodeOn(failing, unknown, { stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.text).toMatch(/^data: \{"error":\{.*"code":500\}\}\n\ndata: \[DONE\]\n\n$/);
    expect(failing.requests.map((record) => record.kv)).toEqual(['failed', 'failed']);
    const recomputing = await fakes.start({ role: 'decode', protocol: 'vllm', kvLoadFailurePolicy: 'recompute' });
    expect(await decodeOn(recomputing, unknown)).toMatchObject({ status: 200, text: expect.stringContaining('tok0') });
    expect(recomputing.requests[0]?.kv).toBe('recomputed');
    // The real handoff was never read.
    expect(await decodeOn(recomputing, params)).toMatchObject({ status: 200 });
  });
});
