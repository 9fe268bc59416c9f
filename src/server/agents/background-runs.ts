import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { createParser } from 'eventsource-parser';
import type { AgentStore, JsonObject, StoredResponse } from '../../agent-state/agent-store.js';
import { BackgroundRun } from '../../agent-state/background-run.js';
import { parseJson, stringifyJson } from '../../http/json.js';
import { answerJson } from '../../http/node-server.js';
import type { Exchange } from '../pipeline/exchange.js';
import type { ProxyState } from '../pipeline/proxy-state.js';
import type { RequestContext } from '../pipeline/request-context.js';
import { answerFailure, answerInvalid, answerNotFound, type StoredCall } from './agent-answers.js';

/**
 * Where a background response's stream goes instead of a client: a stand-in for the Node
 * response the relay writes to, which reads the SSE it is given back into events for the run
 * (and an error answered before the stream began, as a failure). Destroying it is what
 * `cancel` does: the relay then stops the request, as for a client that left.
 *
 * @internal
 */
export class BackgroundSink extends Writable {
  statusCode = 200;
  headersSent = false;
  readonly socket = null;
  /** The body of an answer that was no stream (an error before the first byte). */
  #body = '';
  #streamed = false;
  readonly #parser;

  constructor(
    /** Each event of the stream, once read back; the run sets it when it starts. */
    public onEvent: (event: JsonObject) => void,
  ) {
    super({ decodeStrings: false });
    this.#parser = createParser({
      onEvent: (event) => {
        try {
          const json = parseJson(event.data);
          if (typeof json === 'object' && json !== null) this.onEvent(json as JsonObject);
        } catch {
          // Only the relay writes here, JSON events all; a torn one is dropped, not fatal.
        }
      },
    });
  }

  writeHead(status: number, headers?: Record<string, unknown>): this {
    this.statusCode = status;
    this.headersSent = true;
    this.#streamed = String(headers?.['content-type'] ?? '').startsWith('text/event-stream');
    return this;
  }

  setHeader(): this {
    return this;
  }

  /** The JSON an answer that was no stream carried (its error body), if any. */
  get answered(): unknown {
    if (this.#streamed || this.#body === '') return undefined;
    try {
      return parseJson(this.#body);
    } catch {
      return undefined;
    }
  }

  override _write(chunk: string | Buffer, _encoding: string, done: (error?: Error | null) => void): void {
    const text = typeof chunk === 'string' ? chunk : chunk.toString();
    if (this.#streamed) this.#parser.feed(text);
    else this.#body += text;
    done();
  }
}

/** An exchange a background turn runs on: the proxy's HTTP one, detached from its client. */
export interface DetachedExchange extends Exchange {
  /** The client's response, answered by the run (the queued object, or the events as they come). */
  readonly client: ServerResponse | undefined;
  /** Where the flow's answer goes: the run's sink. */
  readonly res: ServerResponse;
}

/** A request on a {@link DetachedExchange}. */
type DetachedRequest = RequestContext<DetachedExchange>;

/** What a background turn's stage settled: the client's wish to follow the stream, and the response as queued. */
export interface BackgroundTurn {
  readonly clientStreams: boolean;
  /** The stored record as queued (its `response` with `status: 'queued'`). */
  readonly queued: StoredResponse;
}

/**
 * A background response (`background: true`): stored as `queued`, answered at once (the
 * queued object; or, to a client that asked for `stream: true`, the events as they come, which
 * it may leave without stopping anything), then served through the flow as any turn, its
 * stream read by a {@link BackgroundSink}: `in_progress` stored as it starts, the end stored
 * with every event (for a stream resumed later), `failed` with the error when it fails,
 * `cancelled` when cancelled. Polled with `GET /v1/responses/{id}`.
 *
 * @internal
 */
export async function runInBackground<R extends DetachedRequest>(
  request: R,
  turn: BackgroundTurn,
  serve: (request: R) => Promise<void>,
): Promise<void> {
  const { proxy, exchange } = request;
  const client = exchange.client as ServerResponse;
  const sink = exchange.res as unknown as BackgroundSink;
  let record: StoredResponse = turn.queued;
  let cancelled = false;
  let store: AgentStore;
  try {
    store = await proxy.agents.store();
    await store.putResponse(record);
  } catch (error) {
    sink.destroy();
    return answerFailure(client, error);
  }
  // Each change stored in order: a late `in_progress` never overwrites the end.
  let writes: Promise<unknown> = Promise.resolve();
  const keep = (response: JsonObject, events?: JsonObject[]) => {
    record = { ...record, response, ...(events === undefined ? {} : { events }) };
    const kept = record;
    writes = writes
      .then(() => store.putResponse(kept))
      .catch((error: unknown) =>
        proxy.logger.warn({ err: error, responseId: kept.id }, 'Could not store a background response'),
      );
    return writes;
  };
  const run = new BackgroundRun(record.id, record.owner, () => {
    cancelled = true;
    sink.destroy();
  });
  proxy.agents.runs.set(run.id, run);
  sink.onEvent = (event) => {
    run.push(event);
    if (event.type === 'response.in_progress' && typeof event.response === 'object' && event.response !== null) {
      void keep({ ...record.response, ...(event.response as JsonObject), background: true, store: true });
    }
  };
  if (turn.clientStreams) follow(run, -1, client);
  else answerJson(client, 200, record.response);
  try {
    await serve(request);
  } finally {
    run.end();
    await keep(endOf(record.response, run.events, sink, cancelled), run.events);
    proxy.agents.runs.delete(run.id);
    run.markStored();
  }
}

/** The response as its run ended: the last one its events carried, failed with the error answered, or cancelled. */
function endOf(
  queued: JsonObject,
  events: readonly JsonObject[],
  sink: BackgroundSink,
  cancelled: boolean,
): JsonObject {
  let last: JsonObject = queued;
  for (const event of events) {
    if (typeof event.response === 'object' && event.response !== null) last = event.response as JsonObject;
  }
  const own = { background: true, store: true, previous_response_id: queued.previous_response_id ?? null };
  if (cancelled) return { ...queued, ...last, ...own, status: 'cancelled' };
  if (last.status === 'completed' || last.status === 'incomplete' || last.status === 'failed')
    return { ...queued, ...last, ...own };
  const answered = sink.answered as { error?: { message?: unknown; type?: unknown } } | undefined;
  const message = typeof answered?.error?.message === 'string' ? answered.error.message : 'The response failed';
  return { ...queued, ...last, ...own, status: 'failed', error: { code: 'server_error', message } };
}

/** Writes `run`'s events after `after` to `res` as SSE, then ends it; a client that leaves stops following, not the run. */
function follow(run: BackgroundRun, after: number, res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const stop = run.follow(
    after,
    (event) => {
      const name = typeof event.type === 'string' ? `event: ${event.type}\n` : '';
      res.write(`${name}data: ${stringifyJson(event)}\n\n`);
    },
    () => res.end(),
  );
  res.once('close', stop);
}

/**
 * `GET /v1/responses/{id}?stream=true&starting_after=N`: a background response's events after
 * sequence number N (all without it), then, while it runs on this replica, each as it comes; a
 * response that has ended replays what was stored with it.
 *
 * @internal
 */
export async function resumeRun(
  proxy: ProxyState,
  { store, owner }: StoredCall,
  id: string,
  startingAfter: string | null,
  res: ServerResponse,
): Promise<void> {
  const after = startingAfter === null ? -1 : Number(startingAfter);
  if (!Number.isInteger(after) || after < -1) {
    return answerInvalid(
      res,
      'starting_after',
      `starting_after must be a sequence number, got ${JSON.stringify(startingAfter)}`,
    );
  }
  const run = proxy.agents.runs.get(id);
  if (run !== undefined && run.owner === owner) return follow(run, after, res);
  const record = await store.getResponse(id, owner);
  if (record === undefined) return answerNotFound(res, 'Response', id, 'response_id');
  if (record.events === undefined) {
    if (record.response.background === true) return answerElsewhere(res);
    return answerInvalid(res, 'stream', 'Only a background response can be streamed again');
  }
  const done = new BackgroundRun(id, owner, () => {});
  for (const event of record.events) done.push(event);
  done.end();
  follow(done, after, res);
}

/**
 * `POST /v1/responses/{id}/cancel`: a background response under way here is stopped (both legs:
 * the relay stops the request as for a client that left, and the flow lets decode take the KV)
 * and answered as `cancelled`; one that has ended is answered as it ended; one that was not run
 * in the background is a 400, as OpenAI answers.
 *
 * @internal
 */
export async function cancelRun(
  proxy: ProxyState,
  { store, owner }: StoredCall,
  id: string,
  res: ServerResponse,
): Promise<void> {
  const run = proxy.agents.runs.get(id);
  if (run !== undefined && run.owner === owner) {
    run.stop();
    await run.stored;
  }
  const record = await store.getResponse(id, owner);
  if (record === undefined) return answerNotFound(res, 'Response', id, 'response_id');
  if (record.response.background !== true) {
    return answerInvalid(res, null, 'Only a response created with background: true can be cancelled');
  }
  const { status } = record.response;
  if (run === undefined && (status === 'queued' || status === 'in_progress')) return answerElsewhere(res);
  answerJson(res, 200, record.response);
}

/**
 * A 409 for a background response under way on another replica: only the replica that runs it
 * holds its live stream and can stop it (the store holds what it stored so far).
 */
function answerElsewhere(res: ServerResponse): void {
  answerJson(res, 409, {
    error: {
      message:
        'This background response is under way on another replica of the router: poll it until it ends, or send this to the replica that runs it',
      type: 'invalid_request_error',
      param: null,
      code: 'response_in_progress_elsewhere',
    },
  });
}
