import { EventEmitter } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  answerJson,
  drained,
  finished,
  headerValue,
  pathOf,
  RequestError,
  readBody,
} from '../../src/http/node-server.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** A server whose handler the test writes, and one raw request to it. */
async function exchange(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  body = '',
): Promise<{ status: number | undefined; text: string; headers: Record<string, unknown> }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = httpRequest({ port, host: '127.0.0.1', path: '/a/b?c=d', method: 'POST' }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode, text, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('the toolkit for Node http servers', () => {
  it('pathOf drops the query; headerValue takes the first value and treats empty as absent', () => {
    expect(pathOf({ url: '/v1/models?x=1' } as IncomingMessage)).toBe('/v1/models');
    expect(pathOf({ url: '/health' } as IncomingMessage)).toBe('/health');
    expect(pathOf({} as IncomingMessage)).toBe('/');
    expect(headerValue(['a', 'b'])).toBe('a');
    expect(headerValue('x')).toBe('x');
    expect(headerValue('')).toBeUndefined();
    expect(headerValue(undefined)).toBeUndefined();
  });

  it('readBody reads the whole body up to its limit, and refuses one byte more with a 413 RequestError', async () => {
    const results: unknown[] = [];
    const handler = (limit: number) => (req: IncomingMessage, res: ServerResponse) => {
      readBody(req, limit).then(
        (text) => {
          results.push(text);
          answerJson(res, 200, { ok: true });
        },
        (error: RequestError) => {
          results.push(error);
          answerJson(res, error.status, { error: error.code });
        },
      );
    };
    expect((await exchange(handler(5), '12345')).status).toBe(200);
    expect((await exchange(handler(5), '123456')).status).toBe(413);
    expect(results[0]).toBe('12345');
    expect(results[1]).toMatchObject({ name: 'RequestError', status: 413, code: 'DISAGG_BODY_TOO_LARGE' });
    expect(RequestError.is(results[1])).toBe(true);
  });

  it('answerJson writes once: nothing after headers were sent, nothing on a destroyed response', async () => {
    const answer = await exchange((_, res) => {
      answerJson(res, 201, { first: true });
      answerJson(res, 500, { second: true });
    });
    expect(answer).toMatchObject({ status: 201, text: '{"first":true}' });
    expect(answer.headers['content-length']).toBe('14');
  });

  it('drained says true on drain and false when the response closes first; finished resolves on either', async () => {
    const seen: unknown[] = [];
    await exchange((_, res) => {
      res.writeHead(200);
      const big = 'x'.repeat(4 * 1024 * 1024);
      const full = !res.write(big);
      (full ? drained(res) : Promise.resolve(true)).then(async (ok) => {
        seen.push(ok, res.listenerCount('drain'), res.listenerCount('close'));
        res.end();
        await finished(res);
        seen.push('finished');
        await finished(res); // already over: at once
        seen.push('again');
      });
    });
    expect(seen).toEqual([true, 0, expect.any(Number), 'finished', 'again']);
    const closed: unknown[] = [];
    await exchange((_, res) => {
      res.writeHead(200);
      res.write('x'.repeat(4 * 1024 * 1024));
      const waiting = drained(res);
      res.destroy();
      waiting.then((ok) => closed.push(ok));
    }).catch(() => {});
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toEqual([false]);
    // Already closed when asked (the client left between a check and the write): false at once.
    const late: unknown[] = [];
    await exchange((_, res) => {
      res.writeHead(200);
      res.once('close', () => {
        drained(res).then((ok) => late.push(ok, res.listenerCount('drain')));
      });
      res.destroy();
    }).catch(() => {});
    await new Promise((resolve) => setImmediate(resolve));
    expect(late).toEqual([false, 0]);
  });

  it('finished waits for finish or for close, whichever comes, and answers at once for a response already over', async () => {
    const response = (state: { writableFinished?: boolean; destroyed?: boolean } = {}) =>
      Object.assign(new EventEmitter(), {
        writableFinished: false,
        destroyed: false,
        ...state,
      }) as unknown as ServerResponse;
    const settled = (promise: Promise<void>) => {
      const seen = { done: false };
      promise.then(() => {
        seen.done = true;
      });
      return seen;
    };
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    for (const event of ['finish', 'close']) {
      const res = response();
      const seen = settled(finished(res));
      await turn();
      expect(seen.done).toBe(false);
      res.emit(event);
      await turn();
      expect(seen).toEqual({ done: true });
    }
    for (const state of [{ writableFinished: true }, { destroyed: true }]) {
      const seen = settled(finished(response(state)));
      await turn();
      expect(seen).toEqual({ done: true });
    }
  });

  it('readBody rejects with the error of the request stream and, past its limit, stops listening for data', async () => {
    const request = () => Object.assign(new EventEmitter(), { resume() {} }) as unknown as IncomingMessage;
    const broken = request();
    const reading = readBody(broken);
    const error = new Error('socket hang up');
    broken.emit('error', error);
    await expect(reading).rejects.toBe(error);

    const big = request();
    const refused = readBody(big, 4);
    big.emit('data', Buffer.from('12345'));
    await expect(refused).rejects.toMatchObject({ status: 413 });
    expect(big.listenerCount('data')).toBe(0);
  });
});
