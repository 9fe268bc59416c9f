import type { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { branded, DisaggError } from '../util/disagg-error.js';
import { stringifyJson } from './json.js';

const REQUEST_ERROR_CODES = {
  400: 'DISAGG_BAD_REQUEST',
  404: 'DISAGG_NOT_FOUND',
  405: 'DISAGG_METHOD_NOT_ALLOWED',
  413: 'DISAGG_BODY_TOO_LARGE',
} as const;

/**
 * A request the server refuses before doing anything with it: a body that is not what the
 * route takes (400, `DISAGG_BAD_REQUEST`), a route that does not exist (404,
 * `DISAGG_NOT_FOUND`), a method the route does not take (405, `DISAGG_METHOD_NOT_ALLOWED`), or
 * a body over the size limit (413, `DISAGG_BODY_TOO_LARGE`).
 */
export class RequestError extends DisaggError {
  static override readonly is = branded<RequestError>('RequestError');
  declare readonly code: (typeof REQUEST_ERROR_CODES)[keyof typeof REQUEST_ERROR_CODES];
  readonly status: keyof typeof REQUEST_ERROR_CODES;

  constructor(status: keyof typeof REQUEST_ERROR_CODES, message: string, options?: { cause?: unknown }) {
    super(REQUEST_ERROR_CODES[status], message, options);
    this.status = status;
  }
}

/**
 * One percent-encoded piece of a path, decoded (a worker or model name).
 *
 * @throws {RequestError} 400 for text that is not valid percent-encoding (`%ZZ`, a cut UTF-8
 *   sequence): the client's mistake, not the proxy's.
 */
export function decodePathPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch (error) {
    throw new RequestError(400, `The path holds ${JSON.stringify(part)}, which is not valid percent-encoding`, {
      cause: error,
    });
  }
}

/** The path of a request, without its query. */
export function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** The first value of a header, or undefined when it is absent or empty. */
export function headerValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  return first === undefined || first === '' ? undefined : first;
}

/**
 * The whole body of a request as text. Over `limit` bytes it rejects with a 413
 * {@link RequestError} and stops collecting; the caller answers with `Connection: close`, so
 * that the rest is not read (Node discards what arrives until the socket closes).
 */
export function readBody(req: IncomingMessage, limit = Number.POSITIVE_INFINITY): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        req.resume();
        chunks.length = 0;
        reject(new RequestError(413, `The request body is larger than ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Answers with a JSON body (exact 64-bit integers), unless an answer has already begun. */
export function answerJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = stringifyJson(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Resolves true once the client has read what was buffered (`drain` of `buffer`: the response
 * by default, its socket for bytes written to it directly), false when the response closed
 * first (a caller that gives up on a slow client destroys the response). One listener of each
 * kind per wait, removed when it ends.
 */
export function drained(res: ServerResponse, buffer: EventEmitter = res): Promise<boolean> {
  // Closed already (the client left between a check and the write): no event will come.
  if (res.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      buffer.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    buffer.on('drain', onDrain);
    res.on('close', onClose);
  });
}

/** Resolves once the response has been sent or its connection closed. */
export function finished(res: ServerResponse): Promise<void> {
  if (res.writableFinished || res.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    res.once('finish', () => resolve());
    res.once('close', () => resolve());
  });
}
