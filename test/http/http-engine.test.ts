import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Dispatcher } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect } from '../support/async.js';
import { eventually } from '../support/http.js';

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

const servers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((close) => close()));
});

/** A loopback server answering with `handler` (for what well-behaved fake workers never do). */
async function serve(handler: Handler): Promise<{ url: string; closed: () => boolean }> {
  let clientClosed = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => handler(req, res, Buffer.concat(chunks).toString('utf8')));
    res.on('close', () => {
      if (!res.writableFinished) clientClosed = true;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, closed: () => clientClosed };
}

const sse = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream' });
const chunk = (text: string, finish: string | null = null) =>
  `data: ${JSON.stringify({ choices: [{ index: 0, text, finish_reason: finish }] })}\n\n`;
const streamed = { model: 'm', prompt: 'p', stream: true };

/**
 * A worker behind a scripted undici dispatcher: the test sends body chunks itself and sees
 * whether the engine has paused reading (what a socket's backpressure would do).
 */
function scriptedWorker(contentType = 'text/event-stream'): {
  dispatcher: Dispatcher;
  send(text: string | Buffer): void;
  end(): void;
  paused(): boolean;
} {
  let handler: Dispatcher.DispatchHandler | undefined;
  let paused = false;
  const controller = {
    pause: () => {
      paused = true;
    },
    resume: () => {
      paused = false;
    },
    abort: () => {},
    aborted: false,
    paused: false,
    reason: null,
  } as unknown as Dispatcher.DispatchController;
  const dispatcher = {
    dispatch(_options: Dispatcher.DispatchOptions, h: Dispatcher.DispatchHandler) {
      handler = h;
      h.onRequestStart?.(controller, {});
      h.onResponseStart?.(controller, 200, { 'content-type': contentType }, 'OK');
      return true;
    },
  } as unknown as Dispatcher;
  return {
    dispatcher,
    send: (text) => handler?.onResponseData?.(controller, typeof text === 'string' ? Buffer.from(text) : text),
    end: () => handler?.onResponseEnd?.(controller, {}),
    paused: () => paused,
  };
}

