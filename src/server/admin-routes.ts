import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseJson } from '../http/json.js';
import { answerJson, decodePathPart, RequestError, readBody } from '../http/node-server.js';
import { describeValue } from '../util/describe-value.js';
import { errorAnswer } from './error-answers.js';
import { MembershipError, type Role } from './membership.js';
import type { ProxyState } from './proxy-state.js';
import { checkWorker } from './settings/workers.js';

/** Where the admin API lives. */
export const ADMIN_PREFIX = '/admin/workers';

/**
 * The admin API, for operators changing the pools without a restart (the caller has checked
 * the admin key):
 * - `GET /admin/workers`: both pools, each worker with its name, URL, state (`ready`, `down`,
 *   `draining`), requests in flight and who added it;
 * - `POST /admin/workers` with `{"role": "prefill"|"decode", "url": ..., "name"?: ...}` (and for
 *   SGLang `bootstrapPort`, `bootstrapHost`, `dpRank`, `dpSize`; `kvEvents`, `kvEventsReplay`:
 *   where it publishes its KV events, followed at once): adds it, probes it once,
 *   answers 201 with it (in rotation if it answered the probe);
 * - `POST /admin/workers/{name}/drain`: no new requests, those under way finish, then it
 *   leaves; answers 202;
 * - `DELETE /admin/workers/{name}`: out of the pool at once, requests under way still finish;
 *   answers 200 with its last state.
 * A worker may be named by its URL instead. Errors are OpenAI-style: 400 for a bad body, 404
 * for an unknown worker, 409 for one already there, 405 for a wrong method.
 *
 * @internal
 */
export async function handleAdmin(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  body?: string,
): Promise<void> {
  const method = req.method ?? 'GET';
  try {
    if (path === ADMIN_PREFIX) {
      if (method === 'GET' || method === 'HEAD') return answerJson(res, 200, proxy.membership.list());
      if (method === 'POST') return await add(proxy, req, res, body);
      return notAllowed(res, method, path, ['GET', 'HEAD', 'POST']);
    }
    const rest = path.slice(ADMIN_PREFIX.length + 1);
    const drain = rest.endsWith('/drain');
    const id = decodePathPart(drain ? rest.slice(0, -'/drain'.length) : rest);
    if (id === '') throw new RequestError(404, `No route ${method} ${path}`);
    const allowed = drain ? ['POST'] : ['DELETE'];
    if (!allowed.includes(method)) return notAllowed(res, method, path, allowed);
    const found = proxy.membership.find(id);
    if (found === undefined) {
      throw new MembershipError('DISAGG_WORKER_UNKNOWN', `No worker is named ${JSON.stringify(id)}`);
    }
    if (drain) return answerJson(res, 202, proxy.membership.drain(found.role, found.worker, 'admin'));
    return answerJson(res, 200, proxy.membership.remove(found.role, found.worker, 'admin'));
  } catch (error) {
    const answer = errorAnswer(error);
    answerJson(res, answer.status, answer.body);
  }
}

async function add(proxy: ProxyState, req: IncomingMessage, res: ServerResponse, given?: string): Promise<void> {
  const text = given ?? (await readBody(req, proxy.options.maxBodyBytes));
  let body: unknown;
  try {
    body = parseJson(text);
  } catch {
    throw new RequestError(400, 'The body is not JSON: send {"role": "prefill"|"decode", "url": "http://..."}');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RequestError(400, `The body must be an object with role and url, got ${describeValue(body)}`);
  }
  const { role, ...spec } = body as Record<string, unknown>;
  if (role !== 'prefill' && role !== 'decode') {
    throw new RequestError(400, `role must be 'prefill' or 'decode', got ${describeValue(role)}`);
  }
  const worker = checkWorker(role as Role, spec, proxy.options);
  const view = await proxy.membership.add(role as Role, worker, 'admin');
  answerJson(res, 201, view);
}

function notAllowed(res: ServerResponse, method: string, path: string, allowed: string[]): void {
  res.setHeader('allow', allowed.join(', '));
  const answer = errorAnswer(new RequestError(405, `${method} is not allowed on ${path}: use ${allowed.join(' or ')}`));
  answerJson(res, answer.status, answer.body);
}
