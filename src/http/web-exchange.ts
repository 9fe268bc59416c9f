import { EventEmitter } from 'node:events';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';

/**
 * A WHATWG `Request` seen as the Node request and response the proxy's handlers take, and the
 * `Response` they produce: its status and headers once the handler writes its head, its body
 * a `ReadableStream` fed by the handler's writes.
 *
 * Backpressure crosses over: a write is refused (`write()` returns false) while the body
 * holds `highWaterMark` chunks nobody has pulled, and `drain` is emitted when the reader pulls
 * again, so a reader that stops pulling stops the handler's reads from decode. A reader that
 * cancels the body is a client that left (`close` without `finish`), and so is a call of
 * `clientLeft` (the caller's view of the request's `signal`). `destroy()` errors the body
 * (the connection cut, as Node's would be).
 *
 * @internal
 */
export function webExchange(
  request: Request,
  path: string,
  options: { highWaterMark?: number } = {},
): { req: IncomingMessage; res: ServerResponse; response: Promise<Response>; clientLeft: () => void } {
  const url = new URL(request.url);
  const body =
    request.body === null
      ? Readable.from([])
      : Readable.fromWeb(request.body as unknown as WebReadableStream<Uint8Array>);
  const headers: IncomingHttpHeaders = {};
  for (const [name, value] of request.headers) headers[name] = value;
  const req = Object.assign(body, {
    method: request.method,
    url: `${path}${url.search}`,
    headers,
  }) as unknown as IncomingMessage;
  const reply = new WebReply(request.method === 'HEAD', options.highWaterMark ?? 1);
  return {
    req,
    res: reply as unknown as ServerResponse,
    response: reply.response,
    clientLeft: () => reply.clientLeft(),
  };
}

/**
 * A Node-shaped response writing into a WHATWG `Response` (see {@link webExchange}), for a
 * handler that answers without a Node request: `response` resolves once the head is written.
 *
 * @internal
 */
export function webResponse(options: { highWaterMark?: number } = {}): {
  res: ServerResponse;
  response: Promise<Response>;
  clientLeft: () => void;
} {
  const reply = new WebReply(false, options.highWaterMark ?? 1);
  return { res: reply as unknown as ServerResponse, response: reply.response, clientLeft: () => reply.clientLeft() };
}

/** The part of Node's `ServerResponse` the proxy's handlers use, writing into a `Response`. */
class WebReply extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableEnded = false;
  writableFinished = false;
  destroyed = false;
  readonly response: Promise<Response>;
  readonly #headers = new Map<string, string | string[]>();
  readonly #head: boolean;
  readonly #encoder = new TextEncoder();
  #resolve: (response: Response) => void = () => {};
  #controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  #refused = false;
  #closed = false;

  constructor(head: boolean, highWaterMark: number) {
    super();
    this.#head = head;
    this.response = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    this.#body = new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          this.#controller = controller;
        },
        pull: () => {
          if (!this.#refused) return;
          this.#refused = false;
          this.emit('drain');
        },
        cancel: () => this.clientLeft(),
      },
      new CountQueuingStrategy({ highWaterMark }),
    );
  }

  readonly #body: ReadableStream<Uint8Array>;

  setHeader(name: string, value: string | number | readonly string[]): this {
    this.#headers.set(name.toLowerCase(), Array.isArray(value) ? [...value] : String(value));
    return this;
  }

  getHeader(name: string): string | string[] | undefined {
    return this.#headers.get(name.toLowerCase());
  }

  hasHeader(name: string): boolean {
    return this.#headers.has(name.toLowerCase());
  }

  removeHeader(name: string): void {
    this.#headers.delete(name.toLowerCase());
  }

  writeHead(status: number, headers?: OutgoingHttpHeaders): this {
    if (this.headersSent) return this;
    this.statusCode = status;
    for (const [name, value] of Object.entries(headers ?? {})) {
      if (value !== undefined) this.setHeader(name, value as string | number | readonly string[]);
    }
    this.headersSent = true;
    const init = new Headers();
    for (const [name, value] of this.#headers) {
      for (const one of Array.isArray(value) ? value : [value]) init.append(name, one);
    }
    const bodiless = this.#head || status === 204 || status === 304;
    this.#resolve(new Response(bodiless ? null : this.#body, { status, headers: init }));
    return this;
  }

  write(chunk: string | Uint8Array): boolean {
    if (this.writableEnded || this.destroyed) return false;
    if (!this.headersSent) this.writeHead(this.statusCode);
    const controller = this.#controller as ReadableStreamDefaultController<Uint8Array>;
    if (!this.#head) controller.enqueue(typeof chunk === 'string' ? this.#encoder.encode(chunk) : chunk);
    const room = (controller.desiredSize ?? 0) > 0;
    if (!room) this.#refused = true;
    return room;
  }

  end(chunk?: string | Uint8Array): this {
    if (this.writableEnded || this.destroyed) return this;
    if (chunk !== undefined) this.write(chunk);
    else if (!this.headersSent) this.writeHead(this.statusCode);
    this.writableEnded = true;
    this.#controller?.close();
    this.writableFinished = true;
    this.emit('finish');
    this.#close();
    return this;
  }

  /** The connection is cut: the reader of the body gets an error. */
  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    if (!this.headersSent) this.writeHead(this.statusCode);
    if (!this.writableEnded) {
      try {
        this.#controller?.error(new Error('The response was ended before it was complete'));
      } catch {
        // Already closed or errored.
      }
    }
    this.#close();
    return this;
  }

  /**
   * The reader went away (cancelled the body, or the request was aborted): the answer is cut as
   * by `destroy()`, so that whoever awaits the response or reads its body is not left waiting
   * (a request aborted before it arrived has no head yet).
   */
  clientLeft(): void {
    if (this.writableFinished) return;
    this.destroy();
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // As Node does: 'close' after the current tick, when whoever ended the answer has returned.
    queueMicrotask(() => this.emit('close'));
  }
}
