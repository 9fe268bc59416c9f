import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AgentStore, JsonObject } from '../../agent-state/agent-store.js';
import { parseJson } from '../../http/json.js';
import { answerJson, RequestError, readBody } from '../../http/node-server.js';
import { errorAnswer } from '../pipeline/error-answers.js';
import type { ProxyState } from '../pipeline/proxy-state.js';
import { shortId } from './agent-errors.js';
import { ownerOf } from './owner.js';

// What the routes of stored objects share: the caller's store and owner, OpenAI's list pages
// and error shapes, the query's paging, a JSON body.

/** What a route of stored objects gets of its call: the path routed, a body already read, what the path's `*` stood for. */
export interface StoredRouteCall {
  readonly path: string;
  readonly body: string | undefined;
  readonly rest: string | undefined;
}

/** A route of stored objects answered: the store and whose the caller's objects are. */
export interface StoredCall {
  readonly store: AgentStore;
  readonly owner: string;
}

/**
 * The store and the caller's owner, or the 503 answered when the store cannot be reached
 * (undefined then).
 */
export async function storedCall(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<StoredCall | undefined> {
  try {
    return { store: await proxy.agents.store(), owner: ownerOf(proxy, req.headers) };
  } catch (error) {
    answerFailure(res, error);
    return undefined;
  }
}

/** A failure of a stored-object route, as the proxy answers every failure (a store down: 503). */
export function answerFailure(res: ServerResponse, error: unknown): void {
  const answer = errorAnswer(error);
  answerJson(res, answer.status, answer.body);
}

/** OpenAI's 404 for an object the caller does not have: the same words whether it exists for another or not at all. */
export function answerNotFound(res: ServerResponse, what: string, id: string, param: string): void {
  answerJson(res, 404, {
    error: { message: `${what} with id '${shortId(id)}' not found.`, type: 'invalid_request_error', param, code: null },
  });
}

/** A 400 in OpenAI's shape. */
export function answerInvalid(res: ServerResponse, param: string | null, message: string): void {
  answerJson(res, 400, { error: { message, type: 'invalid_request_error', param, code: null } });
}

/** A method the path does not take. */
export function answerMethod(res: ServerResponse, method: string, allowed: readonly string[]): void {
  res.setHeader('allow', allowed.join(', '));
  const answer = errorAnswer(new RequestError(405, `${method} is not allowed here: use ${allowed.join(' or ')}`));
  answerJson(res, answer.status, answer.body);
}

/** A list's page as a request's query asks for it (OpenAI's `limit` 1-100, 20 by default; `order` desc by default; `after`). */
export interface PageQuery {
  readonly limit: number;
  readonly order: 'asc' | 'desc';
  readonly after: string | undefined;
}

/** The paging of `req`'s query; a string naming the parameter at fault when it does not check. */
export function pageQuery(req: IncomingMessage): PageQuery | { invalid: string; message: string } {
  const query = new URL(req.url ?? '/', 'http://router').searchParams;
  const limitText = query.get('limit');
  const limit = limitText === null ? 20 : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
    return {
      invalid: 'limit',
      message: `limit must be a whole number from 1 to 100, got ${JSON.stringify(limitText)}`,
    };
  }
  const order = query.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') {
    return { invalid: 'order', message: `order must be asc or desc, got ${JSON.stringify(order)}` };
  }
  const after = query.get('after') ?? undefined;
  return { limit, order, after: after === '' ? undefined : after };
}

/** OpenAI's list object of a page of items. */
export function listPage(items: readonly JsonObject[], hasMore: boolean): JsonObject {
  const first = items[0]?.id;
  const last = items[items.length - 1]?.id;
  return {
    object: 'list',
    data: items,
    first_id: typeof first === 'string' ? first : null,
    last_id: typeof last === 'string' ? last : null,
    has_more: hasMore,
  };
}

/** A page of `items` (a response's input) by `query`, as a conversation's items are paged. */
export function pageOf(items: readonly JsonObject[], query: PageQuery): JsonObject {
  const ordered = query.order === 'asc' ? items : [...items].reverse();
  let start = 0;
  if (query.after !== undefined) {
    const at = ordered.findIndex((item) => item.id === query.after);
    start = at === -1 ? ordered.length : at + 1;
  }
  const page = ordered.slice(start, start + query.limit);
  return listPage(page, start + query.limit < ordered.length);
}

/** The JSON object of a request's body (an empty body is `{}`); a `RequestError` (400, 413) otherwise. */
export async function jsonBody(
  proxy: ProxyState,
  req: IncomingMessage,
  given: string | undefined,
): Promise<JsonObject> {
  const text = given ?? (await readBody(req, proxy.options.maxBodyBytes));
  if (text.trim() === '') return {};
  let body: unknown;
  try {
    body = parseJson(text);
  } catch {
    throw new RequestError(400, 'The request body is not JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RequestError(400, 'The request body must be a JSON object');
  }
  return body as JsonObject;
}
