import { multimodalPart, tokenizedAs } from '../endpoints/tokenization.js';
import { DeadlineError, pause, startTimer } from '../flow/deadlines.js';
import { UnsupportedRouteError } from '../flow/request-shaping.js';
import { parseJson, stringifyJson } from '../http/json.js';
import { answerJson } from '../http/node-server.js';
import { request as callWorker } from '../http/undici-parts.js';
import { UpstreamError } from '../http/upstream-error.js';
import type { CompletionUsage } from '../protocol/llm-engine-output.js';
import type { Lease } from '../routing/worker-pool.js';
import type { Controller } from '../runtime/controller.js';
import { joinUrl } from '../util/url.js';
import { clientAuthorization } from './bearer-auth.js';
import { retryDelay } from './fleet/failure-rules.js';
import type { ModelPool } from './fleet/pool-set.js';
import type { HttpRequest } from './http-exchange.js';
import { answerApiError } from './pipeline/api-errors.js';
import { decide } from './pipeline/decide.js';
import { errorToResponse } from './pipeline/error-answers.js';
import type { RequestEvents } from './pipeline/request-events.js';
import { STRATEGY_HEADER } from './pipeline/request-log.js';
import type { ProxyDecodeWorker } from './settings/worker-entries.js';

/** What a worker answered a passthrough: its status, content type and body, as it sent them. */
interface WorkerAnswer {
  status: number;
  contentType: string;
  text: string;
}

/**
 * One request of a passthrough endpoint (`/v1/embeddings`, `/v1/rerank`, `/v1/score`, Anthropic's
 * `/v1/messages/count_tokens` where the router has no tokenizer to count with) once its
 * stages let it on (open, body, admission, tracking): sent to a decode worker the pool's
 * policy chooses (a lease, released by the outcome), with the request id, the worker key or
 * the client's `Authorization`, and the trace context. What the worker answers reaches the
 * client unchanged, a 4xx included (the worker's words are the API's own error); a 5xx or a
 * failure to reach it is the worker's failure, charged to its health, retried on another
 * worker before anything was sent (`--max-retries`, the same rules as generation), and
 * answered in the API's error shape without the worker's address. Bounded by decode's
 * first-token budget (the answer is its first output) and the request's total.
 *
 * @internal
 */
export async function servePassthrough(request: HttpRequest): Promise<void> {
  const { proxy } = request;
  const { res } = request.exchange;
  const here = ANSWERED_HERE[request.endpoint.name];
  if (here !== undefined && (await here(request))) return;
  const events = request.events as RequestEvents;
  const context = request.context as Controller;
  const begun = performance.now();
  const emit = (event: Record<string, unknown> & { type: 'routed' | 'finished' }) =>
    events.onEvent({
      requestId: request.requestId,
      elapsedMs: performance.now() - begun,
      late: false,
      ...event,
    } as Parameters<RequestEvents['onEvent']>[0]);
  const avoid: ProxyDecodeWorker[] = [];
  for (let attempt = 0; ; attempt++) {
    let lease: Lease<ProxyDecodeWorker>;
    try {
      lease = decide(request, { decode: avoid }, attempt).decode as Lease<ProxyDecodeWorker>;
    } catch (error) {
      return fail(request, error, undefined);
    }
    const worker = lease.worker;
    if (attempt === 0) {
      emit({ type: 'routed', strategy: 'aggregated', reason: 'passthrough', decodeWorker: worker });
      res.setHeader('x-disagg-strategy', STRATEGY_HEADER.aggregated);
    }
    if (!res.headersSent) res.setHeader('x-disagg-decode-worker', proxy.nameOf(worker));
    let answer: WorkerAnswer;
    try {
      answer = await call(request, worker, context);
    } catch (error) {
      lease.release('failure');
      const delayMs = context.isStopped() ? undefined : retryDelay(proxy.options.retry, error, events.retries);
      if (delayMs !== undefined) {
        events.retries++;
        avoid.push(worker);
        // Charged, counted and logged as any retry before the first byte (request-events).
        emit({ type: 'prefillRetried', attempt, error, delayMs, leg: 'decode', decodeWorker: worker } as never);
        await pause(delayMs).done;
        continue;
      }
      return fail(request, error, worker, emit);
    }
    const failed = answer.status >= 400 ? UpstreamError.fromStatus(worker.url, answer.status, answer.text) : undefined;
    lease.release(answer.status >= 500 ? 'failure' : 'success');
    emit({
      type: 'finished',
      outcome: failed === undefined ? 'success' : 'error',
      leg: 'decode',
      ...(failed === undefined ? {} : { error: failed }),
      decodeWorker: worker,
    });
    if (answer.status >= 500) {
      request.failure = failed;
      return answerApiError(res, request.endpoint, errorToResponse(failed, { redact: (text) => proxy.redact(text) }));
    }
    if (failed !== undefined) request.failure = failed;
    else request.usage = usageOf(answer.text, request.usageNeeded);
    res.writeHead(answer.status, { 'content-type': answer.contentType });
    res.end(answer.text);
    return;
  }
}

