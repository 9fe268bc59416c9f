import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf } from '../endpoints/registry.js';
import type { SessionBinding } from './session-bindings.js';

/**
 * The service levels one request asks for, in ms: time to its first token and the mean gap
 * between its tokens (either may be missing). From its headers (`x-disagg-slo-ttft-ms`,
 * llm-d's `x-slo-ttft-ms`, ...) or its tenant's defaults; what SLO-aware plugins route by.
 *
 * @example
 * const levels: ServiceLevelTargets = { ttftMs: 2000, itlMs: 100 };
 */
export interface ServiceLevelTargets {
  readonly ttftMs?: number | undefined;
  readonly itlMs?: number | undefined;
}

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
  readonly #endpoint: Endpoint;
  /**
   * The workers this request's session is bound to, by pool side, as the router looked them up
   * before routing it (replicas sharing session bindings); undefined when none were looked up.
   */
  sessionBindings: SessionBinding | undefined;
  /**
   * The service levels the request asks for, once the router has read them (its headers, its
   * tenant's defaults); undefined: none, and SLO-aware plugins route it as any other.
   */
  serviceLevels: ServiceLevelTargets | undefined;
  /**
   * Its priority band, its tenant's (0 by default): higher is served first; below 0 it is
   * sheddable (llm-d's rule), refused early rather than served late when no worker can meet
   * its service levels.
   */
  priority = 0;
  #unmeetable: Set<string> | undefined;
  readonly #sessionKey: string | undefined;
  readonly #prefixKey: string | undefined;
  #promptText: string | undefined;
  #text: string | undefined;
  #tokenIds: readonly number[] | null | undefined;
  #predicted: Map<unknown, number> | undefined;
  #picked: Map<string, unknown> | undefined;

  /**
   * @param body the request body as the client sent it.
   * @param sessionKey the session it belongs to (a header such as `x-session-id`); the body's
   *   `user` when omitted.
   * @param tokenIds the prompt's token ids as the router's tokenizer made them (a text or chat
   *   prompt); read from the body when omitted.
   * @param endpoint the API the request came in on (where its prompt is); by the body's shape
   *   when omitted ({@link endpointOf}).
   * @param prefixKey what the client names its prompt's prefix with (a header such as
   *   `x-prefix-key`): the routing text is then the key, and the body's prompt is not read for it.
   */
  constructor(
    body: Readonly<Record<string, unknown>>,
    sessionKey?: string,
    tokenIds?: readonly number[],
    endpoint: Endpoint = endpointOf(body),
    prefixKey?: string,
  ) {
    this.#body = body;
    this.#endpoint = endpoint;
    this.#sessionKey = sessionKey;
    this.#prefixKey = prefixKey === '' ? undefined : prefixKey;
    if (tokenIds !== undefined) this.#tokenIds = tokenIds;
  }

  /**
   * The text whose prefix a worker's cache would hold (see {@link routingText}); for a request
   * whose client named its prefix, that key (after a character no rendered prompt starts with,
   * so that a key never matches a prompt's text).
   */
  get text(): string {
    this.#text ??=
      this.#prefixKey === undefined ? this.promptText : `\u0002${this.#prefixKey.slice(0, ROUTING_TEXT_MAX_CHARS - 1)}`;
    return this.#text;
  }

  /** The prompt's own text (see {@link routingText}) whatever key the client named: what its size is read from. */
  get promptText(): string {
    this.#promptText ??= this.#endpoint.routingText(this.#body, ROUTING_TEXT_MAX_CHARS);
    return this.#promptText;
  }

  /**
   * The prompt's length in tokens, as well as the router knows it: its token ids (the body's, or
   * the tokenizer's once given), else a quarter of its text (read up to its first 64 Ki
   * characters, so at most 16,384 without ids).
   */
  get promptTokens(): number {
    return this.tokenIds?.length ?? Math.ceil(this.promptText.length / 4);
  }

  /** The API the request came in on. */
  get endpoint(): Endpoint {
    return this.#endpoint;
  }

  /**
   * Gives the prompt's token ids as the router's tokenizer made them, once they are known (the
   * input is built before tokenizing, which waits on a thread); ids the body gives win.
   */
  tokenized(ids: readonly number[]): void {
    if (this.tokenIds === undefined) this.#tokenIds = ids;
  }

  /**
   * The prompt as token ids, when the request gives them: a completion's `prompt` as a list of
   * ids (a batch's first), SGLang's `input_ids`. Undefined for a text prompt or a chat: the
   * engines' KV events are in tokens, so without ids (or a tokenizer) precise routing sees nothing.
   */
  get tokenIds(): readonly number[] | undefined {
    if (this.#tokenIds === undefined) this.#tokenIds = this.#endpoint.promptIds(this.#body) ?? null;
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

  /**
   * The workers the earlier legs of the decision under way picked for this request, by leg
   * (`prefill`, `decode`), in the order they were picked, as llm-d's cycle state carries them:
   * what a filter pairing the legs reads (`same-label`). A `Scheduler` writes it as it picks;
   * empty before its first pick, and for a pool's own `acquire` outside a scheduler.
   *
   * @example
   * const input = new RoutingInput({ prompt: 'Hi' });
   * new Scheduler({ prefillWorkers, decodeWorkers }).decide(input);
   * input.picked.get('prefill'); // the prefill worker, as a decode filter saw it
   */
  get picked(): ReadonlyMap<string, unknown> {
    return this.#picked ?? NO_PICKS;
  }

  /**
   * Notes that `leg` of the decision under way picked `worker`, for the legs picked after it;
   * `undefined` forgets the leg's pick (a leg picked again does not see its own earlier pick).
   */
  notePicked(leg: string, worker: unknown): void {
    if (worker === undefined) {
      this.#picked?.delete(leg);
      return;
    }
    this.#picked ??= new Map();
    this.#picked.set(leg, worker);
  }

  /** Forgets every leg's pick: a new decision (another attempt of the request) begins. */
  clearPicked(): void {
    this.#picked?.clear();
    this.#unmeetable?.clear();
  }

  /**
   * Notes that no worker of `leg`'s pool was predicted to meet the request's service levels
   * (an SLO filter kept them all, serving it best effort): what lets the router shed a
   * sheddable request before any worker is called. Cleared with the picks.
   */
  noteUnmeetable(leg: string): void {
    this.#unmeetable ??= new Set();
    this.#unmeetable.add(leg);
  }

  /** The legs of the decision under way whose pools could not meet its service levels (see {@link noteUnmeetable}). */
  get unmeetable(): readonly string[] {
    return this.#unmeetable === undefined ? [] : [...this.#unmeetable];
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

/** No leg picked yet: one empty map for every input. */
const NO_PICKS: ReadonlyMap<string, unknown> = new Map();

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
 * without any of these. `endpoint` is the API the request came in on; by the body's shape
 * when omitted ({@link endpointOf}), for a caller that has only a body.
 */
export function routingText(
  body: Readonly<Record<string, unknown>>,
  maxChars = ROUTING_TEXT_MAX_CHARS,
  endpoint: Endpoint = endpointOf(body),
): string {
  return endpoint.routingText(body, maxChars);
}
