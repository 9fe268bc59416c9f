// A request body as Envoy streams it to the picker: chunks of any size, copied as they come
// into one buffer that grows by doubling, so that what a body holds is its bytes, not one
// object per chunk. Held as a list, a body of one-byte chunks cost about 130 bytes of memory
// per byte (a Buffer view per chunk, and the gRPC frame it kept alive): 8 MiB of it, about
// 1 GB. The buffer never grows past the limit; a body that goes past it holds nothing more.

/** The first buffer's size: a small body (most requests) takes one allocation from Node's pool. */
const FIRST_BYTES = 1024;

/**
 * One request body, read in chunks up to `limit` bytes. Memory is one buffer of at most twice
 * the bytes read (its doublings), never more than `limit`; with `expected` (the request's
 * `content-length`, when it is within the limit) it grows to that size and no further unless
 * more comes. Once past the limit it lets its bytes go and takes no more.
 *
 * @example
 * const body = new BodyBuffer(8 * 1024 * 1024);
 * if (!body.append(chunk)) answer413();
 * body.bytes(); // the body so far, as a view of its buffer
 */
export class BodyBuffer {
  readonly #limit: number;
  readonly #expected: number | undefined;
  #buffer: Buffer = Buffer.alloc(0);
  #size = 0;
  #over = false;

  /**
   * @param limit the most bytes a body may have (`maxBodyBytes`).
   * @param expected the size the request says it has (its `content-length`), if it says one:
   *   a hint for the buffer's size, never trusted past `limit` or past what arrives.
   */
  constructor(limit: number, expected?: number) {
    this.#limit = limit;
    this.#expected = expected !== undefined && Number.isSafeInteger(expected) && expected > 0 ? expected : undefined;
  }

  /** Bytes read so far (past the limit too: counted, not held). */
  get size(): number {
    return this.#size;
  }

  /** Whether the body went past the limit. */
  get over(): boolean {
    return this.#over;
  }

  /** Bytes of memory this body holds now: its buffer, read or not yet. */
  get held(): number {
    return this.#buffer.length;
  }

  /**
   * Copies `chunk` in. Answers false once the body is past the limit (this chunk or an earlier
   * one took it there): its buffer is let go then, and later chunks are only counted.
   */
  append(chunk: Uint8Array): boolean {
    this.#size += chunk.length;
    if (this.#over) return false;
    if (this.#size > this.#limit) {
      this.#over = true;
      this.#buffer = Buffer.alloc(0);
      return false;
    }
    const read = this.#size - chunk.length;
    if (this.#size > this.#buffer.length) this.#grow(read, this.#size);
    this.#buffer.set(chunk, read);
    return true;
  }

  /** The body read so far: a view of the buffer (no copy); empty once past the limit. */
  bytes(): Buffer {
    return this.#over ? Buffer.alloc(0) : this.#buffer.subarray(0, this.#size);
  }

  /** A buffer of at least `needed` bytes (within the limit), the `read` bytes so far copied over. */
  #grow(read: number, needed: number): void {
    let size = Math.min(this.#limit, Math.max(needed, this.#buffer.length * 2, FIRST_BYTES));
    // The size it says it has, when it has not said less than what came: no doubling past it.
    if (this.#expected !== undefined && this.#expected >= needed) size = Math.min(size, this.#expected);
    const grown = Buffer.allocUnsafe(size);
    this.#buffer.copy(grown, 0, 0, read);
    this.#buffer = grown;
  }
}