describe('httpEngine', () => {
  it('sends the body as exact JSON with the request id, to the route the body calls for', async () => {
    const seen: Array<{ path?: string; id?: string | string[]; type?: string; body: string }> = [];
    const { url } = await serve((req, res, body) => {
      seen.push({ path: req.url, id: req.headers['x-request-id'], type: req.headers['content-type'], body });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'x', finish_reason: 'length' }] }));
    });
    const engine = httpEngine({ url });
    await collect(await engine({ prompt: 'p', bootstrap_room: 9223372036854775807n }, new Controller('req-9')));
    await collect(await engine({ messages: [{ role: 'user', content: 'hi' }] }, new Controller('req-10')));
    expect(seen).toEqual([
      {
        path: '/v1/completions',
        id: 'req-9',
        type: 'application/json',
        body: '{"prompt":"p","bootstrap_room":9223372036854775807}',
      },
      {
        path: '/v1/chat/completions',
        id: 'req-10',
        type: 'application/json',
        body: '{"messages":[{"role":"user","content":"hi"}]}',
      },
    ]);
  });

  it('several reads in flight are answered in call order, also when a network chunk holds half an event', async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      const events = [chunk('a'), chunk('b'), chunk('c'), chunk('d', 'stop'), 'data: [DONE]\n\n'].join('');
      // Split mid-event, so that one read gets nothing from its chunk and must read again.
      const cuts = [10, 25, 70, 71, 140, events.length];
      let at = 0;
      const writeNext = () => {
        const cut = cuts.shift();
        if (cut === undefined) return res.end();
        res.write(events.slice(at, cut));
        at = cut;
        setImmediate(writeNext);
      };
      writeNext();
    });
    const stream = await httpEngine({ url })(streamed, new Controller());
    const iterator = stream[Symbol.asyncIterator]();
    const order: number[] = [];
    const calls = Array.from({ length: 6 }, (_, i) => {
      const call = iterator.next();
      call.then(() => order.push(i));
      return call;
    });
    const steps = await Promise.all(calls);
    expect(steps.map((step) => (step.done === true ? 'done' : step.value.data?.text))).toEqual([
      'a',
      'b',
      'c',
      'd',
      'done',
      'done',
    ]);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('return() with reads in flight answers them done and every later call at once', async () => {
    const { url, closed } = await serve((_, res) => {
      sse(res);
      res.write(chunk('a'));
    });
    const stream = await httpEngine({ url })(streamed, new Controller());
    const iterator = stream[Symbol.asyncIterator]();
    const calls = [iterator.next(), iterator.next(), iterator.next()];
    expect((await calls[0])?.value?.data?.text).toBe('a');
    await iterator.return?.();
    expect(await Promise.all(calls.slice(1))).toEqual([
      { value: undefined, done: true },
      { value: undefined, done: true },
    ]);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    await eventually(closed, 'the worker saw the call end');
  });

  it('a last event without its closing blank line is still read', async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      res.write(chunk('a'));
      res.end(`data: ${JSON.stringify({ choices: [{ index: 0, text: 'b', finish_reason: 'stop' }] })}`);
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items.map((item) => [item.data?.text, item.data?.finish_reason ?? null])).toEqual([
      ['a', null],
      ['b', 'stop'],
    ]);
  });

  it("an error chunk or event keeps the worker's status: a 400 in a 200 stream is still the client's mistake", async () => {
    for (const error of [
      `data: ${JSON.stringify({ error: { object: 'error', message: 'prompt too long', code: 400 } })}\n\n`,
      `event: error\ndata: ${JSON.stringify({ error: { message: 'prompt too long', code: 400 } })}\n\n`,
    ]) {
      const { url } = await serve((_, res) => {
        sse(res);
        res.end(`${chunk('a')}${error}data: [DONE]\n\n`);
      });
      const items = await collect(await httpEngine({ url })(streamed, new Controller()));
      const failure = Annotated.err(items.at(-1));
      expect(failure).toMatchObject({ name: 'UpstreamError', kind: 'status', status: 400, retryable: false });
      expect(failure?.message).toContain('prompt too long');
    }
  });

  it('abort and error finishes are failures, never a finish a client could take for a success', async () => {
    for (const [finish, text] of [
      ['abort', 'aborted the request'],
      ['error', 'failed'],
    ]) {
      const { url } = await serve((_, res) => {
        sse(res);
        res.end(`${chunk('a')}${chunk('', finish)}data: [DONE]\n\n`);
      });
      const items = await collect(await httpEngine({ url })(streamed, new Controller()));
      expect(items).toHaveLength(2);
      expect(Annotated.err(items[1])?.message).toContain(text);
    }
  });

  it('with n = 2 the stream goes on until both choices have finished; every chunk keeps what the worker sent', async () => {
    const choice = (index: number, text: string, finish: string | null) =>
      `data: ${JSON.stringify({ choices: [{ index, text, finish_reason: finish }] })}\n\n`;
    const { url } = await serve((_, res) => {
      sse(res);
      res.end(
        `${choice(0, 'a', null)}${choice(1, 'b', null)}${choice(0, '', 'stop')}${choice(1, 'c', null)}${choice(1, '', 'length')}data: [DONE]\n\n`,
      );
    });
    const items = await collect(await httpEngine({ url })({ ...streamed, n: 2 }, new Controller()));
    expect(items.map((item) => item.data?.finish_reason ?? null)).toEqual([null, null, null, null, 'length']);
    // The first choice's finish is not the end, but its chunk goes on as the worker sent it.
    expect(Annotated.wire(items[2])?.[0]?.json).toMatchObject({ choices: [{ index: 0, finish_reason: 'stop' }] });
  });

  it("TensorRT-LLM: the handoff is found on the choice, and a context response's not_finished is no finish", async () => {
    const { url } = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          choices: [
            { index: 0, text: 'x', finish_reason: 'not_finished', disaggregated_params: { ctx_request_id: 9 } },
          ],
        }),
      );
    });
    const [item] = await collect(await httpEngine({ url })({ model: 'm', prompt: 'p' }, new Controller()));
    expect(item?.data?.disaggregated_params).toEqual({ ctx_request_id: 9 });
    expect(item?.data?.finish_reason ?? null).toBeNull();
  });

  it('reads integers above 2^53 - 1 in streamed chunks exactly', async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      res.write(
        `data: {"choices":[{"text":"","finish_reason":null}],"disaggregated_params":{"bootstrap_room":9007199254740993}}\n\n`,
      );
      res.end(`${chunk('', 'stop')}data: [DONE]\n\n`);
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items[0]?.data?.disaggregated_params).toEqual({ bootstrap_room: 9007199254740993n });
  });

  it('an error status rejects with the status and body (a 429 retryable on another worker); a closed port with a retryable connection error', async () => {
    const { url } = await serve((_, res) => {
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'rate limited' } }));
    });
    const call = httpEngine({ url })(streamed, new Controller());
    await expect(call).rejects.toMatchObject({ name: 'UpstreamError', status: 429, retryable: true });
    await expect(call).rejects.toThrow('answered 429: rate limited');
    const refused = httpEngine({ url: 'http://127.0.0.1:1' })(streamed, new Controller());
    await expect(refused).rejects.toMatchObject({ name: 'UpstreamError', kind: 'connection', retryable: true });
  });

  it.each([
    // Broken off after the worker answered: not retried, as the failure rules say.
    ['a stream cut before [DONE]', (res: ServerResponse) => res.end(chunk('a')), 'before [DONE]', false],
    [
      'an SSE error event',
      (res: ServerResponse) => res.end(`${chunk('a')}event: error\ndata: {"error":{"message":"engine died"}}\n\n`),
      'engine died',
      false,
    ],
    [
      '[DONE] before any finish chunk',
      (res: ServerResponse) => res.end(`${chunk('a')}data: [DONE]\n\n`),
      'sent [DONE] before its answer finished',
      false,
    ],
    ['a chunk that is not JSON', (res: ServerResponse) => res.end(`${chunk('a')}data: {oops\n\n`), 'unexpected', false],
    [
      "the worker's own error chunk",
      (res: ServerResponse) => res.end(`${chunk('a')}data: {"object":"error","message":"CUDA OOM"}\n\n`),
      'CUDA OOM',
      false,
    ],
  ])('after the stream started, %s is one error item after the items before it', async (_, answer, text, retryable) => {
    const { url } = await serve((__, res) => {
      sse(res);
      answer(res);
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items[0]?.data?.text).toBe('a');
    expect(items).toHaveLength(2);
    const error = Annotated.err(items[1]);
    expect(error).toMatchObject({ name: 'UpstreamError', retryable });
    expect(error?.message).toContain(text);
  });

  it('a stream that ends after its finish chunk but without [DONE] is complete, not an error', async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      res.end(chunk('a') + chunk('', 'length'));
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items.map((item) => item.data?.finish_reason ?? null)).toEqual([null, 'length']);
  });

  it("a usage chunk after the finish chunk (vLLM's include_usage) is folded into the finish item", async () => {
    const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
    const { url } = await serve((_, res) => {
      sse(res);
      res.write(chunk('a') + chunk('', 'stop'));
      setTimeout(() => res.end(`data: ${JSON.stringify({ choices: [], usage })}\n\ndata: [DONE]\n\n`), 20);
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items.map((item) => item.data)).toEqual([
      { token_ids: [], text: 'a', index: 0 },
      { token_ids: [], text: '', index: 0, finish_reason: 'stop', completion_usage: usage },
    ]);
  });

  it('return() drops what was already parsed: nothing is read after it', async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      res.write(chunk('a') + chunk('b') + chunk('c'));
    });
    const iterator = (await httpEngine({ url })(streamed, new Controller()))[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.text).toBe('a');
    await iterator.return?.();
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
  });

  it("with api 'chat', a body with a prompt and no messages (a migrated chat's continuation) goes to completions", async () => {
    const paths: string[] = [];
    const { url } = await serve((req, res) => {
      paths.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'all', finish_reason: 'stop' }] }));
    });
    const engine = httpEngine({ url, api: 'chat' });
    await collect(await engine({ prompt: [1, 2], stream: false }, new Controller()));
    await collect(await engine({ messages: [{ role: 'user', content: 'x' }], stream: false }, new Controller()));
    expect(paths).toEqual(['/v1/completions', '/v1/chat/completions']);
  });

  it('a call that names its endpoint goes there, whatever the body looks like or the engine was made for', async () => {
    const paths: string[] = [];
    const { url } = await serve((req, res) => {
      paths.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'all', finish_reason: 'stop' }] }));
    });
    const chatBody = { messages: [{ role: 'user', content: 'x' }], stream: false };
    // An Anthropic body looks like chat's; the token-id continuation of a chat, like a completion.
    await collect(await httpEngine({ url })(chatBody, new Controller(), undefined, endpointNamed('messages')));
    await collect(
      await httpEngine({ url, api: 'chat' })(chatBody, new Controller(), undefined, endpointNamed('responses')),
    );
    await collect(
      await httpEngine({ url, api: 'chat' })(
        { prompt: [1], stream: false },
        new Controller(),
        undefined,
        endpointNamed('chat'),
      ),
    );
    expect(paths).toEqual(['/v1/messages', '/v1/responses', '/v1/chat/completions']);
  });

  it("with api 'auto' and no endpoint named, the body's shape says which of OpenAI's APIs, as endpointOf reads it", async () => {
    const paths: string[] = [];
    const { url } = await serve((req, res) => {
      paths.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'all', finish_reason: 'stop' }] }));
    });
    const engine = httpEngine({ url });
    for (const body of [{ messages: [] }, { input: 'x' }, { text: 'x' }, { prompt: 'x' }]) {
      await collect(await engine({ ...body, stream: false }, new Controller()));
    }
    expect(paths).toEqual(['/v1/chat/completions', '/v1/responses', '/v1/completions', '/v1/completions']);
  });

  it('a JSON answer is one item, whatever was asked; an empty body is a protocol error item', async () => {
    const { url } = await serve((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        req.url === '/v1/completions' ? JSON.stringify({ choices: [{ text: 'all', finish_reason: 'stop' }] }) : '',
      );
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items.map((item) => item.data)).toEqual([{ token_ids: [], text: 'all', finish_reason: 'stop' }]);
    const chat = { ...streamed, messages: [{ role: 'user', content: 'x' }] };
    const empty = await collect(await httpEngine({ url, api: 'chat' })(chat, new Controller()));
    expect(Annotated.err(empty[0])?.message).toContain('empty body');
  });

  it('a stopped context aborts the call: the stream ends with a cancelled item, the worker sees the close', async () => {
    const server = await serve((_, res) => {
      sse(res);
      res.write(chunk('a'));
    });
    const context = new Controller();
    const iterator = (await httpEngine({ url: server.url })(streamed, context))[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.data?.text).toBe('a');
    const waiting = iterator.next();
    context.stopGenerating();
    expect((await waiting).value?.data?.finish_reason).toBe('cancelled');
    expect((await iterator.next()).done).toBe(true);
    await eventually(server.closed, 'the worker saw the client go');
  });

  it('return() ends the call at once, even with a read waiting on the network', async () => {
    const server = await serve((_, res) => {
      sse(res);
      res.write(chunk('a'));
    });
    const iterator = (await httpEngine({ url: server.url })(streamed, new Controller()))[Symbol.asyncIterator]();
    await iterator.next();
    const waiting = iterator.next();
    expect(await iterator.return?.()).toEqual({ value: undefined, done: true });
    await waiting.catch(() => {}); // settles, one way or the other
    await eventually(server.closed, 'the worker saw the client go');
    expect((await iterator.next()).done).toBe(true);
  });

  it('a reader that falls 64 items behind pauses the socket; reading half of them resumes it', async () => {
    const worker = scriptedWorker();
    const iterator = (
      await httpEngine({ url: 'http://worker', dispatcher: worker.dispatcher })(streamed, new Controller())
    )[Symbol.asyncIterator]();
    worker.send(Array.from({ length: 63 }, (_, i) => chunk(`t${i}`)).join(''));
    expect(worker.paused()).toBe(false);
    worker.send(chunk('t63'));
    expect(worker.paused()).toBe(true);
    for (let i = 0; i < 31; i++) expect((await iterator.next()).value?.data?.text).toBe(`t${i}`);
    expect(worker.paused()).toBe(true);
    expect((await iterator.next()).value?.data?.text).toBe('t31');
    expect(worker.paused()).toBe(false);
  });

  it('after [DONE] the rest of the body is read whatever the reader does, so the connection can be reused', async () => {
    const worker = scriptedWorker();
    const stream = await httpEngine({ url: 'http://worker', dispatcher: worker.dispatcher })(
      streamed,
      new Controller(),
    );
    worker.send(Array.from({ length: 63 }, (_, i) => chunk(`t${i}`)).join(''));
    worker.send(`${chunk('t63')}${chunk('', 'length')}data: [DONE]\n\n`);
    expect(worker.paused()).toBe(false);
    const items = await collect(stream);
    expect(items).toHaveLength(65);
  });

  it('takes the url from the chosen worker or a function of it; refuses a missing url and an unknown api', async () => {
    const { url } = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'ok', finish_reason: 'stop' }] }));
    });
    const byField = httpEngine<{ url: string }>();
    expect((await collect(await byField({ prompt: 'p' }, new Controller(), { url })))[0]?.data?.text).toBe('ok');
    const byFunction = httpEngine<{ host: string }>({ url: (worker) => `http://${worker?.host}` });
    const host = url.replace('http://', '');
    expect((await collect(await byFunction({ prompt: 'p' }, new Controller(), { host })))[0]?.data?.text).toBe('ok');
    await expect(byField({ prompt: 'p' }, new Controller())).rejects.toThrow("httpEngine needs the worker's base URL");
    await expect(byField({ prompt: 'p' }, new Controller(), { url: '' })).rejects.toThrow(
      "httpEngine needs the worker's base URL",
    );
    expect(() => httpEngine({ api: 'embeddings' as never })).toThrow(
      "expected 'auto', 'completions', 'chat', 'generate', 'responses' or 'messages'",
    );
  });
});

