import type { IncomingMessage, ServerResponse } from 'node:http';
import { request } from 'undici';
import { NoWorkerError } from '../flow/worker-pool.js';
import { answerJson, pathOf, RequestError } from '../http/node-server.js';
import { UpstreamError } from '../http/upstream-error.js';
import { joinUrl } from '../util/url.js';
import { handleCompletion } from './completion.js';
import { errorAnswer } from './error-answers.js';
import type { ProxyState } from './proxy-state.js';

/**
 * The proxy's routes: `POST /v1/completions` and `/v1/chat/completions`, `GET /v1/models`
 * (from a decode worker), `/health` (liveness), `/ready` (a prefill and a decode worker in
 * rotation, and not shutting down) and `/metrics` (Prometheus). Anything else is a 404 in the
 * OpenAI error shape.
 *
 * @internal
 */
export async function handleRequest(proxy: ProxyState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = pathOf(req);
  if (req.method === 'GET') {
    if (path === '/health') return answerJson(res, 200, { status: 'ok' });
    if (path === '/ready') return ready(proxy, res);
    if (path === '/metrics') return metrics(proxy, res);
    if (path === '/v1/models') return models(proxy, res);
  }
  if (req.method === 'POST' && path === '/v1/completions') return handleCompletion(proxy, req, res, 'completions');
  if (req.method === 'POST' && path === '/v1/chat/completions') return handleCompletion(proxy, req, res, 'chat');
  const answer = errorAnswer(new RequestError(404, `No route ${req.method} ${path}`));
  answerJson(res, answer.status, answer.body);
}

function ready(proxy: ProxyState, res: ServerResponse): void {
  const prefill = proxy.prefillWorkers.available.length;
  const decode = proxy.decodeWorkers.available.length;
  const isReady = prefill > 0 && decode > 0 && !proxy.closing;
  answerJson(res, isReady ? 200 : 503, { ready: isReady, prefill_workers: prefill, decode_workers: decode });
}

async function metrics(proxy: ProxyState, res: ServerResponse): Promise<void> {
  const { registry } = proxy.metrics;
  const text = await registry.metrics();
  res.writeHead(200, { 'content-type': registry.contentType });
  res.end(text);
}

/** The model list of a decode worker in rotation, passed through as it answered. */
async function models(proxy: ProxyState, res: ServerResponse): Promise<void> {
  const worker = proxy.decodeWorkers.available[0];
  if (worker === undefined) {
    const answer = errorAnswer(new NoWorkerError(proxy.decodeWorkers.workers.length));
    return answerJson(res, answer.status, answer.body);
  }
  try {
    const { dispatcher } = proxy.options;
    const answer = await request(joinUrl(worker.url, '/v1/models'), dispatcher === undefined ? {} : { dispatcher });
    const text = await answer.body.text();
    res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
    res.end(text);
  } catch (error) {
    const answer = errorAnswer(UpstreamError.fromFailure(worker.url, error));
    answerJson(res, answer.status, answer.body);
  }
}
