import type { IncomingMessage } from 'node:http';
import { nestsDeeperThan, parseJson } from '../http/json.js';
import { RequestError, readBody } from '../http/node-server.js';

/**
 * How deep a request body may nest. No OpenAI or engine field comes near it (a JSON schema for
 * structured output nests a few dozen levels at most); far deeper bodies would overflow the
 * stack of every recursive reader on the way to a worker.
 */
const MAX_BODY_DEPTH = 128;

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