/** An answer of the router's own, no worker called. */
function answerHere(request: HttpRequest, body: unknown): true {
  request.exchange.res.setHeader('x-disagg-strategy', 'router');
  answerJson(request.exchange.res, 200, body);
  return true;
}

/**
 * The passthrough endpoints the router answers itself where its tokenizer can (`--tokenizer`),
 * each resolving true once answered; false sends the request on to a decode worker (no
 * tokenizer, what it cannot answer, or a tokenizer that failed: logged).
 */
const ANSWERED_HERE: Readonly<Partial<Record<string, (request: HttpRequest) => Promise<boolean>>>> = {
  // Anthropic's count, as vLLM counts it: the body rendered through the chat template.
  count_tokens: async (request) => {
    // Counted once: a tenant's token limit may have tokenized it already.
    const ids = await request.promptTokenIds();
    return ids !== undefined && answerHere(request, { input_tokens: ids.length });
  },
  // vLLM's /tokenize: a prompt with special tokens, messages through the template.
  tokenize: async (request) => {
    const { proxy, body } = request;
    const tokenizer = proxy.tokenizer;
    // Token strings need the vocabulary's pieces, which a worker gives.
    if (tokenizer === undefined || body.return_token_strs === true) return false;
    const other = multimodalPart(body);
    if (other !== undefined) {
      // As Dynamo answers it: a 501, never a count that leaves the image out.
      const error = new UnsupportedRouteError(
        request.endpoint.path,
        `/tokenize of a message part of type ${other}: the router's tokenizer counts text only, and an undercount would be worse than no answer`,
      );
      request.failure = error;
      answerApiError(request.exchange.res, request.endpoint, errorToResponse(error));
      return true;
    }
    const ids = await tolerant(proxy, () => tokenizer.tokenize(body, tokenizedAs(body)));
    if (ids === undefined) return false;
    const maxModelLen = proxy.models.maxModelLen(body.model);
    return answerHere(request, {
      count: ids.length,
      max_model_len: maxModelLen ?? null,
      tokens: ids,
      token_strs: null,
    });
  },
  detokenize: async (request) => {
    const { proxy, body } = request;
    const tokenizer = proxy.tokenizer;
    if (tokenizer === undefined) return false;
    const text = await tolerant(proxy, () => tokenizer.detokenize(body.tokens as number[]));
    return text !== undefined && answerHere(request, { prompt: text });
  },
};

/** What the tokenizer answers, or undefined (logged) when it fails: a worker answers then. */
async function tolerant<T>(proxy: HttpRequest['proxy'], ask: () => Promise<T>): Promise<T | undefined> {
  try {
    return await ask();
  } catch (error) {
    proxy.logger.warn({ err: error }, "The router's tokenizer failed; a worker answers instead");
    return undefined;
  }
}

