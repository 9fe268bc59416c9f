import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { answerJson } from '../http/node-server.js';
import { request as callWorker } from '../http/undici-parts.js';
import { UpstreamError } from '../http/upstream-error.js';
import { joinUrl } from '../util/url.js';
import { clientAuthorization } from './bearer-auth.js';
import { errorAnswer } from './pipeline/error-answers.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import { REMEMBERED } from './pipeline/response-homes.js';

/**
 * `GET /v1/responses/{id}` (`cancel`: `POST /v1/responses/{id}/cancel`): passed to the decode
 * worker that served that answer, its answer relayed as it came (status, type, body; a
 * replayed stream too); a 404 in OpenAI's shape for an id this router did not serve for the
 * caller's tenant (another tenant's, or one it has forgotten), never a guess at another worker.
 *
 * @internal
 */
export async function serveStoredResponse(
  proxy: ProxyState,
  req: IncomingMessage,
  res: ServerResponse,
  id: string | undefined,
  action: '' | '/cancel',
): Promise<void> {
  const owner = proxy.tenants.tenantOf(req.headers).name;
  const worker = id === undefined ? undefined : proxy.responseHomes.homeOf(id, owner);
  if (worker === undefined || !proxy.pools.all().some((pool) => pool.decode.workers.includes(worker as never))) {
    return answerJson(res, 404, {
      error: {
        // The same words for another tenant's id as for one never served: nothing says it exists.
        message: `Response with id '${shortId(id ?? '')}' not found: this router did not serve it to you, or has forgotten it (it remembers the last ${REMEMBERED}), or its worker has left`,
        type: 'invalid_request_error',
        param: 'response_id',
        code: 404,
      },
    });
  }
  const query = (req.url ?? '').includes('?') ? (req.url ?? '').slice((req.url ?? '').indexOf('?')) : '';
  const url = joinUrl(worker.url, `/v1/responses/${encodeURIComponent(id as string)}${action}${query}`);
  try {
    const answer = await callWorker(url, {
      method: action === '' ? 'GET' : 'POST',
      headers: {
        ...(proxy.options.workerApiKey === undefined && clientAuthorization(req.headers) !== undefined
          ? { authorization: clientAuthorization(req.headers) as string }
          : proxy.workerHeaders),
      },
      dispatcher: proxy.dispatcher,
    });
    res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type'] ?? 'application/json') });
    // No faster than the client reads (a replayed stream may be long).
    await pipeline(answer.body, res);
  } catch (error) {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const answer = errorAnswer(UpstreamError.fromFailure(worker.url, error), 'decode', (text) => proxy.redact(text));
    answerJson(res, answer.status, answer.body);
  }
}

/** An id as an answer repeats it: a path's id may be as long as a request line. */
function shortId(id: string): string {
  return id.length > 80 ? `${id.slice(0, 77)}...` : id;
}
