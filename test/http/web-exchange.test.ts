import { describe, expect, it } from 'vitest';
import { readBody } from '../../src/http/node-server.js';
import { webExchange } from '../../src/http/web-exchange.js';

const request = (init: RequestInit = {}, url = 'http://app.test/llm/v1/completions?x=1') => new Request(url, init);

describe('webExchange: a WHATWG Request as the Node request and response the handlers take', () => {
  it('the request: method, the path given with the query kept, lower-case headers, the body readable as a stream', async () => {
    const { req } = webExchange(
      request({
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Request-Id': 'r1' },
        body: '{"a":1}',
      }),
      '/v1/completions',
    );
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/v1/completions?x=1');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-request-id']).toBe('r1');
    expect(await readBody(req)).toBe('{"a":1}');
    const { req: get } = webExchange(request(), '/health');
    expect(await readBody(get)).toBe('');
  });

  it('the response: status and headers at writeHead (set ones, then given ones), the body as written', async () => {
    const { res, response } = webExchange(request(), '/x');
    res.setHeader('X-Disagg-Strategy', 'disaggregated-sequential');
    res.setHeader('x-removed', 'gone');
    res.removeHeader('X-Removed');
    res.setHeader('set-cookie', ['a=1', 'b=2']);
    expect(res.hasHeader('x-disagg-strategy')).toBe(true);
    expect(res.getHeader('X-DISAGG-STRATEGY')).toBe('disaggregated-sequential');
    expect(res.headersSent).toBe(false);
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': 7, 'x-unset': undefined });
    expect(res.headersSent).toBe(true);
    res.writeHead(500); // once only, as Node
    expect(res.statusCode).toBe(201);
    res.end('{"a":1}');
    const answer = await response;
    expect(answer.status).toBe(201);
    expect(answer.headers.get('content-type')).toBe('application/json');
    expect(answer.headers.get('x-disagg-strategy')).toBe('disaggregated-sequential');
    expect(answer.headers.get('x-removed')).toBeNull();
    expect(answer.headers.has('x-unset')).toBe(false);
    expect(answer.headers.getSetCookie()).toEqual(['a=1', 'b=2']);
    expect(await answer.text()).toBe('{"a":1}');
    expect(res.writableEnded && res.writableFinished).toBe(true);
  });

  it('a write before writeHead sends the head with the status set; end() without a chunk too', async () => {
    const first = webExchange(request(), '/x');
    first.res.statusCode = 202;
    first.res.write('a');
    first.res.end('b');
    const answer = await first.response;
    expect([answer.status, await answer.text()]).toEqual([202, 'ab']);
    const second = webExchange(request(), '/x');
    second.res.statusCode = 404;
    second.res.end();
    expect((await second.response).status).toBe(404);
  });

  it('bytes are written as they are; a write a waiting reader takes at once is accepted, and its next pull says nothing', async () => {
    const { res, response } = webExchange(request(), '/x');
    let drains = 0;
    res.on('drain', () => {
      drains += 1;
    });
    await Promise.resolve(); // the body's first pull, before anything was written: no drain
    await Promise.resolve();
    expect(drains).toBe(0);
    res.writeHead(200);
    const reader = ((await response).body as ReadableStream<Uint8Array>).getReader();
    const waiting = reader.read();
    expect(res.write(new Uint8Array([104, 105]))).toBe(true);
    expect(new TextDecoder().decode((await waiting).value)).toBe('hi');
    const next = reader.read();
    await Promise.resolve();
    await Promise.resolve();
    expect(drains).toBe(0);
    res.end();
    expect((await next).done).toBe(true);
  });

  it('HEAD, 204 and 304 have no body', async () => {
    const head = webExchange(request({ method: 'HEAD' }), '/health');
    head.res.writeHead(200, { 'content-type': 'application/json' });
    expect(head.res.write('{"status":"ok"}')).toBe(true);
    head.res.end();
    expect((await head.response).body).toBeNull();
    for (const status of [204, 304]) {
      const empty = webExchange(request(), '/x');
      empty.res.writeHead(status);
      empty.res.end();
      expect((await empty.response).body).toBeNull();
    }
  });

  it('backpressure: a write is refused while a chunk waits unpulled; the next pull emits drain', async () => {
    const { res, response } = webExchange(request(), '/x');
    res.writeHead(200);
    let drains = 0;
    res.on('drain', () => {
      drains += 1;
    });
    expect(res.write('one')).toBe(false); // one chunk ahead is the high-water mark
    const reader = ((await response).body as ReadableStream<Uint8Array>).getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('one');
    expect(drains).toBe(1);
    expect(res.write('two')).toBe(false);
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('two');
    expect(drains).toBe(2);
    // A pull with no refused write before it (the reader waits on an empty body) says nothing.
    const waiting = reader.read();
    await Promise.resolve();
    await Promise.resolve();
    expect(drains).toBe(2);
    res.end();
    expect((await waiting).done).toBe(true);
    expect(drains).toBe(2);
  });

  it('a reader that cancels the body is a client that left: close without finish, later writes refused', async () => {
    const { res, response } = webExchange(request(), '/x');
    const events: string[] = [];
    res.on('close', () => events.push('close'));
    res.on('finish', () => events.push('finish'));
    res.writeHead(200);
    await ((await response).body as ReadableStream<Uint8Array>).cancel();
    await Promise.resolve();
    expect(events).toEqual(['close']);
    expect(res.destroyed).toBe(true);
    expect(res.writableFinished).toBe(false);
    expect(res.write('late')).toBe(false);
    res.end('late');
    expect(events).toEqual(['close']);
  });

  it('clientLeft() (the request signal) likewise; after the answer finished it changes nothing', async () => {
    const left = webExchange(request(), '/x');
    const closes: number[] = [];
    left.res.on('close', () => closes.push(1));
    left.clientLeft();
    left.clientLeft();
    await Promise.resolve();
    expect(closes).toEqual([1]);
    expect(left.res.destroyed).toBe(true);
    const done = webExchange(request(), '/x');
    done.res.end('ok');
    done.clientLeft();
    expect(done.res.destroyed).toBe(false);
  });

  it('destroy() cuts the answer: its reader gets an error; close once, after the current turn', async () => {
    const { res, response } = webExchange(request(), '/x');
    const events: string[] = [];
    res.on('close', () => events.push('close'));
    res.writeHead(200);
    res.write('partial');
    res.destroy();
    res.destroy();
    expect(events).toEqual([]); // not synchronously, as Node
    await Promise.resolve();
    expect(events).toEqual(['close']);
    await expect((await response).text()).rejects.toThrow();
    const before = webExchange(request(), '/x');
    before.res.statusCode = 503;
    before.res.destroy();
    expect((await before.response).status).toBe(503);
  });

  it('end() emits finish at once and close once after it, even if the answer is destroyed afterwards', async () => {
    const { res, response } = webExchange(request(), '/x');
    const events: string[] = [];
    res.on('finish', () => events.push('finish'));
    res.on('close', () => events.push('close'));
    res.end('whole');
    expect(events).toEqual(['finish']);
    res.destroy();
    await Promise.resolve();
    await Promise.resolve();
    expect(events).toEqual(['finish', 'close']);
    expect(await (await response).text()).toBe('whole');
  });

  it('a client that left before the head still settles the response (its body errors), so nobody awaits it for ever', async () => {
    const { res, response, clientLeft } = webExchange(request(), '/x');
    clientLeft();
    const answer = await response;
    await expect(answer.text()).rejects.toThrow();
    expect(res.write('late')).toBe(false);
    const reading = webExchange(request(), '/x');
    reading.res.writeHead(200);
    reading.res.write('partial');
    const body = (await reading.response).body as ReadableStream<Uint8Array>;
    const reader = body.getReader();
    await reader.read();
    reading.clientLeft();
    await expect(reader.read()).rejects.toThrow();
  });
});
