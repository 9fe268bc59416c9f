import { request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import type { ProxyOptions } from '../../src/server/proxy.js';
import type { FakeWorkerOptions } from '../../src/testing/index.js';
import { eventually, eventuallyAsync, postRaw } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup, cluster } = proxyHarness();

/** A POST with a raw body: status, headers and the JSON answer. */
async function post(url: string, path: string, body: string, headers: Record<string, string> = {}) {
  const { text, ...answer } = await postRaw(url, path, body, headers);
  // biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
  return { ...answer, json: JSON.parse(text) as any };
}

/** Two prefill and two decode vLLM workers behind one proxy, the prefill ones as the test says. */
async function twoOfEach(
  firstPrefill: Partial<FakeWorkerOptions>,
  options: Partial<ProxyOptions>,
  secondPrefill: Partial<FakeWorkerOptions> = {},
) {
  const running = await cluster(
    'vllm',
    { prefill: [firstPrefill, secondPrefill], decode: [{ tokens: 2 }, { tokens: 2 }] },
    options,
  );
  // Probes must not take the first worker out before the request meets it.
  running.proxy.prefillWorkers.setAvailable(running.proxy.prefillWorkers.workers[0] as { url: string }, true);
  return running;
}

const finishedLine = (logs: Array<{ fields: object; message: string | undefined }>) =>
  logs
    .filter((record) => record.message === 'request finished')
    .map((record) => record.fields as Record<string, unknown>);

