import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { drained } from './node-server.js';

/**
 * Writes the body of a streamed response (SSE) one piece at a time, as cheaply as Node lets it:
 * the first piece goes through `res.write` (it carries the head), every later one is framed
 * here as one HTTP/1.1 chunk and written to the socket as one string. Node's `res.write` hands
 * the socket four pieces per call (the length, a line end, the data, a line end), each queued
 * while the socket is corked and gathered again for one `writev`: per token, the larger part
 * of what the proxy itself allocates on its way out. The bytes on the wire are the same.
 *
 * Pieces written in the same turn of the event loop still leave in one system call: the
 * socket is corked until the turn's queued callbacks have run, as Node does for `res.write`.
 * Nothing is held back past that turn.
 *
 * A piece goes to the socket only while the response holds nothing of its own: Node 22 and
 * later keep what `res.write` was given in the response until the turn ends (and join it into
 * one chunk), so a piece written past it would overtake it. A response Node does not frame
 * itself (HTTP/1.0, a body with a length) keeps `res.write`. `end()` is the response's own:
 * Node writes the last piece and the closing chunk.
 *
 * @internal
 */
export class ChunkWriter {
  readonly #res: ServerResponse;
  /** The socket, once the head has gone through `res.write` and Node frames the body in chunks. */
  #socket: Socket | undefined;
  #started = false;
  /** Where the last piece went: a full buffer there is what {@link ChunkWriter.drained} waits on. */
  #lastToSocket = false;

  constructor(res: ServerResponse) {
    this.#res = res;
  }

  /**
   * Writes one piece of the body. Returns false when the socket's buffer is full (wait for
   * {@link ChunkWriter.drained} before writing more), as `res.write` does.
   */
  write(text: string): boolean {
    const socket = this.#socket;
    const res = this.#res;
    // The response's own buffer is what it holds beyond the socket's.
    if (socket === undefined || socket !== res.socket || res.writableLength !== socket.writableLength) {
      this.#lastToSocket = false;
      return this.#writeThroughResponse(text);
    }
    this.#lastToSocket = true;
    if (!socket.writableCorked) {
      socket.cork();
      process.nextTick(uncork, socket);
    }
    return socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`);
  }

  /**
   * Resolves true once the client has read what was buffered, false when the response closed
   * first. One listener of each kind per wait, removed when it ends.
   */
  drained(): Promise<boolean> {
    // Written through the response: its own drain event. Written to the socket: the socket's.
    const socket = this.#socket;
    return drained(this.#res, this.#lastToSocket && socket !== undefined ? socket : this.#res);
  }

  #writeThroughResponse(text: string): boolean {
    const res = this.#res;
    const written = res.write(text);
    if (!this.#started) {
      this.#started = true;
      // Node has sent the head with this piece and decided the framing; the socket is the
      // response's own while it lasts (a pipelined response waits without one).
      const { socket } = res;
      if ((res as { chunkedEncoding?: boolean }).chunkedEncoding === true && socket !== null) this.#socket = socket;
    }
    return written;
  }
}

function uncork(socket: Socket): void {
  socket.uncork();
}
