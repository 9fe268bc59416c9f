import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { answerJson } from '../http/node-server.js';
import { request as callWorker } from '../http/undici-parts.js';
import { UpstreamError } from '../http/upstream-error.js';
import { joinUrl } from '../util/url.js';
import { clientAuthorization } from './bearer-auth.js';
import { errorAnswer } from './error-answers.js';
import type { ProxyState } from './proxy-state.js';

/** How many answers' decode workers are remembered: the last 65,536. */
const REMEMBERED = 65_536;

/**
 * What the remembered ids and owners may hold in all, counted as UTF-16 (two bytes a
 * character) with {@link ENTRY_COST} per entry: 16 MiB. Ordinary ids (vLLM's are 37
 * characters) fill the entries first; the bytes bound long ones a worker or a client chose.
 */
const REMEMBERED_BYTES = 16 * 1024 * 1024;

/** About what a `Map` entry and its record hold besides the two strings. */
const ENTRY_COST = 96;

/**
 * The longest answer id remembered: a worker's id past it (the router's own are 37
 * characters, a client's at most 64) is served, but its GET answers 404.
 */
const MAX_REMEMBERED_ID = 256;

/** A Responses id the router hands out when the client names none: as vLLM's, `resp_` and 128 random bits. */
export function newResponseId(): string {
  return `resp_${randomBytes(16).toString('hex')}`;
}

/** An answer the router knows: whose it is, and the decode worker holding it (none while it is served). */
interface Home<W> {
  readonly owner: string;
  worker: W | undefined;
}

/** Options of {@link ResponseHomes}: its bounds (the defaults above; smaller in tests). */
export interface ResponseHomesLimits {
  entries?: number | undefined;
  bytes?: number | undefined;
}

/**
 * The Responses answers this router handed out, by id: whose each is (the tenant that asked
 * for it) and which decode worker served it, where its `GET /v1/responses/{id}` and `cancel`
 * must go, since only that worker's store can hold it (vLLM's, with
 * `VLLM_ENABLE_RESPONSES_API_STORE`). An id is claimed before its request reaches a worker,
 * so no request may take one already known (another tenant's, or one under way), and only its
 * owner finds it again. Bounded in entries and in bytes, oldest forgotten first.
 *
 * @internal
 */
export class ResponseHomes<W> {
  readonly #homes = new Map<string, Home<W>>();
  readonly #entries: number;
  readonly #maxBytes: number;
  #bytes = 0;

  constructor(limits: ResponseHomesLimits = {}) {
    this.#entries = limits.entries ?? REMEMBERED;
    this.#maxBytes = limits.bytes ?? REMEMBERED_BYTES;
  }

  /** How many answers are known, and what their ids and owners hold (see {@link REMEMBERED_BYTES}). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#homes.size, bytes: this.#bytes };
  }

  /**
   * Claims `id` for a request of `owner` about to be served; false when the id is known
   * already (served, or under way), whoever's it is: a client may not take another's id, nor
   * point it at its own worker.
   */
  claim(id: string, owner: string): boolean {
    if (this.#homes.has(id) || id.length > MAX_REMEMBERED_ID) return false;
    this.#add(id, { owner, worker: undefined });
    return true;
  }

  /**
   * The request that claimed `claimed` is over: answered as `answerId` by `worker` (the
   * worker's own id, the claimed one unless the engine ignored it), or not answered at all
   * (both undefined), when the claim is let go.
   */
  settle(claimed: string, answerId: string | undefined, worker: W | undefined): void {
    const home = this.#homes.get(claimed);
    if (home === undefined || home.worker !== undefined) return;
    if (answerId === claimed && worker !== undefined) {
      home.worker = worker;
      return;
    }
    this.#delete(claimed, home);
    if (answerId !== undefined && worker !== undefined && this.claim(answerId, home.owner)) {
      (this.#homes.get(answerId) as Home<W>).worker = worker;
    }
  }

  /** The worker that served `id`, if it is remembered and `owner`'s; undefined for anyone else's. */
  homeOf(id: string, owner: string): W | undefined {
    const home = this.#homes.get(id);
    return home?.owner === owner ? home.worker : undefined;
  }

  #add(id: string, home: Home<W>): void {
    this.#homes.set(id, home);
    this.#bytes += costOf(id, home);
    // Oldest first (a Map keeps insertion order).
    for (const [oldest, its] of this.#homes) {
      if (this.#homes.size <= this.#entries && this.#bytes <= this.#maxBytes) break;
      this.#delete(oldest, its);
    }
  }

  #delete(id: string, home: Home<W>): void {
    this.#homes.delete(id);
    this.#bytes -= costOf(id, home);
  }
}

function costOf(id: string, home: Home<unknown>): number {
  return 2 * (id.length + home.owner.length) + ENTRY_COST;
}

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
