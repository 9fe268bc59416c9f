import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Endpoint } from '../endpoints/endpoint.js';
import { RequestError, readBody } from '../http/node-server.js';
import { BackgroundSink } from './agents/background-runs.js';
import { PROXY_ENDPOINT_STAGES } from './endpoint-stages.js';
import type { PreemptedError } from './pipeline/admission.js';
import { answerApiError } from './pipeline/api-errors.js';
import type { Exchange, RequestHeaders } from './pipeline/exchange.js';
import type { InFlightRequest } from './pipeline/in-flight.js';
import { pipelineStages } from './pipeline/pipeline.js';
import type { ProxyState } from './pipeline/proxy-state.js';
import { RequestContext } from './pipeline/request-context.js';
import { enterStages } from './pipeline/stage.js';
import { trackingStage } from './tracking-stage.js';

/** The header that tells a client its request was preempted (SGLang Model Gateway's word for it). */
export const PREEMPTED_HEADER = 'x-disagg-preempted';

/**
 * A request that came to the proxy's HTTP server, as the pipeline sees it: a Node request and
 * its response. Its body is read once, within the limit the parse stage gives (or taken as a
 * framework read it already), the answer's headers go straight on the response, and the client
 * is gone when the response closes.
 *
 * @internal
 */
export class HttpExchange implements Exchange {
  /** The request's shutdown entry, once the tracking stage put it in flight. */
  entry: InFlightRequest | undefined;
  /** The client's response, once the request was detached from it (a background response). */
  client: ServerResponse | undefined;
  /** Why the request was preempted, once it was (see {@link HttpExchange.preempt}). */
  preempted: PreemptedError | undefined;
  #gone: Promise<unknown> | undefined;

  constructor(
    readonly req: IncomingMessage,
    /** Where the answer goes: the client's response, or a background run's sink once detached. */
    public res: ServerResponse,
    /** The body's text when the host read it already (a framework that parses bodies). */
    readonly given?: string | undefined,
  ) {}

  get headers(): RequestHeaders {
    return this.req.headers;
  }

  async bodyText(limit: number): Promise<string> {
    if (this.given === undefined) return readBody(this.req, limit);
    if (Buffer.byteLength(this.given) > limit) {
      throw new RequestError(413, `The request body is larger than ${limit} bytes`);
    }
    return this.given;
  }

  get gone(): Promise<unknown> {
    this.#gone ??= new Promise((resolve) => this.res.once('close', resolve));
    return this.#gone;
  }

  setHeader(name: string, value: string): void {
    const res = this.client ?? this.res;
    if (!res.headersSent) res.setHeader(name, value);
  }

  /**
   * Ends the request as a shutdown past its grace period does, with the preemption's error: its
   * context stops (the flow ends decode once it took the KV and lets prefill's handoff be taken,
   * as for a client that leaves), and the client gets the 503 or, once streaming, its API's
   * error event. Before the tracking stage made its entry, that stage refuses it instead.
   */
  preempt(error: PreemptedError): boolean {
    // Answered whole already (its slot is given back once its hooks run): nothing to end.
    if (this.preempted !== undefined || this.res.writableEnded) return false;
    this.preempted = error;
    this.setHeader('retry-after', String(error.retryAfterS));
    this.setHeader(PREEMPTED_HEADER, 'true');
    this.entry?.shutdown(error);
    return true;
  }

  detach(): void {
    if (this.client !== undefined) return;
    this.client = this.res;
    this.res = new BackgroundSink(() => {}) as unknown as ServerResponse;
  }
}

/** A request of the proxy's, its stages run over an HTTP exchange. */
export type HttpRequest = RequestContext<HttpExchange>;

/**
 * One API request to the proxy: the pipeline's stages (with the proxy's tracking), then
 * `serve`; a refusal answered in the API's error shape (a 413's connection closed: the rest of
 * its body is not read). Once it is over, every stage's `after` hook, last first.
 *
 * @internal
 */
export async function serveEndpoint(
  proxy: ProxyState,
  endpoint: Endpoint,
  exchange: HttpExchange,
  serve: (request: HttpRequest) => Promise<void>,
): Promise<void> {
  const request = new RequestContext(proxy, endpoint, exchange);
  const stages = pipelineStages(endpoint, 'proxy', {
    added: proxy.stages,
    own: [trackingStage],
    endpoints: PROXY_ENDPOINT_STAGES,
  });
  const entered = await enterStages(request, stages);
  try {
    if (entered.refused === undefined) await serve(request);
    else {
      if (entered.refused.status === 413) exchange.setHeader('connection', 'close');
      // A background turn refused before it ran: its client hears it, not the run's sink.
      answerApiError(exchange.client ?? exchange.res, endpoint, entered.refused);
    }
  } finally {
    entered.done();
  }
}
