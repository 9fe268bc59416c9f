import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { AsyncEngineContext } from '../runtime/controller.js';
import { sharedDispatcher } from './undici-parts.js';

/** Where the body of a call goes as it arrives. Every method runs synchronously, in undici's read loop. */
export interface BodySink {
  data(chunk: Buffer): void;
  end(): void;
  /** The call broke (the connection, a timeout) or was aborted. */
  error(error: Error): void;
}

/** The status line and headers of a worker's answer. */
export interface UpstreamHead {
  statusCode: number;
  headers: IncomingHttpHeaders;
}

/** What {@link UpstreamCall.start} sends. */
export interface UpstreamInit {
  headers: Record<string, string>;
  body: string;
  /**
   * Stopping it aborts the call, before or during the body; the reason of its signal is the
   * error the call fails with.
   */
  context: AsyncEngineContext;
  dispatcher?: Dispatcher | undefined;
}

type Pending = { kind: 'data'; chunk: Buffer } | { kind: 'end' } | { kind: 'error'; error: Error };

/**
 * One POST to a worker through undici's dispatcher, with the body handed to a sink chunk by
 * chunk as undici reads it (its handler API), rather than through a Readable stream and its
 * async iterator: a token then costs a call and a parse instead of a stream's buffering, a
 * `nextTick` and two promises, which is most of what a relay spends per token.
 *
 * The head resolves with the status and headers, or rejects with the failure (a refused
 * connection, a timeout, or the signal's reason). Until a sink is attached the body is kept;
 * `attach` hands over what arrived, then the rest as it comes. The sink can `pause()` undici
 * (backpressure: the socket is not read further) and `resume()` it; `abort()` ends the call
 * at once (the connection is closed, not returned to the pool). The context is watched through
 * its `stopped()` promise, once per call (a context lives as long as its request); after the
 * call has ended, a stop does nothing.
 *
 * @internal
 */
export class UpstreamCall implements Dispatcher.DispatchHandler {
  readonly head: Promise<UpstreamHead>;
  #resolveHead!: (head: UpstreamHead) => void;
  #rejectHead!: (error: Error) => void;
  #controller: Dispatcher.DispatchController | undefined;
  #sink: BodySink | undefined;
  #pending: Pending[] = [];
  #headed = false;
  #ended = false;
  /** Asked before undici gave the controller: applied when it does. */
  #abortReason: Error | undefined;
  #paused = false;

  private constructor() {
    this.head = new Promise<UpstreamHead>((resolve, reject) => {
      this.#resolveHead = resolve;
      this.#rejectHead = reject;
    });
  }

  /** Sends `init.body` to `url` with POST; see the class for what it answers. */
  static start(url: string, init: UpstreamInit): UpstreamCall {
    const { context } = init;
    const call = new UpstreamCall();
    if (context.isStopped()) {
      call.#fail(abortReason(context.signal));
      return call;
    }
    context.stopped().then(() => call.abort(abortReason(context.signal)));
    const { origin, pathname, search } = new URL(url);
    try {
      (init.dispatcher ?? sharedDispatcher()).dispatch(
        { origin, path: `${pathname}${search}`, method: 'POST', headers: init.headers, body: init.body },
        call,
      );
    } catch (error) {
      call.#fail(error instanceof Error ? error : new Error(String(error)));
    }
    return call;
  }

  /** Hands the body to `sink`: what has arrived now, the rest as it comes. Once per call. */
  attach(sink: BodySink): void {
    this.#sink = sink;
    const pending = this.#pending;
    this.#pending = [];
    for (const entry of pending) {
      if (entry.kind === 'data') sink.data(entry.chunk);
      else if (entry.kind === 'end') sink.end();
      else sink.error(entry.error);
    }
  }

  /** The whole body as text (an error answer's words); rejects if the call breaks first. */
  text(): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      this.attach({
        data: (chunk) => chunks.push(chunk),
        end: () => resolve(Buffer.concat(chunks).toString('utf8')),
        error: reject,
      });
    });
  }

  /** Stops reading the socket until `resume()`. */
  pause(): void {
    if (this.#paused || this.#ended) return;
    this.#paused = true;
    this.#controller?.pause();
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#controller?.resume();
  }

  /** Ends the call now; the sink gets `error(reason)` unless the body had already ended. */
  abort(reason: Error = new DOMException('The call was aborted', 'AbortError')): void {
    if (this.#ended) return;
    if (this.#controller === undefined) {
      this.#abortReason ??= reason;
      return;
    }
    this.#controller.abort(reason);
  }

  // undici's handler API.

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#abortReason !== undefined) controller.abort(this.#abortReason);
    else if (this.#paused) controller.pause();
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: the answer is still to come
    this.#headed = true;
    this.#resolveHead({ statusCode, headers });
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#sink === undefined) this.#pending.push({ kind: 'data', chunk });
    else this.#sink.data(chunk);
  }

  onResponseEnd(): void {
    this.#ended = true;
    if (this.#sink === undefined) this.#pending.push({ kind: 'end' });
    else this.#sink.end();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.#fail(error);
  }

  #fail(error: Error): void {
    if (this.#ended) return;
    this.#ended = true;
    if (!this.#headed) {
      this.#headed = true;
      this.#rejectHead(error);
      return;
    }
    if (this.#sink === undefined) this.#pending.push({ kind: 'error', error });
    else this.#sink.error(error);
  }
}

/** The error an aborted signal stands for: its reason, or an AbortError. */
function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new DOMException('The call was aborted', 'AbortError');
}