/** One SSE answer (`events`, then `[DONE]` unless `done` is false) to `body`; the items read. */
async function readSse(events: unknown[], body: Record<string, unknown> = streamed, done = true) {
  const { url } = await serve((_, res) => {
    sse(res);
    res.end(`${events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('')}${done ? 'data: [DONE]\n\n' : ''}`);
  });
  return collect(await httpEngine({ url })(body, new Controller()));
}

const finishes = (items: Awaited<ReturnType<typeof readSse>>) =>
  items.map((item) => (Annotated.isError(item) ? 'error' : (item.data?.finish_reason ?? null)));

describe('httpEngine, what an answer turns on', () => {
  it('asks for what it will read (SSE for a stream, JSON otherwise), with the configured headers, on a base URL with or without its slash', async () => {
    const seen: Array<Record<string, unknown>> = [];
    const { url } = await serve((req, res) => {
      seen.push({
        path: req.url,
        accept: req.headers.accept,
        tenant: req.headers['x-tenant'],
        id: req.headers['x-id'],
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ text: 'x', finish_reason: 'stop' }] }));
    });
    const engine = httpEngine({ url: `${url}/`, headers: { 'x-tenant': 't1' }, requestIdHeader: 'x-id' });
    await collect(await engine({ prompt: 'p', stream: true }, new Controller('a')));
    await collect(await engine({ prompt: 'p', stream: 'yes' }, new Controller('b')));
    await collect(await httpEngine({ url })({ prompt: 'p' }, new Controller('c')));
    expect(seen).toEqual([
      { path: '/v1/completions', accept: 'text/event-stream', tenant: 't1', id: 'a' },
      { path: '/v1/completions', accept: 'application/json', tenant: 't1', id: 'b' },
      { path: '/v1/completions', accept: 'application/json', tenant: undefined, id: undefined },
    ]);
  });

  it('sends through the dispatcher it is given', async () => {
    const worker = scriptedWorker();
    const stream = await httpEngine({ url: 'http://worker.invalid', dispatcher: worker.dispatcher })(
      streamed,
      new Controller(),
    );
    worker.send(`${chunk('a')}${chunk('', 'stop')}data: [DONE]\n\n`);
    expect(finishes(await collect(stream))).toEqual([null, 'stop']);
  });

  it('usage is folded only into a finish just read, and only from a chunk that says nothing else', async () => {
    const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
    // With continuous usage every chunk has usage: those with text are tokens, never folded.
    const continuous = await readSse([
      { choices: [{ index: 0, text: 'a' }], usage },
      { choices: [{ index: 0, text: '', finish_reason: 'stop' }], usage },
      { choices: [{ index: 0, text: 'late' }], usage },
    ]);
    expect(continuous.map((item) => item.data?.text)).toEqual(['a', '', 'late']);
    expect(finishes(continuous)).toEqual([null, 'stop', null]);
    // A usage-only chunk before any finish is an item of its own.
    const early = await readSse([{ choices: [], usage }, chunk0('a', 'stop')]);
    expect(early.map((item) => item.data?.completion_usage)).toEqual([usage, undefined]);
    // A usage of null, or a second finish, is no usage to fold.
    const nullUsage = await readSse([chunk0('a', 'stop'), { choices: [], usage: null }]);
    expect(nullUsage).toHaveLength(2);
    expect(nullUsage[0]?.data?.completion_usage).toBeUndefined();
    const folded = await readSse([chunk0('a', 'length'), { choices: [], usage }]);
    expect(folded).toHaveLength(1);
    expect(folded[0]?.data).toMatchObject({ finish_reason: 'length', completion_usage: usage });
    expect(Annotated.wire(folded[0])).toHaveLength(2);
  });

  it("the worker's status from an error chunk: a number or a numeric string in 400-599, else none", async () => {
    const statusOf = async (code: unknown) => {
      const items = await readSse([{ object: 'error', message: 'nope', code }]);
      return (Annotated.err(items.at(-1)) as { status?: number } | undefined)?.status;
    };
    expect(await statusOf(400)).toBe(400);
    expect(await statusOf('429')).toBe(429);
    expect(await statusOf(599)).toBe(599);
    expect(await statusOf(600)).toBeUndefined();
    expect(await statusOf(399)).toBeUndefined();
    expect(await statusOf(400.5)).toBeUndefined();
    expect(await statusOf('bad')).toBeUndefined();
    const nested = await readSse([{ error: { message: 'nope', code: '503' } }]);
    expect(Annotated.err(nested[0])).toMatchObject({ status: 503, retryable: true });
  });

  it('a list of prompts is a batch: the answer ends when every prompt times n has finished; token ids are one prompt', async () => {
    const at = (index: number, finish: string | null = null) => ({
      choices: [{ index, text: finish === null ? 't' : '', finish_reason: finish }],
    });
    const batch = await readSse([at(0, 'stop'), at(1), at(1, 'length')], { ...streamed, prompt: ['a', 'b'] });
    expect(finishes(batch)).toEqual([null, null, 'length']);
    const batchTimesN = await readSse([at(0, 'stop'), at(1, 'stop'), at(2, 'stop'), at(3, 'stop')], {
      ...streamed,
      prompt: ['a', 'b'],
      n: 2,
    });
    expect(finishes(batchTimesN)).toEqual([null, null, null, 'stop']);
    // Token ids (numbers) are one prompt; n as a string is no n: the first finish ends the answer.
    for (const body of [
      { ...streamed, prompt: [1, 2, 3] },
      { ...streamed, prompt: 'p', n: '2' },
      { ...streamed, prompt: 'p', n: 1 },
    ]) {
      expect(finishes(await readSse([at(0, 'stop')], body))).toEqual(['stop']);
    }
    // SGLang's `text` batches the same way.
    expect(finishes(await readSse([at(0, 'stop'), at(1, 'stop')], { stream: true, text: ['a', 'b'] }))).toEqual([
      null,
      'stop',
    ]);
  });

  it('choices without an index are counted as they finish; a failure ends a batch at once', async () => {
    const unindexed = (finish: string | null) => ({ choices: [{ text: '', finish_reason: finish }] });
    expect(finishes(await readSse([unindexed('stop'), unindexed('length')], { ...streamed, n: 2 }))).toEqual([
      null,
      'length',
    ]);
    const failed = await readSse([chunk0('a', 'abort'), chunk0('b')], { ...streamed, n: 2 });
    expect(finishes(failed)).toEqual(['error']);
  });

  it("a list of token-id lists is a batch too (prompt, and SGLang's input_ids); one list of ids is one prompt", async () => {
    const at = (index: number, finish: string | null = null) => ({
      choices: [{ index, text: finish === null ? 't' : '', finish_reason: finish }],
    });
    for (const body of [
      { ...streamed, prompt: [[1, 2], [3]] },
      { stream: true, input_ids: [[1, 2], [3]] },
    ]) {
      expect(finishes(await readSse([at(0, 'stop'), at(1), at(1, 'length')], body))).toEqual([null, null, 'length']);
    }
    expect(finishes(await readSse([at(0, 'stop')], { stream: true, input_ids: [1, 2, 3] }))).toEqual(['stop']);
  });

  it("an error event that is not JSON fails the stream with the worker's own words and no status", async () => {
    const { url } = await serve((_, res) => {
      sse(res);
      res.end(`${chunk('a')}event: error\ndata: the worker ran out of memory\n\ndata: [DONE]\n\n`);
    });
    const items = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(items).toHaveLength(2);
    const failure = Annotated.err(items[1]) as unknown as { message: string; status?: number; kind: string };
    expect(failure.message).toBe(`${url}/v1/completions sent an error event: the worker ran out of memory`);
    expect(failure).toMatchObject({ kind: 'status', status: undefined });
  });

  it('a character split between two network chunks arrives whole, in a stream and in a JSON answer', async () => {
    const emoji = Buffer.from('h\u00e9\u{1F600}', 'utf8');
    const streamedWorker = scriptedWorker();
    const stream = (
      await httpEngine({ url: 'http://w', dispatcher: streamedWorker.dispatcher })(streamed, new Controller())
    )[Symbol.asyncIterator]();
    const event = Buffer.from(chunk(emoji.toString('utf8'), 'stop'));
    const cut = event.indexOf(emoji) + 2; // inside the two bytes of the e with its accent
    streamedWorker.send(event.subarray(0, cut));
    streamedWorker.send(event.subarray(cut, cut + 3)); // and inside the emoji's four
    streamedWorker.send(event.subarray(cut + 3));
    streamedWorker.send('data: [DONE]\n\n');
    expect((await stream.next()).value?.data?.text).toBe('h\u00e9\u{1F600}');

    const jsonWorker = scriptedWorker('application/json');
    const whole = httpEngine({ url: 'http://w', dispatcher: jsonWorker.dispatcher })({ prompt: 'p' }, new Controller());
    const body = Buffer.from(JSON.stringify({ choices: [{ text: emoji.toString('utf8'), finish_reason: 'stop' }] }));
    const middle = body.indexOf(emoji) + 2;
    jsonWorker.send(body.subarray(0, middle));
    jsonWorker.send(body.subarray(middle));
    jsonWorker.end();
    expect((await collect(await whole))[0]?.data?.text).toBe('h\u00e9\u{1F600}');
  });

  it('a stream cut before its answer finished is a connection failure after the response; a chunk that is not JSON too', async () => {
    const cut = await readSse([chunk0('a')], streamed, false);
    expect(Annotated.err(cut.at(-1))).toMatchObject({
      kind: 'connection',
      networkCode: 'ECONNRESET',
      afterResponse: true,
    });
    expect(Annotated.err(cut.at(-1))?.message).toContain('ended its event stream before [DONE]');
    const { url } = await serve((_, res) => {
      sse(res);
      res.end(`${chunk('a')}data: {"choices": [\n\ndata: [DONE]\n\n`);
    });
    const garbled = await collect(await httpEngine({ url })(streamed, new Controller()));
    expect(Annotated.err(garbled.at(-1))).toMatchObject({ afterResponse: true });
  });

  it('a JSON answer of only blanks is a protocol error item, like an empty one', async () => {
    const { url } = await serve((_, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('  \n');
    });
    const items = await collect(await httpEngine({ url })({ prompt: 'p' }, new Controller()));
    expect(Annotated.err(items[0])).toMatchObject({ kind: 'protocol' });
    expect(Annotated.err(items[0])?.message).toBe(`${url}/v1/completions answered an empty body`);
  });
});

function chunk0(text: string, finish: string | null = null) {
  return { choices: [{ index: 0, text, finish_reason: finish }] };
}
