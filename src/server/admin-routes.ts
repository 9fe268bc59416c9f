import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseJson } from '../http/json.js';
import { answerJson, RequestError, readBody } from '../http/node-server.js';
import { describeValue } from '../util/describe-value.js';
import { MembershipError, type Role } from './fleet/membership.js';
import { errorAnswer } from './pipeline/error-answers.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import type { RouteEntry } from './route-entry.js';
import { checkWorker } from './settings/workers.js';

/** Where the admin API lives. */
const ADMIN_PREFIX = '/admin/workers';

/**
 * The admin API, for operators changing the pools without a restart (behind the admin key; off,
 * a 404 like any unknown path, unless one is set), as entries of the proxy's route table:
 * - `GET /admin/workers`: both pools, each worker with its name, URL, state (`ready`, `down`,
 *   `draining`), requests in flight and who added it;
 * - `POST /admin/workers` with `{"role": "prefill"|"decode", "url": ..., "name"?: ...}` (and for
 *   SGLang `bootstrapPort`, `bootstrapHost`, `dpRank`, `dpSize`; `kvEvents`, `kvEventsReplay`:
 *   where it publishes its KV events, followed at once): adds it, probes it once,
 *   answers 201 with it (in rotation if it answered the probe);
 * - `GET /admin/workers/{name}`: that one worker as the list shows it (a worker out of
 *   rotation with its `reason` and `hint`: a failed probe, an open circuit, a drain);
 * - `POST /admin/workers/{name}/drain`: no new requests, those under way finish; answers 202.
 *   A worker of the start-up list or the admin API then leaves the pool for good (add it
 *   again to bring it back). A worker found by discovery (`source` `dns`, `kubernetes`) stays
 *   listed, `draining` then `drained` with a `reason`, out of rotation until undrained or
 *   until its discovery no longer finds it (its pod gone or replaced: a new pod joins as
 *   any found worker); discovery does not add it back meanwhile, and its name stays its own;
 * - `POST /admin/workers/{name}/undrain` (or `DELETE /admin/workers/{name}/drain`): a drained
 *   discovered worker is probed once and back in rotation if it answers (else when a probe
 *   finds it); answers 200 with it; 409 for a worker leaving for good;
 * - `DELETE /admin/workers/{name}`: out of the pool at once, requests under way still finish;
 *   answers 200 with its last state. A discovered worker comes back at its discovery's next
 *   round (drain it to keep it out).
 * A worker may be named by its URL instead. Errors are OpenAI-style: 400 for a bad body, 404
 * for an unknown worker, 409 for one already there, 405 for a wrong method (the table's).
 *
 * @internal
 */
export const ADMIN_ROUTES: readonly RouteEntry[] = [
  admin(ADMIN_PREFIX, ['GET', 'HEAD', 'POST'], (proxy, req, res, call) =>
    req.method === 'POST' ? add(proxy, req, res, call.body) : answerJson(res, 200, proxy.membership.list()),
  ),
  // Before `/*`: a name followed by /drain is a drain, not a name.
  admin(`${ADMIN_PREFIX}/*/drain`, ['POST', 'DELETE'], async (proxy, req, res, call) => {
    const found = workerNamed(proxy, call.rest);
    if (req.method === 'DELETE') answerJson(res, 200, await proxy.membership.undrain(found.role, found.worker));
    else answerJson(res, 202, proxy.membership.drain(found.role, found.worker, 'admin'));
  }),
  admin(`${ADMIN_PREFIX}/*/undrain`, ['POST'], async (proxy, _req, res, call) => {
    const found = workerNamed(proxy, call.rest);
    answerJson(res, 200, await proxy.membership.undrain(found.role, found.worker));
  }),
  admin(`${ADMIN_PREFIX}/*`, ['GET', 'HEAD', 'DELETE'], (proxy, req, res, call) => {
    const found = workerNamed(proxy, call.rest);
    if (req.method === 'DELETE') answerJson(res, 200, proxy.membership.remove(found.role, found.worker, 'admin'));
    else answerJson(res, 200, proxy.membership.view(found.role, found.worker));
  }),
];

/** An admin route: behind the admin key, there only with one, its failures answered OpenAI-style. */
function admin(path: string, methods: readonly string[], handle: RouteEntry['handle']): RouteEntry {
  return {
    path,
    methods,
    label: 'admin',
    auth: 'admin',
    present: (options) => options.adminKey !== undefined,
    handle: async (proxy, req, res, call) => {
      try {
        await handle(proxy, req, res, call);
      } catch (error) {
        const answer = errorAnswer(error);
        answerJson(res, answer.status, answer.body);
      }
    },
  };
}

/** The worker a path names (by name or URL). @throws {MembershipError} `DISAGG_WORKER_UNKNOWN` for none. */
function workerNamed(proxy: ProxyState, id: string | undefined) {
  const found = id === undefined ? undefined : proxy.membership.find(id);
  if (found === undefined) {
    throw new MembershipError('DISAGG_WORKER_UNKNOWN', `No worker is named ${JSON.stringify(id)}`);
  }
  return found;
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
  const { role, model, ...spec } = body as Record<string, unknown>;
  if (role !== 'prefill' && role !== 'decode') {
    throw new RequestError(400, `role must be 'prefill' or 'decode', got ${describeValue(role)}`);
  }
  // With pools, `model` says which pool the worker joins (any of the pool's model names).
  const pool = model === undefined ? undefined : proxy.pools.namedFor(model);
  if (model !== undefined && pool === undefined) {
    const named = proxy.pools.named();
    throw new RequestError(
      400,
      `No pool serves the model ${describeValue(model)}${named.length === 0 ? '' : `: pools serve ${named.join(', ')}`}`,
    );
  }
  const worker = checkWorker(role as Role, spec, proxy.options);
  const view = await proxy.membership.add(role as Role, worker, 'admin', pool);
  answerJson(res, 201, view);
}
