import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { RequestError } from '../../src/http/node-server.js';
import { readRequestBody } from '../../src/server/request-body.js';

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
