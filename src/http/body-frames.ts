import { StringDecoder } from 'node:string_decoder';
import { createParser, type EventSourceParser } from 'eventsource-parser';

/** Where the framing stage puts what it finds in a body: documents, the SSE end, error events. */
export interface FrameSink {
  /** One JSON document: an SSE event's data (`event`, with the event's name if it has one) or a whole body (`body`). */
  frame(text: string, form: 'event' | 'body', event?: string): void;
  /** The SSE stream's `data: [DONE]`. */
  done(): void;
  /** An SSE event named `error` (SGLang's and vLLM's way to fail a stream already under way). */
  errorEvent(data: string): void;
  /** A whole (not streamed) body that was empty. */
  emptyBody(): void;
}

/**
 * The first stage of reading a worker's answer: bytes to frames. Bytes are decoded as UTF-8
 * across chunk boundaries; an event stream is split into events (eventsource-parser), a JSON
 * body kept whole until it ends. It knows nothing of what the frames mean.
 *
 * @internal
 */
export class BodyFrames {
  readonly #sink: FrameSink;
  // Node's decoder rather than TextDecoder: the same UTF-8 across chunks (a character split
  // between two chunks waits for its end; bad bytes become U+FFFD) at a third of the cost per
  // chunk, which is per token here. TextDecoder also drops a byte order mark at the start;
  // #first does that.
  readonly #decoder = new StringDecoder('utf8');
  readonly #parser: EventSourceParser | undefined;
  #text = '';
  #first = true;

  constructor(mode: 'sse' | 'json', sink: FrameSink) {
    this.#sink = sink;
    this.#parser =
      mode === 'sse'
        ? createParser({
            onEvent: (event) => {
              if (event.data === '[DONE]') sink.done();
              else if (event.event === 'error') sink.errorEvent(event.data);
              else sink.frame(event.data, 'event', event.event);
            },
          })
        : undefined;
  }

  /** A chunk of the body, as it arrived. */
  feed(chunk: Buffer): void {
    let text = this.#decoder.write(chunk);
    if (this.#first && text !== '') {
      this.#first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.#parser === undefined) this.#text += text;
    else this.#parser.feed(text);
  }

  /**
   * The body ended: a last event without its closing blank line is still an event (blank
   * lines after a complete one add nothing); a JSON body is one frame, or `emptyBody`.
   */
  end(): void {
    if (this.#parser !== undefined) {
      this.#parser.feed('\n\n');
      return;
    }
    this.#text += this.#decoder.end();
    if (this.#text.trim() === '') this.#sink.emptyBody();
    else this.#sink.frame(this.#text, 'body');
  }
}
