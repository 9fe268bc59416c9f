import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JsonObject, StoredConversation } from '../../agent-state/agent-store.js';
import { responsesInputProblem } from '../../endpoints/responses-items.js';
import { answerJson } from '../../http/node-server.js';
import type { ProxyState } from '../pipeline/proxy-state.js';
import {
  answerFailure,
  answerInvalid,
  answerMethod,
  answerNotFound,
  jsonBody,
  listPage,
  pageQuery,
  type StoredCall,
  type StoredRouteCall,
  storedCall,
} from './agent-answers.js';
import { newConversationId, withId } from './turn-items.js';

/** OpenAI's bounds: 20 items per create or add, 16 metadata pairs (keys 64 characters, values 512). */
const MAX_ITEMS_PER_CALL = 20;
const MAX_METADATA = 16;

/** A conversation as OpenAI's API answers it. */
function conversationObject(conversation: StoredConversation): JsonObject {
  return {
    id: conversation.id,
    object: 'conversation',
    created_at: conversation.createdAt,
    metadata: conversation.metadata,
  };
}

/** What a body's `items` or `metadata` hold, or the 400 they earn. */
type Checked<T> = { ok: T } | { param: string; message: string };

function checkItems(value: unknown, required: boolean): Checked<JsonObject[]> {
  if (value === undefined && !required) return { ok: [] };
  if (!Array.isArray(value) || (required && value.length === 0)) {
    return { param: 'items', message: 'items must be a list of input items' };
  }
  if (value.length > MAX_ITEMS_PER_CALL) {
    return { param: 'items', message: `items may hold at most ${MAX_ITEMS_PER_CALL} items, got ${value.length}` };
  }
  const problem = responsesInputProblem(value);
  if (problem !== undefined)
    return { param: `items[${problem.path[0]}]`, message: `items[${problem.path.join('][')}] ${problem.message}` };
  return { ok: (value as JsonObject[]).map(withId) };
}

function checkMetadata(value: unknown): Checked<Record<string, string>> {
  if (value === undefined || value === null) return { ok: {} };
  if (typeof value !== 'object' || Array.isArray(value))
    return { param: 'metadata', message: 'metadata must be an object of strings' };
  const entries = Object.entries(value);
  if (entries.length > MAX_METADATA)
    return { param: 'metadata', message: `metadata may hold at most ${MAX_METADATA} pairs` };
  for (const [key, text] of entries) {
    if (key.length > 64 || typeof text !== 'string' || text.length > 512) {
      return {
        param: 'metadata',
        message: 'metadata keys are strings of at most 64 characters, values of at most 512',
      };
    }
  }
  return { ok: value as Record<string, string> };
}

/**
 * The Conversations API, kept by the router: `POST /v1/conversations` (with up to 20 first
 * items and metadata); `GET`, `POST` (its metadata) and `DELETE /v1/conversations/{id}`; `GET`
 * and `POST /v1/conversations/{id}/items` (OpenAI's list: `limit`, `order`, `after`); `GET` and
 * `DELETE /v1/conversations/{id}/items/{item_id}`. Another owner's conversation is a 404 in the
 * same words as one that never existed. A Responses turn with `conversation` adds its items.
 *
 * @internal
 */
export async function serveConversations(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  call: StoredRouteCall,
): Promise<void> {
  const parts = call.rest === undefined ? [] : call.rest.split('/');
  const [id, items, itemId, ...more] = parts;
  const method = req.method ?? 'GET';
  if (more.length > 0 || (items !== undefined && items !== 'items') || id === '' || itemId === '') {
    return answerInvalid(res, null, `No route ${method} ${call.path}`);
  }
  const allowed =
    id === undefined
      ? ['POST']
      : items === undefined
        ? ['GET', 'POST', 'DELETE']
        : itemId === undefined
          ? ['GET', 'POST']
          : ['GET', 'DELETE'];
  if (!allowed.includes(method)) return answerMethod(res, method, allowed);
  const stored = await storedCall(proxy, req, res);
  if (stored === undefined) return;
  try {
    const body = method === 'POST' ? await jsonBody(proxy, req, call.body) : {};
    if (id === undefined) return await create(stored, body, res);
    if (items === undefined) return await one(stored, id, method, body, res);
    if (itemId === undefined) return await itemsOf(stored, id, method, body, req, res);
    return await oneItem(stored, id, itemId, method, res);
  } catch (error) {
    answerFailure(res, error);
  }
}

async function create({ store, owner }: StoredCall, body: JsonObject, res: ServerResponse): Promise<void> {
  const items = checkItems(body.items, false);
  if (!('ok' in items)) return answerInvalid(res, items.param, items.message);
  const metadata = checkMetadata(body.metadata);
  if (!('ok' in metadata)) return answerInvalid(res, metadata.param, metadata.message);
  const conversation = {
    id: newConversationId(),
    owner,
    createdAt: Math.floor(Date.now() / 1000),
    metadata: metadata.ok,
  };
  await store.createConversation(conversation, items.ok);
  answerJson(res, 200, conversationObject(conversation));
}

async function one(
  { store, owner }: StoredCall,
  id: string,
  method: string,
  body: JsonObject,
  res: ServerResponse,
): Promise<void> {
  if (method === 'DELETE') {
    if (!(await store.deleteConversation(id, owner))) return answerNotFound(res, 'Conversation', id, 'conversation_id');
    return answerJson(res, 200, { id, object: 'conversation.deleted', deleted: true });
  }
  if (method === 'POST') {
    const metadata = checkMetadata(body.metadata);
    if (!('ok' in metadata)) return answerInvalid(res, metadata.param, metadata.message);
    const updated = await store.updateConversation(id, owner, metadata.ok);
    if (updated === undefined) return answerNotFound(res, 'Conversation', id, 'conversation_id');
    return answerJson(res, 200, conversationObject(updated));
  }
  const conversation = await store.getConversation(id, owner);
  if (conversation === undefined) return answerNotFound(res, 'Conversation', id, 'conversation_id');
  answerJson(res, 200, conversationObject(conversation));
}

async function itemsOf(
  { store, owner }: StoredCall,
  id: string,
  method: string,
  body: JsonObject,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  if (method === 'POST') {
    const items = checkItems(body.items, true);
    if (!('ok' in items)) return answerInvalid(res, items.param, items.message);
    if (!(await store.appendItems(id, owner, items.ok)))
      return answerNotFound(res, 'Conversation', id, 'conversation_id');
    return answerJson(res, 200, listPage(items.ok, false));
  }
  const query = pageQuery(req);
  if ('invalid' in query) return answerInvalid(res, query.invalid, query.message);
  const page = await store.listItems(id, owner, query);
  if (page === undefined) return answerNotFound(res, 'Conversation', id, 'conversation_id');
  answerJson(res, 200, listPage(page.items, page.hasMore));
}

async function oneItem(
  { store, owner }: StoredCall,
  id: string,
  itemId: string,
  method: string,
  res: ServerResponse,
): Promise<void> {
  if (method === 'DELETE') {
    if (!(await store.deleteItem(id, owner, itemId))) return answerNotFound(res, 'Item', itemId, 'item_id');
    const conversation = await store.getConversation(id, owner);
    if (conversation === undefined) return answerNotFound(res, 'Conversation', id, 'conversation_id');
    return answerJson(res, 200, conversationObject(conversation));
  }
  const item = await store.getItem(id, owner, itemId);
  if (item === undefined) return answerNotFound(res, 'Item', itemId, 'item_id');
  answerJson(res, 200, item);
}
