import { randomUUID } from 'node:crypto';
import type { Endpoint } from '../endpoints/endpoint.js';
import {
  OPENAI_OBJECTS,
  type OpenAIShape,
  openAIShape,
  streamedChoice,
  wholeChoice,
} from '../endpoints/openai-shapes.js';
import type { GenerationName } from '../endpoints/registry.js';
import { stringifyJson } from '../http/json.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { CompletionUsage } from '../protocol/llm-engine-output.js';
import type { ErrorAnswer } from './pipeline/error-answers.js';
import { type StreamEnding, streamEnding } from './stream-endings.js';

/** The generation routes the proxy serves: OpenAI completions and chat, and SGLang's `/generate` (the disaggregated endpoints). */
export type Route = GenerationName;

/**
 * What the client gets of a request's items, as SSE text or a whole answer. An item read from
 * a worker carries what the worker sent for it (`Annotated.wire`): that goes on as it was
 * sent, byte for byte (with its `event:` name, for the typed-event APIs), and only where the
 * flow changed the item (the usage's cached tokens, from prefill) as the changed JSON.
 * Everything else a worker says (roles, reasoning, tool calls, logprobs, finish and stop
 * reasons, ids, fields this proxy does not know) reaches the client unchanged, but for the
 * Responses object of a turn the router keeps (`restate`: its `store`, `background`,
 * `previous_response_id` and `conversation` as the client asked, the workers having been asked
 * to keep nothing). An item that
 * did not come from a worker is written as OpenAI JSON ({@link OpenAIWriter}) for OpenAI's
 * completions and chat; the typed-event APIs (Responses, Anthropic Messages) write only what
 * a worker sent. How a stream ends, and how a failure after its first byte is told, is the
 * API's own ({@link StreamEnding}).
 *
 * @internal
 */
export class ResponseWriter {
  readonly #recreate: OpenAIWriter;
  readonly #ending: StreamEnding;
  /** Some item went on as the worker sent it: its usage chunk, if any, went with it. */
  #relayed = false;
  /** The id of a whole answer the worker sent (its body's `id`). */
  #wholeId: string | undefined;
  #usage: CompletionUsage | undefined;
  /** Whether the API's answer ends with an object a router may keep (Responses' `response`). */
  readonly #closes: boolean;

  /** The answer object as the client gets it, where a router keeps it (see `AnswerKeeper.restate`). */
  readonly #restate: ((response: Record<string, unknown>) => Record<string, unknown>) | undefined;

  constructor(
    endpoint: Endpoint,
    body: Record<string, unknown>,
    restate?: ((response: Record<string, unknown>) => Record<string, unknown>) | undefined,
  ) {
    this.#recreate = new OpenAIWriter(endpoint, body);
    this.#ending = streamEnding(endpoint);
    this.#closes = endpoint.answer === 'responses';
    this.#restate = this.#closes ? restate : undefined;
  }

