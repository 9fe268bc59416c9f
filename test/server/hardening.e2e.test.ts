import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { eventually, postRaw } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup, fakes } = proxyHarness();

const post = postRaw;

describe('disagg serve under hostile input and faults', () => {
  for (const stream of [true, false]) {
    it(`a decode that answers nothing but [DONE] is a 502 naming decode, never an empty 200 (stream: ${stream})`, async () => {
      const { client, prefill } = await setup('vllm', { decode: { fault: { type: 'empty' } } });
      const error = await client.completions
        .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream })
        .then(async (answer) => {
          if (stream) for await (const _ of answer as AsyncIterable<unknown>);
          return answer;
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
      expect((error as Error).message).toContain('[DONE] before its answer finished');
      expect((error as { error?: { leg?: string } }).error?.leg).toBe('decode');
      expect(prefill.ledger.claimed()).toHaveLength(1);
    });
  }

  it('a streamed answer honours Connection: close: the proxy closes the socket after it', async () => {
    const { url } = await setup('vllm');
    const answer = await onOwnConnection(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2, stream: true }),
      { 'content-type': 'application/json', connection: 'close' },
    );
    expect(answer.status).toBe(200);
    expect(answer.connection).toBe('close');
    expect(answer.text.trim().endsWith('data: [DONE]')).toBe(true);
  });

  it('shutdown is bounded by the grace period: a prefill that never answers is ended too', async () => {
    const { client, proxy, prefill } = await setup('vllm', { prefill: { fault: { type: 'hang' } } });
    const call = client.completions
      .create({ model: 'fake-model', prompt: 'Say', stream: true })
      .catch((e: unknown) => e);
    await eventually(() => prefill.requests.length === 1, 'the prefill leg is under way');
    await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    expect(await call).toMatchObject({ status: 503 });
    await eventually(() => prefill.requests[0]?.aborted === true, 'the prefill worker saw its call end');
  });

  it('a body nested 100,000 deep is a 400 before any worker is called, not a 502 from a stack overflow', async () => {
    const { url, prefill, decode } = await setup('vllm');
    const deep = `{"model":"m","prompt":"x","extra":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const answer = await post(url, '/v1/completions', deep);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text).error.message).toContain('more than 128 deep');
    expect([prefill.requests, decode.requests]).toEqual([[], []]);
    const fine = `{"model":"m","prompt":"x","max_tokens":2,"extra":${'['.repeat(100)}${']'.repeat(100)}}`;
    expect((await post(url, '/v1/completions', fine)).status).toBe(200);
  });

  it('every answer is counted by route, status and outcome: rejected ones and 503s for no worker too', async () => {
    const { url, client, decode, proxy } = await setup('vllm');
    await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect((await post(url, '/v1/completions', '{"model":')).status).toBe(400);
    expect((await post(url, '/v1/nowhere', '{}')).status).toBe(404);
    const big = await post(
      url,
      '/v1/chat/completions',
      JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(9e6) }] }),
    );
    expect(big.status).toBe(413);
    proxy.decodeWorkers.setAvailable(proxy.decodeWorkers.workers[0] as { url: string }, false);
    expect((await post(url, '/v1/completions', '{"model":"m","prompt":"x"}')).status).toBe(503);
    expect(decode.requests).toHaveLength(1);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    const counted = metrics.split('\n').filter((line) => line.startsWith('disagg_requests_total{'));
    expect(counted.sort()).toEqual(
      [
        'disagg_requests_total{route="completions",status="200",outcome="success",leg=""} 1',
        'disagg_requests_total{route="completions",status="400",outcome="rejected",leg=""} 1',
        'disagg_requests_total{route="unknown",status="404",outcome="rejected",leg=""} 1',
        'disagg_requests_total{route="chat",status="413",outcome="rejected",leg=""} 1',
        // No decode worker in rotation: the decode leg's error.
        'disagg_requests_total{route="completions",status="503",outcome="error",leg="decode"} 1',
      ].sort(),
    );
  });

  for (const fault of [{ type: 'reset', afterTokens: 1 } as const, { type: 'empty' } as const]) {
    it(`a decode stream that breaks after it answered (${fault.type}) fails its request but leaves the worker in rotation`, async () => {
      let calls = 0;
      const { client, proxy, prefill } = await setup('vllm', {
        decode: { fault: () => (++calls === 1 ? fault : undefined) },
      });
      const broken = await client.completions
        .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: true })
        .then(async (stream) => {
          for await (const _ of stream);
        })
        .catch((e: unknown) => e);
      expect(broken).toBeInstanceOf(Error);
      expect(proxy.decodeWorkers.available).toHaveLength(1);
      const next = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
      expect(next.choices[0]?.text).toBe('tok0 tok1 ');
      expect(prefill.ledger.claimed()).toHaveLength(2);
    });
  }

  it('SGLang: a decode that fails before its stream opens stops the prefill leg waiting for it at the rendezvous', async () => {
    const { client, proxy, prefill } = await setup('sglang', {
      decode: { fault: { type: 'status', status: 500, message: 'decode out of memory' } },
    });
    const error = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream: true })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 502 });
    expect((error as Error).message).toContain('decode out of memory');
    // The pair was tried again with a fresh room (a 500 before the first byte), then given up.
    expect(new Set(prefill.requests.map((record) => String(record.body.bootstrap_room))).size).toBe(3);
    // Each prefill leg stopped now, not after the prefill worker's own bootstrap timeout (30 s).
    await eventually(() => prefill.requests.every((record) => record.aborted), 'every prefill leg was stopped');
    const worker = proxy.prefillWorkers.workers[0] as { url: string };
    await eventually(() => proxy.prefillWorkers.inFlight(worker) === 0, 'the prefill lease was returned');
    // Freed at once by the stop: nothing held. (The ledger calls it stranded: computed, never
    // taken, which decode's failure made impossible.)
    await eventually(() => prefill.ledger.outstanding().length === 0, 'no KV held');
    fakes.leaveKv(prefill);
  });

  it('--deadline-decode-first-token-ms covers a decode that never sends its headers: a 504, the leg ended', async () => {
    const { client, decode, prefill } = await setup(
      'vllm',
      { decode: { fault: { type: 'hang' } } },
      { deadlines: { decodeFirstTokenMs: 200 } },
    );
    const error = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', stream: true })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 504 });
    expect((error as Error).message).toContain('decodeFirstToken');
    await eventually(() => decode.requests[0]?.aborted === true, 'the decode call was ended');
    fakes.leaveKv(prefill); // computed for a decode that never came to take it: vLLM's own timeout frees it
  });

  it('SGLang: --deadline-handoff-ms runs from the rendezvous, so a decode that never answers ends both legs', async () => {
    const { client, decode, prefill } = await setup(
      'sglang',
      { decode: { fault: { type: 'hang' } } },
      { deadlines: { handoffMs: 200, decodeFirstTokenMs: 0, prefillFirstOutputMs: 0 } },
    );
    const error = await client.completions
      .create({ model: 'fake-model', prompt: 'Say', stream: true })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 504 });
    expect((error as Error).message).toContain('handoff');
    await eventually(() => decode.requests[0]?.aborted === true, 'the decode call was ended');
    await eventually(() => prefill.requests[0]?.aborted === true, 'the prefill call was ended');
    expect(prefill.ledger.outstanding()).toEqual([]);
    fakes.leaveKv(prefill); // freed at once by the stop (the ledger calls it stranded)
  });

  for (const protocol of ['vllm', 'sglang'] as const) {
    it.each([
      ['max_tokens', -1, 'max_tokens must be at least 1, got -1'],
      ['max_tokens', 0, 'max_tokens must be at least 1, got 0'],
      ['max_tokens', '10', 'max_tokens must be a number, got "10"'],
      ['max_tokens', 1.5, 'max_tokens must be an integer, got 1.5'],
      ['max_tokens', 5000, "max_tokens 5000 is more than the model's context of 4096 tokens (max_model_len)"],
      ['stream', 'true', 'stream must be a boolean, got "true"'],
      ['n', 0, 'n must be at least 1, got 0'],
      ['temperature', -0.5, 'temperature must be at least 0, got -0.5'],
      ['top_p', 0, 'top_p must be greater than 0, got 0'],
      ['prompt', [], 'prompt must be a string, a list of strings, a list of token ids or a list of such lists, got []'],
      ['stream_options', { include_usage: true }, 'stream_options can only be given with stream: true'],
    ])(
      `${protocol}: %s = %j is a 400 naming the field before any worker is called (no KV computed for a request decode would refuse)`,
      async (field, value, message) => {
        const { url, prefill, decode } = await setup(protocol);
        const body = { model: 'fake-model', prompt: 'Say', max_tokens: 4, [field]: value };
        const answer = await post(url, '/v1/completions', JSON.stringify(body));
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.text).error).toMatchObject({ param: field, message });
        expect([prefill.requests, decode.requests]).toEqual([[], []]);
      },
    );
  }

  it("SGLang's /generate: sampling_params are checked the same way, and max_new_tokens against the context", async () => {
    const { url, prefill } = await setup('sglang');
    const bad = [
      [
        { text: 'x', sampling_params: { temperature: -1 } },
        'sampling_params.temperature',
        'sampling_params.temperature must be at least 0, got -1',
      ],
      [
        { text: 'x', sampling_params: { max_new_tokens: 5000 } },
        'sampling_params.max_new_tokens',
        "sampling_params.max_new_tokens 5000 is more than the model's context of 4096 tokens (max_model_len)",
      ],
      [{ input_ids: [], sampling_params: {} }, 'input_ids', 'input_ids has none of the accepted forms, got []'],
    ] as const;
    for (const [body, param, message] of bad) {
      const answer = await post(url, '/generate', JSON.stringify(body));
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.text).error).toMatchObject({ param, message });
    }
    expect(prefill.requests).toEqual([]);
  });

  it('a rejected request is logged once, with its status and why', async () => {
    const { url, logs } = await setup('vllm');
    await post(url, '/v1/completions', JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 0 }));
    const rejected = logs.filter((record) => record.message === 'request rejected');
    expect(rejected).toHaveLength(1);
    expect(rejected[0]?.fields).toMatchObject({ route: 'completions', status: 400 });
    expect((rejected[0]?.fields as { error?: string } | undefined)?.error).toContain('max_tokens must be at least 1');
    expect(rejected[0]?.fields).not.toHaveProperty('err');
  });

  it('a prompt of token ids and a budget that together exceed the context are refused up front', async () => {
    const { url, prefill } = await setup('vllm', { decode: { maxModelLen: 100 }, prefill: { maxModelLen: 100 } });
    const body = { model: 'fake-model', prompt: Array.from({ length: 90 }, (_, i) => i), max_tokens: 20 };
    const answer = await post(url, '/v1/completions', JSON.stringify(body));
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text).error.message).toBe(
      "max_tokens 20 with a prompt of 90 tokens is more than the model's context of 100 tokens (max_model_len)",
    );
    expect(prefill.requests).toEqual([]);
    body.max_tokens = 10;
    expect((await post(url, '/v1/completions', JSON.stringify(body))).status).toBe(200);
  });

  it('chat: messages must be a list of messages with a role; top_logprobs needs logprobs', async () => {
    const { url, prefill } = await setup('vllm');
    const bad = [
      [{ messages: [{ content: 'hi' }] }, 'messages[0].role', 'messages[0].role must be a string, got undefined'],
      [
        { messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 },
        'top_logprobs',
        'top_logprobs needs logprobs: true',
      ],
      [
        { messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 0 },
        'max_completion_tokens',
        'max_completion_tokens must be at least 1, got 0',
      ],
    ] as const;
    for (const [body, param, message] of bad) {
      const answer = await post(url, '/v1/chat/completions', JSON.stringify({ model: 'fake-model', ...body }));
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.text).error).toMatchObject({ param, message });
    }
    expect(prefill.requests).toEqual([]);
  });

  const limits = { headersTimeoutMs: 200, requestTimeoutMs: 400, maxBodyBytes: 1024 };

  it('a client that trickles its headers is cut at --headers-timeout-ms', async () => {
    const { url, decode } = await setup('vllm', {}, limits);
    const client = rawConnection(url);
    client.socket.write('POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: appl');
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 408/);
    expect(decode.requests).toHaveLength(0);
  });

  it('a connection that says nothing is cut at --headers-timeout-ms', async () => {
    const { url } = await setup('vllm', {}, limits);
    const client = rawConnection(url);
    await client.closed;
  });

  it('a client that trickles its body is cut at --request-timeout-ms', async () => {
    const { url, decode } = await setup('vllm', {}, limits);
    const client = rawConnection(url);
    client.socket.write(
      'POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":',
    );
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 408/);
    expect(decode.requests).toHaveLength(0);
  });

  it('a body over --max-body-bytes gets its 413 and the connection closes; the rest is not awaited', async () => {
    const { url, decode } = await setup('vllm', {}, { maxBodyBytes: 1024 });
    const client = rawConnection(url);
    client.socket.write(
      `POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 * 1024}\r\n\r\n`,
    );
    client.socket.write(`{"prompt":"${'x'.repeat(64 * 1024)}`);
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 413/);
    expect(client.received()).toMatch(/connection: close/i);
    expect(decode.requests).toHaveLength(0);
  });
});

/** A request on a connection of its own; resolves with the status and connection header once the server closed it. */
function onOwnConnection(url: string, path: string, body: string, headers: Record<string, string>) {
  return new Promise<{ status: number | undefined; connection: string | undefined; text: string }>(
    (resolve, reject) => {
      const req = httpRequest(`${url}${path}`, { method: 'POST', agent: false, headers }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => {
          // The server closing the socket is what is awaited: with keep-alive it would stay open.
          res.socket.once('close', () => resolve({ status: res.statusCode, connection: res.headers.connection, text }));
        });
      });
      req.on('error', reject);
      req.end(body);
    },
  );
}

/** A raw connection to the proxy: what it sent back, and a promise of the server closing it. */
function rawConnection(url: string) {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    received += chunk;
  });
  socket.on('error', () => {}); // a reset by the server is a close too
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, closed, received: () => received };
}
