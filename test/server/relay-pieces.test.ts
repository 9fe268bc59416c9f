import { getEventListeners } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { DeadlineError } from '../../src/flow/deadlines.js';
import { NoWorkerError } from '../../src/flow/worker-pool.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { errorToResponse } from '../../src/server/pipeline/error-answers.js';
import { validateRequest } from '../../src/server/pipeline/request-schemas.js';
import { jsonResponse, sseResponse, writeJson, writeSse } from '../../src/server/relay.js';
import { workerRedactor } from '../../src/util/url.js';
import { ScriptedSource } from '../support/async.js';

const decodeUrl = 'http://10.0.0.7:8200';
const event = (json: Record<string, unknown>, text = '') =>
  Annotated.withWire(Annotated.fromData<LLMEngineOutput>({ token_ids: [], text }), [
    { form: 'event', text: JSON.stringify(json), json },
  ]);

/** A Node response that records what was written, and its status. */
function recordingResponse() {
  const res = new PassThrough() as PassThrough & {
    statusCode: number;
    headersSent: boolean;
    writableFinished: boolean;
    writeHead: (status: number, headers?: object) => unknown;
    setHeader: (name: string, value: string) => void;
    getHeader: (name: string) => undefined;
    flushHeaders: () => void;
  };
  const chunks: string[] = [];
  res.on('data', (chunk: Buffer) => chunks.push(chunk.toString()));
  res.statusCode = 200;
  res.headersSent = false;
  res.writeHead = (status: number) => {
    res.statusCode = status;
    res.headersSent = true;
    return res;
  };
  res.setHeader = () => {};
  res.getHeader = () => undefined;
  res.flushHeaders = () => {
    res.headersSent = true;
  };
  return { res, text: () => chunks.join('') };
}

describe('errorToResponse: a failure as a router answers it', () => {
  it('a worker failure: 502, the failing leg named, the address replaced by the worker name', () => {
    const redact = workerRedactor([{ url: 'http://10.0.0.2:8100/', name: 'prefill-a' }, { url: decodeUrl }]);
    const decode = UpstreamError.fromStatus(`${decodeUrl}/v1/completions`, 503, '{"error":{"message":"queue full"}}');
    expect(errorToResponse(decode, { redact })).toEqual({
      status: 502,
      body: {
        error: {
          message: 'worker-1/v1/completions answered 503: queue full',
          type: 'upstream_error',
          code: 502,
          param: null,
          leg: 'decode',
        },
      },
    });
    const prefill = PrefillError.from(UpstreamError.fromStatus('http://10.0.0.2:8100/v1/completions', 500, 'boom'));
    const answered = errorToResponse(prefill, { redact });
    expect(answered.body.error).toMatchObject({ leg: 'prefill', message: expect.stringContaining('prefill-a/v1') });
    expect(answered.body.error.message).not.toContain('10.0.0.2');
  });

  it('without a redaction of its own, every address in the message becomes `worker`', () => {
    const refused = UpstreamError.fromFailure(
      `${decodeUrl}/v1/completions`,
      Object.assign(new Error('connect ECONNREFUSED 10.0.0.7:8200'), { code: 'ECONNREFUSED' }),
    );
    const message = errorToResponse(refused).body.error.message;
    expect(message).not.toMatch(/10\.0\.0\.7|8200/);
    expect(message).toContain('worker/v1/completions');
  });

  it("a worker's 4xx with its own status; a deadline 504 on its leg; no worker 503 and no leg; a field named in param", () => {
    expect(errorToResponse(UpstreamError.fromStatus(decodeUrl, 400, 'bad max_tokens'))).toMatchObject({
      status: 400,
      body: { error: { type: 'invalid_request_error', leg: 'decode' } },
    });
    expect(errorToResponse(new DeadlineError('handoff', 10, 'prefill'))).toMatchObject({
      status: 504,
      body: { error: { leg: 'prefill' } },
    });
    const none = errorToResponse(new NoWorkerError(2));
    expect(none.status).toBe(503);
    expect(none.body.error).not.toHaveProperty('leg');
    let refused: unknown;
    try {
      validateRequest('completions', { prompt: 'x', max_tokens: 'ten' });
    } catch (error) {
      refused = error;
    }
    expect(errorToResponse(refused)).toMatchObject({ status: 400, body: { error: { param: 'max_tokens' } } });
  });
});