  /**
   * The answer object `item` ends a stream with, if it is that item: the `response` of a
   * Responses `response.completed` or `response.incomplete` event (a stream that fails ends
   * with no such object); undefined for every other item and API.
   */
  closingAnswer(item: EngineItem): Record<string, unknown> | undefined {
    if (!this.#closes) return undefined;
    const wire = Annotated.wire(item);
    if (wire === undefined) return undefined;
    for (const { form, json } of wire) {
      const closing = form === 'event' && (json.type === 'response.completed' || json.type === 'response.incomplete');
      if (closing && typeof json.response === 'object' && json.response !== null) {
        return json.response as Record<string, unknown>;
      }
    }
    return undefined;
  }

  /** Whether `whole` (a whole answer) is one a router may keep: a Responses `response` that ended. */
  keeps(whole: unknown): whole is Record<string, unknown> {
    if (!this.#closes || typeof whole !== 'object' || whole === null) return false;
    const { status } = whole as { status?: unknown };
    return status === 'completed' || status === 'incomplete';
  }

  /** The SSE text of one item: `data:` lines (with `event:` names where the worker gave them); empty for an item that says nothing. */
  sse(item: EngineItem): string {
    this.#noteUsage(item);
    const wire = Annotated.wire(item);
    // Per token: a loop, not every() and map() with a closure each.
    if (wire !== undefined && allEvents(wire)) {
      this.#relayed = true;
      if (wire.length === 1) return this.#frame(wire[0] as WireChunk);
      let text = '';
      for (const chunk of wire) text += this.#frame(chunk);
      return text;
    }
    if (!this.#ending.recreates) return '';
    const data = this.#recreate.chunk(item);
    return data === undefined ? '' : `data: ${data}\n\n`;
  }

  /** What ends a stream that finished: OpenAI's re-created usage chunk if one is due, and `[DONE]`; nothing for the typed-event APIs. */
  end(): string {
    if (!this.#ending.recreates) return '';
    const usage = this.#relayed ? undefined : this.#recreate.usageChunk();
    return `${usage === undefined ? '' : `data: ${usage}\n\n`}data: [DONE]\n\n`;
  }

  /** What ends a stream that failed after its first byte: the API's error event(s). */
  failure(answer: ErrorAnswer): string {
    return this.#ending.failure(answer);
  }

  /** The body of a failure answered before the first byte, in the API's error shape. */
  errorBody(answer: ErrorAnswer): unknown {
    return this.#ending.errorBody(answer);
  }

  /** The whole answer of a non-streamed request: the worker's own body, if it was one item. */
  whole(items: readonly EngineItem[]): unknown {
    for (const item of items) this.#noteUsage(item);
    const wire = items.length === 1 ? Annotated.wire(items[0]) : undefined;
    if (wire !== undefined && wire.length === 1 && wire[0]?.form === 'body') {
      const { json } = wire[0];
      if (typeof json.id === 'string') this.#wholeId = json.id;
      return this.#restate !== undefined && this.keeps(json) ? this.#restate(json) : json;
    }
    for (const item of items) this.#recreate.add(item);
    return this.#recreate.whole();
  }

  /** The id of the answer, where the worker named it and the API lets a client ask for it again (Responses'). */
  get answerId(): string | undefined {
    const streamed = this.#ending.answerId;
    return streamed === undefined ? undefined : (streamed() ?? this.#wholeId);
  }

  /** The last usage a worker reported for this request (token counts for traces), if any. */
  get usage(): CompletionUsage | undefined {
    return this.#usage;
  }

  #frame(chunk: WireChunk): string {
    this.#ending.saw?.(chunk);
    const { json } = chunk;
    // A lifecycle event's response, as the router keeps it (3 or 4 events a stream, not its tokens).
    const data =
      this.#restate !== undefined && typeof json.response === 'object' && json.response !== null
        ? stringifyJson({ ...json, response: this.#restate(json.response as Record<string, unknown>) })
        : (chunk.text ?? stringifyJson(json));
    return chunk.event === undefined ? `data: ${data}\n\n` : `event: ${chunk.event}\ndata: ${data}\n\n`;
  }

  #noteUsage(item: EngineItem): void {
    const usage = item.data?.completion_usage;
    if (usage !== undefined && usage !== null) this.#usage = usage;
  }
}

function allEvents(wire: readonly WireChunk[]): boolean {
  for (const chunk of wire) if (chunk.form !== 'event') return false;
  return true;
}

/**
 * Turns engine outputs into OpenAI responses for one request: streamed chunks (chat deltas,
 * with the role on the first; completion texts), a final usage chunk when the client asked
 * for `stream_options.include_usage`, and the whole response for a non-streamed request.
 *
 * @internal
 */
export class OpenAIWriter {
  /** Chat's shapes (deltas, messages), else completions'. */
  readonly #shape: OpenAIShape;
  readonly #model: string;
  readonly #id: string;
  readonly #created = Math.floor(Date.now() / 1000);
  readonly #includeUsage: boolean;
  #usage: CompletionUsage | undefined;
  #roleSent = false;
  readonly #texts: string[] = [];
  readonly #finish: Array<string | null> = [];

  constructor(endpoint: Endpoint, body: Record<string, unknown>) {
    this.#shape = openAIShape(endpoint.answer);
    this.#model = typeof body.model === 'string' ? body.model : 'unknown';
    this.#id = `${OPENAI_OBJECTS[this.#shape].idPrefix}-${randomUUID()}`;
    this.#includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  }

  /** The SSE `data:` payload of one item, or undefined for an item that says nothing (no text, no finish). */
  chunk(item: EngineItem): string | undefined {
    const data = item.data;
    if (data === undefined || data === null) return undefined;
    if (data.completion_usage !== undefined && data.completion_usage !== null) this.#usage = data.completion_usage;
    const text = typeof data.text === 'string' ? data.text : '';
    const reason =
      data.finish_reason === undefined || data.finish_reason === null
        ? null
        : FinishReason.toOpenAI(data.finish_reason);
    if (text === '' && reason === null) return undefined;
    const index = typeof data.index === 'number' ? data.index : 0;
    // Chat's first chunk carries the role (completions' choices have none).
    const role = this.#roleSent ? undefined : 'assistant';
    this.#roleSent = true;
    const choice = streamedChoice(this.#shape, index, text, reason, { role });
    return JSON.stringify({
      id: this.#id,
      object: OPENAI_OBJECTS[this.#shape].chunk,
      created: this.#created,
      model: this.#model,
      choices: [choice],
    });
  }

  /** The usage chunk that ends a stream for a client that asked for it. */
  usageChunk(): string | undefined {
    if (!this.#includeUsage || this.#usage === undefined) return undefined;
    return JSON.stringify({
      id: this.#id,
      object: OPENAI_OBJECTS[this.#shape].chunk,
      created: this.#created,
      model: this.#model,
      choices: [],
      usage: this.#usage,
    });
  }

  /** Keeps an item for the whole (non-streamed) response. */
  add(item: EngineItem): void {
    const data = item.data;
    if (data === undefined || data === null) return;
    const index = typeof data.index === 'number' ? data.index : 0;
    if (typeof data.text === 'string') this.#texts[index] = (this.#texts[index] ?? '') + data.text;
    if (data.finish_reason !== undefined && data.finish_reason !== null) {
      this.#finish[index] = FinishReason.toOpenAI(data.finish_reason);
    }
    if (data.completion_usage !== undefined && data.completion_usage !== null) this.#usage = data.completion_usage;
  }

  /** The whole response of a non-streamed request. */
  whole(): object {
    const count = Math.max(1, this.#texts.length, this.#finish.length);
    const choices = Array.from({ length: count }, (_, index) => {
      const text = this.#texts[index] ?? '';
      return wholeChoice(this.#shape, index, text, this.#finish[index] ?? 'stop');
    });
    return {
      id: this.#id,
      object: OPENAI_OBJECTS[this.#shape].whole,
      created: this.#created,
      model: this.#model,
      choices,
      ...(this.#usage === undefined ? {} : { usage: this.#usage }),
    };
  }
}
