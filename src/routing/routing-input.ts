/**
 * What a routing policy may look at in one request: its routing text (the prompt, or the chat
 * messages rendered in order) and its session key. Both are worked out on first use only, so
 * a policy that needs neither (round-robin) costs nothing per request, and one that needs the
 * text reads a long prompt once however many pools ask.
 *
 * @example
 * const input = new RoutingInput({ messages: [{ role: 'user', content: 'Hi' }] }, 'chat-42');
 * input.text; // 'user\u0000Hi\u0001'
 * input.sessionKey; // 'chat-42'
 */
export class RoutingInput {
  readonly #body: Readonly<Record<string, unknown>>;
  readonly #sessionKey: string | undefined;
  #text: string | undefined;
  #tokenIds: readonly number[] | null | undefined;
  #predicted: Map<unknown, number> | undefined;

  /**
   * @param body the request body as the client sent it.
   * @param sessionKey the session it belongs to (a header such as `x-session-id`); the body's
   *   `user` when omitted.
   * @param tokenIds the prompt's token ids as the router's tokenizer made them (a text or chat
   *   prompt); read from the body when omitted.
   */
  constructor(body: Readonly<Record<string, unknown>>, sessionKey?: string, tokenIds?: readonly number[]) {
    this.#body = body;
    this.#sessionKey = sessionKey;
    if (tokenIds !== undefined) this.#tokenIds = tokenIds;
  }

  /** The text whose prefix a worker's cache would hold (see {@link routingText}). */
  get text(): string {
    this.#text ??= routingText(this.#body);
    return this.#text;
  }

  /**
   * The prompt as token ids, when the request gives them: a completion's `prompt` as a list of
   * ids (a batch's first), SGLang's `input_ids`. Undefined for a text prompt or a chat: the
   * engines' KV events are in tokens, so without ids (or a tokenizer) precise routing sees nothing.
   */
  get tokenIds(): readonly number[] | undefined {
    if (this.#tokenIds === undefined) this.#tokenIds = tokenIdsOf(this.#body) ?? null;
    return this.#tokenIds ?? undefined;
  }

  /**
   * Records that a policy routed this request to `worker` expecting it to hold `tokens` of the
   * prompt in its cache (precise-prefix does, in its `routed` hook), so that the proxy can set
   * it against what the worker reports (`cached_tokens`).
   */
  notePredictedCached(worker: unknown, tokens: number): void {
    this.#predicted ??= new Map();
    this.#predicted.set(worker, tokens);
  }

  /** The cached tokens a policy expected of `worker` for this request, if one said. */
  predictedCached(worker: unknown): number | undefined {
    return this.#predicted?.get(worker);
  }

  /** The request body as the client sent it (what a policy may read beyond text and ids, such as `model`). */
  get body(): Readonly<Record<string, unknown>> {
    return this.#body;
  }

  /** The session key, or undefined when the request names none. */
  get sessionKey(): string | undefined {
    if (this.#sessionKey !== undefined && this.#sessionKey !== '') return this.#sessionKey;
    const { user } = this.#body;
    return typeof user === 'string' && user !== '' ? user : undefined;
  }
}

/**
 * How much of a prompt routing looks at: 64 Ki characters. Two prompts that share that much
 * are alike enough for routing, and the text stays out of V8's large-object space (a longer
 * one costs a large allocation per request, ten times the rest of the decision).
 */
export const ROUTING_TEXT_MAX_CHARS = 65_536;

/**
 * The text a request's prompt starts with, in the order an engine's chat template puts it:
 * a completion's `prompt` (a batch's first prompt; token ids as numbers), SGLang's `text`, or
 * each chat message as its role and its text parts; its first `maxChars` characters (never
 * half a surrogate pair). Separators are control characters no client text is made of, so
 * that two conversations share a prefix only where their messages do. Empty for a request
 * without any of these.
 */
export function routingText(body: Readonly<Record<string, unknown>>, maxChars = ROUTING_TEXT_MAX_CHARS): string {
  const { messages, prompt, text } = body;
  if (!Array.isArray(messages)) return clip(promptText(prompt ?? text), maxChars);
  let out = '';
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue;
    const { role, content } = message as { role?: unknown; content?: unknown };
    const head = `${typeof role === 'string' ? role : ''}\u0000`;
    const body = contentText(content);
    // Clipped piece by piece: slicing the whole afterwards would copy all of it first.
    if (out.length + head.length + body.length + 1 <= maxChars) {
      out += `${head}${body}\u0001`;
      continue;
    }
    out += clip(`${head}${clip(body, maxChars - out.length - head.length)}`, maxChars - out.length);
    break;
  }
  return out;
}

/** The first `max` characters of `text`, one fewer if that would split a surrogate pair. */
function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 0) return '';
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return '';
  const [first] = prompt;
  // A batch of prompts routes by its first; a list of token ids is one prompt.
  if (typeof first === 'string') return first;
  if (Array.isArray(first)) return first.join(',');
  return prompt.join(',');
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    const { text } = (part ?? {}) as { text?: unknown };
    if (typeof text === 'string') out += text;
  }
  return out;
}

function tokenIdsOf(body: Readonly<Record<string, unknown>>): readonly number[] | undefined {
  const { prompt, input_ids: inputIds } = body;
  for (const value of [prompt, inputIds]) {
    if (!Array.isArray(value) || value.length === 0) continue;
    const first = value[0];
    const ids = Array.isArray(first) ? first : value;
    if (ids.length > 0 && ids.every((id) => Number.isInteger(id))) return ids as number[];
  }
  return undefined;
}