/** The failure of a request no worker answered: charged (by the events), answered in the API's shape. */
function fail(
  request: HttpRequest,
  error: unknown,
  worker: ProxyDecodeWorker | undefined,
  emit?: (event: Record<string, unknown> & { type: 'finished' }) => void,
): void {
  const { proxy } = request;
  const { res } = request.exchange;
  request.failure = error;
  emit?.({
    type: 'finished',
    outcome: request.context?.isStopped() ? 'cancelled' : 'error',
    leg: 'decode',
    error,
    decodeWorker: worker,
  });
  if (res.headersSent || res.destroyed) return;
  answerApiError(res, request.endpoint, errorToResponse(error, { redact: (text) => proxy.redact(text) }));
}

/**
 * One call to `worker`: the body as the client sent it (exact integers), its answer read
 * whole. Rejects with an `UpstreamError` when the worker cannot be reached or its answer
 * breaks off, a `DeadlineError` past the budget, or the client's abort.
 */
async function call(request: HttpRequest, worker: ProxyDecodeWorker, context: Controller): Promise<WorkerAnswer> {
  const { proxy, endpoint } = request;
  const { req } = request.exchange;
  const url = joinUrl(worker.url, endpoint.path);
  const { decodeFirstTokenMs, totalMs } = { ...proxy.options.deadlines, ...(request.pool as ModelPool).deadlines };
  const budget = Math.min(decodeFirstTokenMs ?? Number.POSITIVE_INFINITY, totalMs ?? Number.POSITIVE_INFINITY);
  const abort = new AbortController();
  let late: DeadlineError | undefined;
  const cancelTimer = startTimer(Number.isFinite(budget) ? budget : undefined, () => {
    late = new DeadlineError(budget === totalMs ? 'total' : 'decodeFirstToken', budget, 'decode');
    abort.abort(late);
  });
  // The client's key goes on unless a worker key replaces it, as for generation.
  const authorization =
    proxy.options.workerApiKey === undefined && clientAuthorization(req.headers) !== undefined
      ? { authorization: clientAuthorization(req.headers) as string }
      : proxy.workerHeaders;
  try {
    const answer = await callWorker(url, {
      method: 'POST',
      headers: {
        ...authorization,
        ...(request.trace?.headersFor('decode', worker) ?? {}),
        'content-type': 'application/json',
        accept: 'application/json',
        'x-request-id': request.requestId,
      },
      body: stringifyJson(request.body),
      dispatcher: proxy.dispatcher,
      // The client's stop, or the budget's.
      signal: AbortSignal.any([context.signal, abort.signal]),
    });
    const text = await answer.body.text();
    return {
      status: answer.statusCode,
      contentType: String(answer.headers['content-type'] ?? 'application/json'),
      text,
    };
  } catch (error) {
    if (late !== undefined) throw late;
    if (context.isStopped()) throw error;
    throw UpstreamError.fromFailure(url, error);
  } finally {
    cancelTimer();
  }
}

/**
 * The usage a pooling answer reports (`prompt_tokens`, `total_tokens`; nothing generated), read
 * only where the request is metered (a tenant's token limit): parsing a large embedding costs
 * what the relay otherwise never pays.
 */
function usageOf(text: string, needed: boolean): CompletionUsage | undefined {
  if (!needed) return undefined;
  const usage = (parseJson(text) as { usage?: { prompt_tokens?: unknown; total_tokens?: unknown } } | undefined)?.usage;
  const prompt = typeof usage?.prompt_tokens === 'number' ? usage.prompt_tokens : undefined;
  if (prompt === undefined) return undefined;
  const total = typeof usage?.total_tokens === 'number' ? usage.total_tokens : prompt;
  return { prompt_tokens: prompt, completion_tokens: Math.max(0, total - prompt), total_tokens: total };
}
