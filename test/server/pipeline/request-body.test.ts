import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { RequestError } from '../../../src/http/node-server.js';
import { bodyReadAlready, readFetchBody, readRequestBody } from '../../../src/server/pipeline/request-body.js';

// A body a host has already read (fastify, a web handler) is given as text: the request
// stream is not touched, so an empty object stands in for it.
const unread = {} as IncomingMessage;

describe('readRequestBody: a body given as text', () => {
  it('may fill the limit in bytes exactly, not one byte more (bytes, not characters)', async () => {
    const body = '{"a":"é"}'; // 9 characters, 10 bytes
    await expect(readRequestBody(unread, 10, body)).resolves.toEqual({ a: 'é' });
    const refused = await readRequestBody(unread, 9, body).catch((error: unknown) => error);
    expect(RequestError.is(refused)).toBe(true);
    expect(refused).toMatchObject({ status: 413, message: 'The request body is larger than 9 bytes' });
  });

  it('is refused with a 400 when it is not JSON, or not a JSON object', async () => {
    await expect(readRequestBody(unread, 100, '{"a":')).rejects.toMatchObject({ status: 400 });
    await expect(readRequestBody(unread, 100, '[1]')).rejects.toMatchObject({
      status: 400,
      message: 'The request body must be a JSON object',
    });
  });
});

describe('readFetchBody: a WHATWG request, read within the limit', () => {
  const post = (
    body: NonNullable<ConstructorParameters<typeof Request>[1]>['body'],
    headers: Record<string, string> = {},
  ) => new Request('http://router/v1/completions', { method: 'POST', body, headers, duplex: 'half' } as RequestInit);

  it('may fill the limit exactly; one byte more is a 413 naming it, whether declared or streamed', async () => {
    const text = JSON.stringify({ prompt: 'é' }); // 16 bytes, 15 characters
    const bytes = Buffer.byteLength(text);
    expect(await readFetchBody(post(text), bytes)).toEqual({ prompt: 'é' });
    const declared = await readFetchBody(post(text), bytes - 1).catch((error: unknown) => error);
    expect(declared).toMatchObject({ status: 413, message: `The request body is larger than ${bytes - 1} bytes` });
    // No length declared: counted as it streams.
    const streamed = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(text.slice(0, 8)));
        controller.enqueue(new TextEncoder().encode(text.slice(8)));
        controller.close();
      },
    });
    const over = await readFetchBody(post(streamed), bytes - 1).catch((error: unknown) => error);
    expect(RequestError.is(over) && over.status).toBe(413);
    expect((over as Error).message).toBe(`The request body is larger than ${bytes - 1} bytes`);
  });

  it('a request without a body is the 400 of an empty one, not a crash', async () => {
    const none = await readFetchBody(post(null), 100).catch((caught: unknown) => caught);
    const empty = await readFetchBody(post(''), 100).catch((caught: unknown) => caught);
    expect(none).toMatchObject({ status: 400, message: (empty as Error).message });
  });

  it('a declared length past the limit is refused before a byte is read; one at the limit is read', async () => {
    const text = '{"prompt":"x"}';
    const untouched = () =>
      new ReadableStream<Uint8Array>({
        pull() {
          throw new Error('read although the declared length was past the limit');
        },
      });
    const refused = await readFetchBody(post(untouched(), { 'content-length': '15' }), 14).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 413, message: 'The request body is larger than 14 bytes' });
    expect(await readFetchBody(post(text, { 'content-length': String(text.length) }), text.length)).toEqual({
      prompt: 'x',
    });
  });
});

describe('bodyReadAlready: what a body parser left in req.body', () => {
  const req = (body: unknown, ended: boolean) => ({ body, readableEnded: ended }) as unknown as IncomingMessage;

  it('text, a Buffer or parsed JSON once the stream is over; nothing while it is still to be read', () => {
    expect(bodyReadAlready(req('{"a":1}', true))).toBe('{"a":1}');
    expect(bodyReadAlready(req(Buffer.from('{"b":2}'), true))).toBe('{"b":2}');
    expect(bodyReadAlready(req({ c: 3 }, true))).toBe('{"c":3}');
    expect(bodyReadAlready(req('{"a":1}', false))).toBeUndefined();
    expect(bodyReadAlready(req(undefined, true))).toBeUndefined();
  });
});
