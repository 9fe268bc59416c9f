import { createServer, type Server } from 'node:http';
import express from 'express';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { loadScorer, scoredPolicy } from '../../src/routing/scoring.js';
import { ConfigError, createHandler, type DisaggHandler, type HandlerOptions } from '../../src/server/index.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const handlers: DisaggHandler[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(handlers.splice(0).map((handler) => handler.close({ gracePeriodMs: 0 })));
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
});

async function handlerOver(options: Partial<HandlerOptions> = {}) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode0 = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 });
  const decode1 = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3 });
  const handler = createHandler({
    connector: 'vllm',
    prefill: [{ url: prefill.url }],
    decode: [{ url: decode0.url }, { url: decode1.url }],
    logger: recordingLogger().logger,
    ...options,
  });
  handlers.push(handler);
  return { handler, prefill, decode: [decode0, decode1] };
}

async function listen(app: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

const completion = { model: 'fake-model', prompt: 'Say hi', max_tokens: 3 };

describe('createHandler with parts of your own: the rest of the proxy stays', () => {
  it('a routing policy of your own chooses the decode worker', async () => {
    const last = { name: 'last', select: <W>(candidates: readonly W[]) => candidates.at(-1) as W };
    const { handler, decode } = await handlerOver({ decodePolicy: last });
    for (let i = 0; i < 3; i++) {
      const response = await handler(
        new Request('http://app.test/v1/completions', { method: 'POST', body: JSON.stringify(completion) }),
      );
      expect(response.headers.get('x-disagg-decode-worker')).toBe('decode-1');
      await response.text();
    }
    expect([decode[0]?.requests.length, decode[1]?.requests.length]).toEqual([0, 3]);
  });

  it("a policy made from the proxy's routing services (a scorer of your own beside the proxy's)", async () => {
    let services: object | undefined;
    const { handler } = await handlerOver({
      prefillPolicy: (given) => {
        services = given;
        return scoredPolicy({ name: 'mine', scorers: [{ scorer: loadScorer(), weight: 1 }] });
      },
    });
    expect(services).toHaveProperty('kvIndex');
    const response = await handler(
      new Request('http://app.test/v1/completions', { method: 'POST', body: JSON.stringify(completion) }),
    );
    expect(response.status).toBe(200);
  });

  it("an engine around the proxy's own: the decode body changed, the proxy's handoff, retries and answer kept", async () => {
    const seen: string[] = [];
    const { handler, decode, prefill } = await handlerOver({
      engine: (leg, proxyEngine, route) => (body, context, worker) => {
        seen.push(`${leg}:${route}`);
        return proxyEngine(leg === 'decode' ? { ...body, priority: 7 } : body, context, worker);
      },
    });
    const response = await handler(
      new Request('http://app.test/v1/completions', { method: 'POST', body: JSON.stringify(completion) }),
    );
    expect(await response.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 tok2 ' }] });
    expect(seen).toEqual(['prefill:completions', 'decode:completions']);
    const decoded = [...(decode[0]?.requests ?? []), ...(decode[1]?.requests ?? [])];
    expect(decoded[0]?.body).toMatchObject({ priority: 7, kv_transfer_params: expect.any(Object) });
    expect(prefill.ledger.outstanding()).toEqual([]);
  });

  it('refuses parts that are none, naming the option', () => {
    const base = {
      connector: 'vllm',
      prefill: [{ url: 'http://p0:8100' }],
      decode: [{ url: 'http://d0:8200' }],
    } as const;
    expect(() => createHandler({ ...base, prefillPolicy: 42 as never })).toThrow(ConfigError);
    expect(() => createHandler({ ...base, prefillPolicy: { name: 'x' } as never })).toThrow(
      /prefillPolicy must be one of .*, a routing policy \(an object with select\(\)\) or a function making one, got/,
    );
    expect(() => createHandler({ ...base, engine: 'http' as never })).toThrow(
      'engine must be a function (leg, proxyEngine, route) => engine, got "http"',
    );
  });
});

describe('handler.node: the same routes on a Node request and response', () => {
  it('on node:http, through the openai client, streamed and whole', async () => {
    const { handler } = await handlerOver();
    const url = await listen((req, res) => handler.node(req, res));
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const whole = await client.completions.create(completion);
    expect(whole.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    let text = '';
    for await (const chunk of await client.completions.create({ ...completion, stream: true })) {
      text += chunk.choices[0]?.text ?? '';
    }
    expect(text).toBe('tok0 tok1 tok2 ');
  });

  it('in Express after express.json(), under a mount path, other paths passed on to the app', async () => {
    const { handler } = await handlerOver();
    const app = express();
    app.use(express.json());
    app.use('/llm', handler.node);
    app.get('/llm/mine', (_req, res) => {
      res.json({ mine: true });
    });
    const url = await listen(app);
    const client = new OpenAI({ baseURL: `${url}/llm/v1`, apiKey: 'unused', maxRetries: 0 });
    const chat = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    expect(chat.choices[0]?.message.content).toBe('tok0 tok1 ');
    const bad = await client.completions.create({ ...completion, max_tokens: 'ten' as never }).catch((e) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await (await fetch(`${url}/llm/mine`)).json()).toEqual({ mine: true });
  });

  it('with basePath on a bare server: its routes under it; a path none of them is a 404 without next', async () => {
    const { handler: plain } = await handlerOver();
    expect(plain.node).toBeTypeOf('function');
    const { handler } = await handlerOver({ basePath: '/llm' });
    const url = await listen((req, res) => handler.node(req, res));
    const models = await fetch(`${url}/llm/v1/models`);
    expect(models.status).toBe(200);
    const none = await fetch(`${url}/llm/nothing`);
    expect(none.status).toBe(404);
    expect(await none.json()).toMatchObject({ error: { message: 'No route GET /nothing' } });
  });
});