describe('validateRequest: before any worker', () => {
  it("a route it does not know is the program's mistake: a TypeError naming the routes, not a crash inside", () => {
    expect(() => validateRequest('conversations' as never, { input: 'hi' })).toThrow(
      new TypeError(
        'validateRequest: route must be one of completions, chat, generate, responses, messages, embeddings, rerank, score, classify, pooling, count_tokens, tokenize, detokenize, got "conversations"',
      ),
    );
  });

  it.each([
    ['a body that is not an object', 'completions', [1], 'body'],
    ['a chat without messages', 'chat', { prompt: 'x' }, 'messages'],
    ['completions without a prompt', 'completions', { messages: [] }, 'prompt'],
    ['a budget that is not a number', 'completions', { prompt: 'x', max_tokens: 'ten' }, 'max_tokens'],
    ['a budget past the context', 'completions', { prompt: [1, 2], max_tokens: 10 }, 'max_tokens'],
  ] as const)('refuses %s, naming the field', (_, route, body, param) => {
    expect(() => validateRequest(route, body, { maxModelLen: () => 8 })).toThrow(
      expect.objectContaining({ param, code: 'DISAGG_UNSUPPORTED_REQUEST' }),
    );
  });
});

describe('sseResponse: the SSE relay as a WHATWG Response', () => {
  it("streams the workers' chunks as they sent them, then [DONE]", async () => {
    const source = new ScriptedSource([
      event({ choices: [{ index: 0, text: 'Hi' }] }, 'Hi'),
      event({ choices: [{ index: 0, text: '', finish_reason: 'stop' }] }),
    ]).end();
    const stream = new ResponseStream<EngineItem>(source, new Controller());
    const response = await sseResponse(stream, { request: { model: 'm', stream: true } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    expect(await response.text()).toBe(
      'data: {"choices":[{"index":0,"text":"Hi"}]}\n\ndata: {"choices":[{"index":0,"text":"","finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    );
  });

  it('a failure before the first byte is its status and OpenAI body; after it, one error event and no [DONE]', async () => {
    const failing = new ResponseStream<EngineItem>(
      new ScriptedSource([Annotated.fromError(UpstreamError.fromStatus(decodeUrl, 400, 'bad'))]).end(),
      new Controller(),
    );
    const refused = await sseResponse(failing);
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ error: { message: expect.stringContaining('bad'), leg: 'decode' } });
    const late = new ResponseStream<EngineItem>(
      new ScriptedSource([event({ choices: [{ index: 0, text: 'a' }] }, 'a'), Annotated.fromError('decode OOM')]).end(),
      new Controller(),
    );
    const text = await (await sseResponse(late)).text();
    expect(text).toMatch(/^data: \{"choices".*\n\nevent: error\ndata: \{"error":\{"message":"decode OOM"/);
    expect(text).not.toContain('[DONE]');
  });

  it('a body read to its end is not a client that left: the context is not stopped', async () => {
    const context = new Controller();
    const source = new ScriptedSource([
      event({ choices: [{ index: 0, text: 'a', finish_reason: 'stop' }] }, 'a'),
    ]).end();
    const response = await sseResponse(new ResponseStream<EngineItem>(source, context), { context });
    expect(await response.text()).toContain('data: [DONE]');
    await new Promise((resolve) => setImmediate(resolve));
    expect(context.isStopped()).toBe(false);
  });

  it('a body the reader cancels is a client that left: the context is stopped, the stream closed', async () => {
    const source = new ScriptedSource([event({ choices: [{ index: 0, text: 'a' }] }, 'a')]);
    const context = new Controller();
    const response = await sseResponse(new ResponseStream<EngineItem>(source, context), { context });
    const reader = response.body?.getReader();
    await reader?.read();
    await reader?.cancel();
    source.push(Annotated.fromData(LLMEngineOutput.cancelled()));
    await new Promise((resolve) => setImmediate(resolve));
    expect(context.isStopped()).toBe(true);
    expect(source.closed).toBe(true);
  });
});

describe('writeSse and writeJson on a Node response', () => {
  it("re-creates chunks of the request's route (chat when it has messages) and says the usage reported", async () => {
    const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
    const items = [
      Annotated.fromData<LLMEngineOutput>({ token_ids: [1], text: 'Hi' }),
      Annotated.fromData<LLMEngineOutput>({ token_ids: [], finish_reason: 'stop', completion_usage: usage }),
    ];
    const { res, text } = recordingResponse();
    const result = await writeSse(
      new ResponseStream<EngineItem>(new ScriptedSource(items).end(), new Controller()),
      res as never,
      { request: { model: 'm', messages: [], stream: true } },
    );
    expect(result).toEqual({ usage });
    expect(text()).toContain('"object":"chat.completion.chunk"');
    expect(text()).toContain('"delta":{"role":"assistant","content":"Hi"}');
  });

  it('re-creates text_completion chunks for a request without messages', async () => {
    const items = [
      Annotated.fromData<LLMEngineOutput>({ token_ids: [1], text: 'Hi' }),
      Annotated.fromData<LLMEngineOutput>({ token_ids: [], finish_reason: 'stop' }),
    ];
    const { res, text } = recordingResponse();
    await writeSse(new ResponseStream<EngineItem>(new ScriptedSource(items).end(), new Controller()), res as never, {
      request: { model: 'm', prompt: 'x', stream: true },
    });
    expect(text()).toContain('"object":"text_completion"');
    expect(text()).toContain('"text":"Hi"');
    expect(text()).not.toContain('chat.completion');
  });

  it("an answer over leaves no listener on the caller's signal (a server's shutdown signal outlives every request)", async () => {
    const controller = new AbortController();
    for (let round = 0; round < 3; round++) {
      const source = new ScriptedSource([event({ choices: [{ index: 0, text: 'a', finish_reason: 'stop' }] }, 'a')]);
      const { res } = recordingResponse();
      await writeSse(new ResponseStream<EngineItem>(source.end(), new Controller()), res as never, {
        signal: controller.signal,
      });
    }
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('a signal that aborts ends the answer with its reason: a status before the first byte, one error event after', async () => {
    for (const early of [true, false]) {
      const source = new ScriptedSource([event({ choices: [{ index: 0, text: 'a' }] }, 'a')]);
      const controller = new AbortController();
      const { res, text } = recordingResponse();
      if (early) controller.abort(new Error('shutting down'));
      const writing = writeSse(new ResponseStream<EngineItem>(source, new Controller()), res as never, {
        signal: controller.signal,
      });
      if (!early) {
        await new Promise((resolve) => setImmediate(resolve));
        controller.abort(new Error('shutting down'));
        // The scripted source answers its pending read only when it has something to say.
        source.end();
      }
      await writing;
      if (early) expect(JSON.parse(text())).toMatchObject({ error: { message: 'shutting down' } });
      else expect(text()).toMatch(/^data: \{"choices".*\n\nevent: error\ndata: \{"error":\{"message":"shutting down"/s);
      expect(source.closed).toBe(true);
    }
  });

  it("writeJson answers the worker's own body when it was one piece, and the usage it reported", async () => {
    const usage = { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 };
    const json = {
      id: 'cmpl-1',
      object: 'text_completion',
      choices: [{ index: 0, text: 'ok', finish_reason: 'stop' }],
      usage,
    };
    const item = Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({
        token_ids: [],
        text: 'ok',
        finish_reason: 'stop',
        completion_usage: usage,
      }),
      [{ form: 'body', text: JSON.stringify(json), json }],
    );
    const { res, text } = recordingResponse();
    const result = await writeJson(
      new ResponseStream<EngineItem>(new ScriptedSource([item]).end(), new Controller()),
      res as never,
    );
    expect(result).toEqual({ usage });
    expect(JSON.parse(text())).toEqual(json);
    const failed = recordingResponse();
    await writeJson(
      new ResponseStream<EngineItem>(new ScriptedSource([Annotated.fromError('decode OOM')]).end(), new Controller()),
      failed.res as never,
    );
    expect(failed.res.statusCode).toBe(500);
    expect(JSON.parse(failed.text())).toMatchObject({ error: { message: 'decode OOM' } });
  });
});

describe('the relay answers the promise of a stream: a failure before it is a status, never a throw', () => {
  const prefillFailed = () =>
    Promise.reject(PrefillError.from(UpstreamError.fromStatus(`${decodeUrl}/v1/completions`, 503, 'busy')));
  const whole = (text: string) => {
    const json = {
      choices: [{ index: 0, text, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    };
    return Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({ token_ids: [], text, finish_reason: 'stop', completion_usage: json.usage }),
      [{ form: 'body', text: JSON.stringify(json), json }],
    );
  };

  it('sseResponse and jsonResponse: a rejected prefill is a 502 naming its leg, with no address', async () => {
    for (const relay of [sseResponse, jsonResponse]) {
      const response = await relay(prefillFailed(), { request: { model: 'm', prompt: 'x', stream: true } });
      expect(response.status).toBe(502);
      expect(response.headers.get('content-type')).toBe('application/json');
      const body = await response.json();
      expect(body).toMatchObject({ error: { type: 'upstream_error', leg: 'prefill', code: 502 } });
      expect(JSON.stringify(body)).not.toContain('10.0.0.7');
      expect(await response.result).toEqual({ usage: undefined });
    }
  });

  it('writeSse and writeJson: the same on a Node response, resolving rather than throwing', async () => {
    for (const relay of [writeSse, writeJson]) {
      const { res, text } = recordingResponse();
      await expect(relay(prefillFailed(), res as never, { request: { model: 'm', stream: true } })).resolves.toEqual({
        usage: undefined,
      });
      expect(res.statusCode).toBe(502);
      expect(JSON.parse(text())).toMatchObject({ error: { leg: 'prefill' } });
    }
  });

  it('an error handed over in place of the stream (from JavaScript) is answered as that failure', async () => {
    const handed = (await sseResponse(new NoWorkerError(1) as never)) as Response;
    expect(handed.status).toBe(503);
    const nonsense = await sseResponse(42 as never);
    expect(nonsense.status).toBe(500);
    expect(await nonsense.json()).toMatchObject({ error: { message: expect.stringContaining('got 42') } });
  });

  it('the SSE forms answer a request that did not ask to stream whole: JSON, never SSE', async () => {
    const stream = new ResponseStream<EngineItem>(new ScriptedSource([whole('ok')]).end(), new Controller());
    const response = await sseResponse(Promise.resolve(stream), { request: { model: 'm', prompt: 'x' } });
    expect(response.headers.get('content-type')).toBe('application/json');
    expect(await response.json()).toMatchObject({ choices: [{ text: 'ok' }] });
    expect(await response.result).toEqual({ usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    const { res, text } = recordingResponse();
    const node = new ResponseStream<EngineItem>(new ScriptedSource([whole('ok')]).end(), new Controller());
    await writeSse(node, res as never, { request: { model: 'm', prompt: 'x', stream: false } });
    expect(JSON.parse(text())).toMatchObject({ choices: [{ text: 'ok' }] });
  });

  it("sseResponse's result resolves with the usage once the body has been read", async () => {
    const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
    const items = [
      event({ choices: [{ index: 0, text: 'Hi' }] }, 'Hi'),
      Annotated.withWire(
        Annotated.fromData<LLMEngineOutput>({ token_ids: [], finish_reason: 'stop', completion_usage: usage }),
        [{ form: 'event', text: '{"choices":[],"usage":{}}', json: { choices: [], usage } }],
      ),
    ];
    const stream = new ResponseStream<EngineItem>(new ScriptedSource(items).end(), new Controller());
    const response = await sseResponse(stream, { request: { model: 'm', prompt: 'x', stream: true } });
    expect(await response.text()).toContain('[DONE]');
    expect(await response.result).toEqual({ usage });
  });
});