describe('what a body must be for its route', () => {
  it.each([
    [
      '/v1/chat/completions',
      { prompt: 'hi' },
      'messages',
      'The chat route takes messages, not a prompt: send a prompt to /v1/completions',
    ],
    ['/v1/chat/completions', { messages: [] }, 'messages', 'The chat route needs messages: a non-empty list'],
    [
      '/v1/chat/completions',
      { messages: 'hi', prompt: null },
      'messages',
      'The chat route needs messages: a non-empty list',
    ],
    [
      '/v1/completions',
      { messages: [{ role: 'user', content: 'hi' }] },
      'prompt',
      'The completions route takes a prompt, not messages: send messages to /v1/chat/completions',
    ],
    ['/v1/completions', { prompt: null, messages: null }, 'prompt', 'The completions route needs a prompt'],
    ['/generate', { sampling_params: {} }, 'text', '/generate needs a text, input_ids or input_embeds'],
    ['/generate', { text: null, input_ids: null }, 'text', '/generate needs a text, input_ids or input_embeds'],
  ])('%s %j: a 400 naming the field, no worker called', async (path, body, param, message) => {
    const { url, prefill, decode } = await setup(path === '/generate' ? 'sglang' : 'vllm');
    const answer = await post(url, path, JSON.stringify(body));
    expect([answer.status, answer.json.error.param, answer.json.error.message]).toEqual([400, param, message]);
    expect([prefill.requests, decode.requests]).toEqual([[], []]);
  });

  it('a body that is not JSON, or JSON that is not an object, says so', async () => {
    const { url, logs } = await setup('vllm');
    const broken = await post(url, '/v1/completions', '{"prompt":');
    expect(broken.status).toBe(400);
    expect(broken.json.error.message).toMatch(/^The request body is not JSON: SyntaxError: /);
    // The refusal's words and code, not a stack: an expected refusal, logged at info.
    const logged = logs.find((record) => record.message === 'request rejected')?.fields;
    expect(logged).toMatchObject({ error: expect.stringMatching(/^The request body is not JSON: SyntaxError: /) });
    expect(logged).not.toHaveProperty('err');
    for (const body of ['[]', 'null', '3', '"text"']) {
      const answer = await post(url, '/v1/completions', body);
      expect([answer.status, answer.json.error.message], body).toEqual([400, 'The request body must be a JSON object']);
    }
  });

  it('a body over the limit is a 413 that closes the connection; a 400 keeps it', async () => {
    const { url } = await setup('vllm', {}, { maxBodyBytes: 1024 });
    const big = await post(url, '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(4096) }));
    expect([big.status, big.headers.connection]).toEqual([413, 'close']);
    const bad = await post(url, '/v1/completions', '{');
    expect([bad.status, bad.headers.connection]).toEqual([400, 'keep-alive']);
  });
});

describe('what the proxy says of a request', () => {
  it('one "request finished" line: ids, route, strategy, workers by name and address, outcome, status, duration', async () => {
    const { url, logs, prefill, decode } = await setup('vllm');
    const before = performance.now();
    const answer = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
      {
        'x-request-id': 'client-7',
      },
    );
    const took = performance.now() - before;
    expect(answer.status).toBe(200);
    const [line, ...rest] = finishedLine(logs);
    expect(rest).toEqual([]);
    expect(line).toStrictEqual({
      requestId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      clientRequestId: 'client-7',
      route: 'completions',
      tenant: 'default',
      strategy: 'disaggregated-sequential',
      prefillWorker: 'prefill-0',
      prefillUrl: prefill.url,
      decodeWorker: 'decode-0',
      decodeUrl: decode.url,
      outcome: 'success',
      leg: undefined,
      status: 200,
      durationMs: expect.any(Number),
    });
    expect(line?.durationMs as number).toBeGreaterThanOrEqual(0);
    expect(line?.durationMs as number).toBeLessThanOrEqual(Math.ceil(took));
    expect(answer.headers['x-request-id']).toBe('client-7');
    // No onEvent tap: nothing about one is logged.
    expect(logs.filter((record) => record.level !== 'info' && record.level !== 'debug')).toEqual([]);
  });

  it('a failed request: its leg, its status, the error; a rejected one is logged with the client id too', async () => {
    const { url, logs } = await setup('vllm', {
      prefill: { fault: { type: 'status', status: 400, message: 'too long' } },
    });
    const failed = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(failed.status).toBe(400);
    const [line] = finishedLine(logs);
    // A worker's answer: what it is and how long its words were, not the words, nor a stack.
    expect(line).toMatchObject({
      status: 400,
      err: {
        type: 'PrefillError',
        code: 'DISAGG_PREFILL_FAILED',
        status: 400,
        workerTextLength: 'too long'.length,
        error: expect.stringContaining("answered 400: [the worker's text: 8 characters]"),
      },
    });
    expect(line).not.toHaveProperty('clientRequestId');
    await post(url, '/v1/completions', '{', { 'x-request-id': 'client-8' });
    await post(url, '/v1/completions', '[]');
    const rejected = logs.filter((record) => record.message === 'request rejected').map((record) => record.fields);
    expect(rejected).toStrictEqual([
      {
        requestId: expect.any(String),
        clientRequestId: 'client-8',
        route: 'completions',
        status: 400,
        error: expect.any(String),
        code: 'DISAGG_BAD_REQUEST',
      },
      {
        requestId: expect.any(String),
        route: 'completions',
        status: 400,
        error: expect.any(String),
        code: 'DISAGG_BAD_REQUEST',
      },
    ]);
  });

  it('served on decode alone: the strategy says skipped-prefill and why; no prefill worker is named', async () => {
    const { url, logs } = await setup('vllm', {}, { routing: { aggregateBelowChars: 100 } });
    const answer = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(answer.headers['x-disagg-strategy']).toBe('skipped-prefill');
    expect(answer.headers['x-disagg-prefill-worker']).toBeUndefined();
    expect(answer.headers['x-disagg-decode-worker']).toBe('decode-0');
    expect(finishedLine(logs)[0]).toMatchObject({
      strategy: 'skipped-prefill',
      aggregatedBecause: 'short-prompt',
      prefillWorker: undefined,
    });
  });

  it("a stream cut after its head is counted by the flow's verdict: status 200, outcome error, leg decode", async () => {
    const { client, url } = await setup('vllm', { decode: { fault: { type: 'reset', afterTokens: 1 } } });
    const stream = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 4, stream: true });
    await expect(
      (async () => {
        for await (const _ of stream) {
          // read until it breaks
        }
      })(),
    ).rejects.toThrow();
    const counted = async () => (await (await request(`${url}/metrics`)).body.text()).split('\n');
    await eventuallyAsync(
      async () => (await counted()).some((line) => line.startsWith('disagg_requests_total{route="completions"')),
      'the answer was counted',
    );
    expect((await counted()).filter((line) => line.startsWith('disagg_requests_total{route="completions"'))).toEqual([
      'disagg_requests_total{route="completions",status="200",outcome="error",leg="decode"} 1',
    ]);
  });

  it('a stream feeds the gaps between its chunks to the metrics', async () => {
    const { client, url } = await setup('vllm');
    const stream = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 4, stream: true });
    for await (const _ of stream) {
      // read to the end
    }
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toMatch(/^disagg_inter_token_latency_seconds_count 4$/m);
  });

  it("without a router's prediction of cached tokens, the engine's report of them is not counted as a prediction's miss", async () => {
    const { client, url } = await setup('vllm');
    const { usage } = await client.completions.create({ model: 'fake-model', prompt: 'Say it again', max_tokens: 2 });
    // The engine reports what it reused; round robin predicted nothing to compare it with.
    expect(usage?.prompt_tokens_details?.cached_tokens).toBeTypeOf('number');
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toMatch(/^disagg_tokens_total\{.*kind="cached".*\} \d+$/m);
    expect(metrics).not.toMatch(/^disagg_kv_(predicted|reported)_cached_tokens_total\{/m);
  });

  it('an onEvent tap that throws is logged and ignored: the request is served', async () => {
    const seen: string[] = [];
    const { client, logs } = await setup(
      'vllm',
      {},
      {
        onEvent: (event) => {
          seen.push(event.type);
          throw new Error('tap broke');
        },
      },
    );
    const answer = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 2 });
    expect(answer.choices[0]?.text).toBe('tok0 tok1 ');
    expect(seen).toContain('finished');
    const warned = logs.filter((record) => record.message === 'The onEvent tap threw; ignored');
    expect(warned.length).toBe(seen.length);
    expect((warned[0]?.fields as { err?: Error } | undefined)?.err?.message).toBe('tap broke');
  });

  it('the session header keeps each conversation on one decode worker, and spreads conversations', async () => {
    const { url } = await twoOfEach({}, { decodePolicy: 'session' });
    const workers = new Map<string, Set<string>>();
    for (let turn = 0; turn < 2; turn++) {
      for (let session = 0; session < 24; session++) {
        const answer = await post(
          url,
          '/v1/completions',
          JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
          {
            'x-session-id': `conversation-${session}`,
          },
        );
        const seen = workers.get(`conversation-${session}`) ?? new Set<string>();
        seen.add(String(answer.headers['x-disagg-decode-worker']));
        workers.set(`conversation-${session}`, seen);
      }
    }
    expect([...workers.values()].every((seen) => seen.size === 1)).toBe(true);
    // The workers' ports are random, so which worker a session hashes to is too; 24 sessions all
    // on one of two workers happens once in 2^23 runs.
    expect(new Set([...workers.values()].flatMap((seen) => [...seen])).size).toBe(2);
  });
});

