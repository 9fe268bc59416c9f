import type { IncomingMessage } from 'node:http';
import { nestsDeeperThan, parseJson } from '../../http/json.js';
import { RequestError, readBody } from '../../http/node-server.js';

/**
 * How deep a request body may nest. No OpenAI or engine field comes near it (a JSON schema for
 * structured output nests a few dozen levels at most); far deeper bodies would overflow the
 * stack of every recursive reader on the way to a worker.
 */
const MAX_BODY_DEPTH = 128;

export { DEFAULT_MAX_BODY_BYTES } from '../settings/defaults.js';

/** The request body as a JSON object, or a 400 / 413 {@link RequestError}. */
export async function readRequestBody(
  req: IncomingMessage,
  limit: number,
  given: string | undefined,
): Promise<Record<string, unknown>> {
  if (given !== undefined && Buffer.byteLength(given) > limit) {
    throw new RequestError(413, `The request body is larger than ${limit} bytes`);
  }
  const text = given ?? (await readBody(req, limit));
  return parseRequestBody(text);
}

/** A request body's text as a JSON object (exact 64-bit integers), or a 400 {@link RequestError}. */
export function parseRequestBody(text: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (error) {
    throw new RequestError(400, `The request body is not JSON: ${String(error)}`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new RequestError(400, 'The request body must be a JSON object');
  }
  if (nestsDeeperThan(parsed, MAX_BODY_DEPTH)) {
    throw new RequestError(400, `The request body nests objects and arrays more than ${MAX_BODY_DEPTH} deep`);
  }
  return parsed as Record<string, unknown>;
}

/**
 * The body of a request that a body parser has read already (its stream is over, the body in
 * `req.body`: Express's `json()`, `text()`, `raw()`), as text for the proxy's own parser;
 * undefined for a request whose body is still to be read.
 */
export function bodyReadAlready(req: IncomingMessage): string | undefined {
  const { body } = req as IncomingMessage & { body?: unknown };
  if (body === undefined || !req.readableEnded) return undefined;
  if (typeof body === 'string') return body;
  if (Buffer.isBuffer(body)) return body.toString('utf8');
  return JSON.stringify(body);
}

/**
 * A WHATWG request's body as a JSON object, read up to `limit` bytes: a 413
 * {@link RequestError} past it (the rest is not read), a 400 for a body that is not a JSON
 * object.
 */
export async function readFetchBody(request: Request, limit: number): Promise<Record<string, unknown>> {
  const declared = Number(request.headers.get('content-length') ?? Number.NaN);
  if (declared > limit) throw new RequestError(413, `The request body is larger than ${limit} bytes`);
  const reader = request.body?.getReader();
  if (reader === undefined) return parseRequestBody('');
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => {});
      throw new RequestError(413, `The request body is larger than ${limit} bytes`);
    }
    chunks.push(value);
  }
  return parseRequestBody(Buffer.concat(chunks).toString('utf8'));
}
