import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerJson } from '../../http/node-server.js';
import type { ProxyState } from '../pipeline/proxy-state.js';
import {
  answerFailure,
  answerInvalid,
  answerMethod,
  answerNotFound,
  pageOf,
  pageQuery,
  type StoredRouteCall,
  storedCall,
} from './agent-answers.js';
import { cancelRun, resumeRun } from './background-runs.js';

/**
 * The stored responses, served by the router itself, never by a worker: `GET
 * /v1/responses/{id}` (with `stream=true`, a background response's events again, after
 * `starting_after`), `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` (OpenAI's
 * list: `limit`, `order`, `after`) and `POST /v1/responses/{id}/cancel` (a background response
 * under way). Another owner's response is a 404 in the same words as one never stored.
 *
 * @internal
 */
export async function serveStoredResponse(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  call: StoredRouteCall,
): Promise<void> {
  const [id = '', action, ...more] = (call.rest ?? '').split('/');
  const method = req.method ?? 'GET';
  if (id === '' || more.length > 0 || (action !== undefined && action !== 'input_items' && action !== 'cancel')) {
    return answerInvalid(res, null, `No route ${method} ${call.path}`);
  }
  const allowed = action === undefined ? ['GET', 'DELETE'] : action === 'cancel' ? ['POST'] : ['GET'];
  if (!allowed.includes(method)) return answerMethod(res, method, allowed);
  const stored = await storedCall(proxy, req, res);
  if (stored === undefined) return;
  const { store, owner } = stored;
  try {
    if (action === 'cancel') return await cancelRun(proxy, stored, id, res);
    if (method === 'DELETE') {
      if (!(await store.deleteResponse(id, owner))) return answerNotFound(res, 'Response', id, 'response_id');
      return answerJson(res, 200, { id, object: 'response', deleted: true });
    }
    const query = new URL(req.url ?? '/', 'http://router').searchParams;
    if (action === undefined && query.get('stream') === 'true') {
      return await resumeRun(proxy, stored, id, query.get('starting_after'), res);
    }
    const record = await store.getResponse(id, owner);
    if (record === undefined) return answerNotFound(res, 'Response', id, 'response_id');
    if (action === undefined) return answerJson(res, 200, record.response);
    const page = pageQuery(req);
    if ('invalid' in page) return answerInvalid(res, page.invalid, page.message);
    return answerJson(res, 200, pageOf(record.input, page));
  } catch (error) {
    answerFailure(res, error);
  }
}