describe('retries, as the log and the workers see them', () => {
  it('a retry avoids the worker that failed, even one the cache would pick again; each is logged with its attempt, worker and jittered backoff', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    const { url, prefill, logs } = await twoOfEach(
      { fault: { type: 'status', status: 503 } },
      { prefillPolicy: 'cache-aware', retry: { initialBackoffMs: 10, maxBackoffMs: 15, maxRetries: 2 } },
    );
    const answer = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say hello there', max_tokens: 2 }),
    );
    expect(answer.status).toBe(200);
    expect([prefill[0]?.requests.length, prefill[1]?.requests.length]).toEqual([1, 1]);
    const retried = logs.filter((record) => String(record.message).startsWith('Retrying the request'));
    expect(retried.map((record) => record.fields)).toEqual([
      {
        requestId: expect.any(String),
        attempt: 1,
        leg: 'prefill',
        worker: 'prefill-0',
        url: prefill[0]?.url,
        delayMs: 5,
        err: expect.objectContaining({ type: 'PrefillError', status: 503 }),
      },
    ]);
  });

  it('the backoff doubles per attempt up to its ceiling; past maxRetries the failure is answered', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    const fault = { type: 'status', status: 503 } as const;
    const { url, logs } = await twoOfEach(
      { fault },
      { retry: { initialBackoffMs: 10, maxBackoffMs: 15, maxRetries: 2 } },
      { fault },
    );
    const answer = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(answer.status).toBe(502);
    const delays = logs
      .filter((record) => String(record.message).startsWith('Retrying the request'))
      .map((record) => (record.fields as { delayMs: number }).delayMs);
    // Half of min(15, 10), then half of min(15, 20).
    expect(delays).toEqual([5, 8]);
  });

  it('a client that leaves during the backoff ends the request: no further attempt', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1);
    const { url, prefill, logs } = await twoOfEach(
      { fault: { type: 'status', status: 503 } },
      { retry: { initialBackoffMs: 60_000, maxBackoffMs: 60_000 } },
    );
    const leaving = new AbortController();
    const call = request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
      signal: leaving.signal,
    }).catch((error: unknown) => error);
    await eventually(
      () => logs.some((record) => String(record.message).startsWith('Retrying the request')),
      'a retry is waiting',
    );
    leaving.abort();
    await call;
    await eventually(() => finishedLine(logs).length === 1, 'the request ended');
    expect(prefill[1]?.requests).toEqual([]);
    // The failure that was being retried is the request's.
    expect(finishedLine(logs)[0]?.err).toMatchObject({ status: 503 });
  });

  it('a 429 from a worker is worth another worker; a deadline is not (waiting again would double it)', async () => {
    const busy = await twoOfEach({ fault: { type: 'status', status: 429 } }, {});
    const served = await post(
      busy.url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(served.status).toBe(200);
    expect([busy.prefill[0]?.requests.length, busy.prefill[1]?.requests.length]).toEqual([1, 1]);
    const slow = await twoOfEach({ fault: { type: 'hang' } }, { deadlines: { prefillFirstOutputMs: 100 } });
    const late = await post(
      slow.url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(late.status).toBe(504);
    expect(slow.prefill[1]?.requests).toEqual([]);
    await eventually(() => slow.prefill[0]?.requests[0]?.aborted === true, 'the hung prefill call was ended');
  });

  it("no decode worker in rotation: a 503 naming the pool, logged once as finished and counted as the decode leg's error", async () => {
    const { url, proxy, logs } = await setup('vllm');
    proxy.decodeWorkers.setAvailable(proxy.decodeWorkers.workers[0] as { url: string }, false);
    const answer = await post(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2 }),
    );
    expect(answer.status).toBe(503);
    expect(answer.json.error.message).toBe(
      "No decode worker is available: the decode pool's one worker is out of rotation",
    );
    const counted = 'disagg_requests_total{route="completions",status="503",outcome="error",leg="decode"} 1';
    await eventuallyAsync(
      async () => (await (await request(`${url}/metrics`)).body.text()).includes(counted),
      'the 503 counted as the decode leg error',
    );
    expect(logs.filter((record) => record.level === 'error')).toEqual([]);
    expect(finishedLine(logs)).toStrictEqual([
      {
        requestId: expect.any(String),
        route: 'completions',
        tenant: 'default',
        strategy: undefined,
        prefillWorker: undefined,
        decodeWorker: undefined,
        outcome: 'error',
        leg: 'decode',
        status: 503,
        durationMs: expect.any(Number),
        err: expect.any(Error),
      },
    ]);
  });
});
