import type { PreemptedError } from './admission.js';

/** A request's headers as the pipeline reads them: lower-case names, a value or its repeats. */
export type RequestHeaders = Readonly<Record<string, string | string[] | undefined>>;

/**
 * What the request pipeline needs of the transport a request came by, and nothing more: its
 * headers, its body, a signal that the client went away, and a way to put headers on the answer.
 * Each host adapts its own: the proxy's HTTP server (`HttpExchange`, a Node request and
 * response), the endpoint picker's ext_proc stream (the body Envoy buffered, the stream's end),
 * a library router's own. The stages never see more, so every host runs the same ones.
 *
 * @example
 * const exchange: Exchange = {
 *   headers: { authorization: 'Bearer key' },
 *   bodyText: async () => '{"model":"m","prompt":"Hi"}',
 *   gone: new Promise(() => {}),
 *   setHeader: () => {},
 * };
 */
export interface Exchange {
  readonly headers: RequestHeaders;
  /**
   * The body's text, read within `limit` bytes.
   *
   * @throws {RequestError} a 413 past `limit` (the rest is not read).
   */
  bodyText(limit: number): Promise<string>;
  /** Settles when the client is gone (a request waiting for admission leaves the queue then). */
  readonly gone: Promise<unknown>;
  /** Puts a header on the answer the client gets (its request id; a refusal's `Retry-After`). */
  setHeader(name: string, value: string): void;
  /**
   * Carries the request on without its client (a background response): from now on its answer
   * goes elsewhere, the client leaving stops nothing, and the host answers the client itself.
   * A host that cannot (the endpoint picker) has none.
   */
  detach?(): void;
  /**
   * Ends the request under way now, because admission gave its slot to one of higher priority
   * (`preempt`): both its legs end as when its client leaves, and the client reads the
   * preemption (a 503 with `Retry-After` and `x-disagg-preempted: true`, or its API's error
   * event once its stream has begun), never a truncated success. A host that cannot end its
   * requests itself (the endpoint picker) has none, and its requests are never preempted.
   * False when there was nothing left to end (its answer had been sent whole, its slot not yet
   * given back).
   */
  preempt?(error: PreemptedError): boolean;
}
