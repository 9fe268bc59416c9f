// What the router knows of one API it serves (OpenAI's completions and chat, SGLang's
// /generate, the passed-through ones): declared once here, read by every layer above, so that
// no layer works out the API again from a body's shape. It sits below the transport, routing
// and the flow: data and pure functions over JSON only.

import type * as z from 'zod/mini';

/** A request body as the client sent it (JSON). */
export type EndpointBody = Readonly<Record<string, unknown>>;

/**
 * How the router serves an endpoint:
 * - `disaggregated`: a generation, prefill then decode (`disaggregate`);
 * - `passthrough`: one call to a decode worker chosen by the pool's policy (embeddings, a
 *   rerank, a score), answered as the worker answered.
 */
export type Serving = 'disaggregated' | 'passthrough';

/**
 * The shape of an endpoint's answer, which the transport reads and the relay writes:
 * - `chat`: OpenAI chat completions (`choices[i].delta` / `.message`, `chat.completion.chunk`);
 * - `text`: OpenAI completions (`choices[i].text`, `text_completion`);
 * - `generate`: SGLang's native `/generate` (`text` and `meta_info` per element);
 * - `json`: one JSON body, relayed as it is (a passthrough);
 * - `responses`: OpenAI's Responses (typed events `response.*`, no `[DONE]`; a `response` object);
 * - `messages`: Anthropic's Messages (typed events `message_start` ... `message_stop`, no
 *   `[DONE]`; a `message` object; errors in Anthropic's shape).
 */
export type AnswerShape = 'chat' | 'text' | 'generate' | 'json' | 'responses' | 'messages';

/** What a body that does not fit an endpoint gets told: the field, and what to send instead. */
export interface Misfit {
  readonly param: string;
  readonly message: string;
}

/**
 * One API the router serves: its path (the same on the router and on the workers), how it is
 * served, how its body is checked, where its prompt and its output cap are, and the shape of
 * its answer. The endpoint is resolved once, from the route a request came in on (or from the
 * body, for a library caller that gives only a body: {@link endpointOf}), and handed down.
 *
 * `N` is its name's type: a registry entry keeps its literal name (`Endpoint<'chat'>`), so that
 * what reads the registry's names (`EndpointName`, a connector's `unsupported`) needs no cast;
 * `string` by default.
 *
 * @example
 * const chat = endpointNamed('chat'); // Endpoint<'chat'>
 * chat.path; // '/v1/chat/completions'
 * budgetOf(chat, { messages: [], max_completion_tokens: 64 }); // { field: 'max_completion_tokens', tokens: 64 }
 */
export interface Endpoint<N extends string = string> {
  /** Its name: the route label of the metrics, traces and logs. */
  readonly name: N;
  /** Its path, on the router and on the workers. */
  readonly path: string;
  /** Other paths the router serves it at (vLLM's unversioned `/rerank`), called at `path` on the workers. */
  readonly aliases?: readonly string[] | undefined;
  readonly serving: Serving;
  readonly answer: AnswerShape;
  /**
   * The body's fields whose type and range the engines agree on, checked before any worker is
   * called; every other field passes unchecked and unchanged.
   */
  readonly schema: z.ZodMiniType;
  /** What the body lacks to be a request of this endpoint (chat's `messages`, say); undefined when it fits. */
  misfit(body: EndpointBody): Misfit | undefined;
  /**
   * What the engines refuse in combination, once the schema passed (chat's `top_logprobs`
   * without `logprobs`); undefined when there is nothing of the kind.
   */
  combination?(body: EndpointBody): Misfit | undefined;
  /**
   * The fields that cap its output, in the order the engines read them (chat's
   * `max_completion_tokens` before `max_tokens`, as vLLM does); a dotted name is nested
   * (`sampling_params.max_new_tokens`). Empty for an endpoint that generates nothing.
   */
  readonly budgetFields: readonly string[];
  /**
   * The fields of a one-token prefill leg: the output cap at 1 under the API's own name (both
   * OpenAI names for completions and chat, as every engine reads one of them), one answer
   * (`n: 1` where the API has `n`), nothing kept of it (Responses' `store: false`).
   */
  readonly oneToken: Readonly<Record<string, unknown>>;
  /** The prompt's token ids when the body gives them (a token-id prompt; a batch's first). */
  promptIds(body: EndpointBody): readonly number[] | undefined;
  /**
   * The prompt's length in tokens where the body alone says it (one prompt of token ids; a
   * batch's prompts are each checked by the engine), for the context check before any worker.
   */
  promptLength(body: EndpointBody): number | undefined;
  /**
   * The fewest tokens its prompt can be under any chat template, where the body alone says so
   * (one per chat message it becomes), and the field that holds the prompt: what the context
   * check before any worker goes by when no tokenizer has counted the prompt. Absent where
   * nothing of the kind is known.
   */
  promptFloor?(body: EndpointBody): { field: string; tokens: number };
  /**
   * The text the prompt starts with, in the order an engine's template puts it, at most
   * `maxChars` characters (never half a surrogate pair): what routing compares between requests.
   */
  routingText(body: EndpointBody, maxChars: number): string;
  /**
   * What the router's tokenizer renders of the body: `chat` (the messages through the model's
   * chat template), `prompt` (the first prompt's text), or undefined (nothing to tokenize).
   */
  readonly tokenize: 'chat' | 'prompt' | 'text' | undefined;
  /**
   * The body as a chat completions body (`messages`, `tools`, `chat_template_kwargs`), for an
   * API the engines render through the chat template after converting it (Responses, Anthropic
   * Messages); undefined where the body is chat's own or no chat at all.
   */
  chatForm?(body: EndpointBody): EndpointBody;
  /**
   * The shape of its error bodies: OpenAI's (`{error: {message, type, param, code}}`) unless
   * `anthropic` (`{type: 'error', error: {type, message}}`, what Anthropic's SDK reads).
   */
  readonly errorShape?: 'anthropic' | undefined;
  /**
   * Whether a broken stream of it can be resumed as a token-id completion (decode migration):
   * OpenAI's completions and chat can; SGLang's native `/generate` is not continued.
   */
  readonly resumable: boolean;
  /**
   * The body field the engines take as the answer's id, for an API whose answers a client asks
   * for again by id (Responses' `request_id`: vLLM and SGLang name the response by it). The
   * router fills it when the client leaves it out, so that every id it hands out is its own
   * random one, and remembers whose each is; undefined for the other APIs.
   */
  readonly answerIdField?: string | undefined;
}

/** The number at a dotted field of `body` (`sampling_params.max_new_tokens`), if it is one. @internal */
export function numberAt(body: EndpointBody, field: string): number | undefined {
  // Per request: a plain field without splitting its name.
  if (!field.includes('.')) {
    const value = body[field];
    return typeof value === 'number' ? value : undefined;
  }
  let value: unknown = body;
  for (const key of field.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return typeof value === 'number' ? value : undefined;
}

/**
 * The client's output cap of `body` on `endpoint`: the first of its budget fields that holds a
 * number; undefined when none does (the engine's default applies).
 *
 * @example
 * budgetOf(endpointNamed('generate'), { text: 'Hi', sampling_params: { max_new_tokens: 8 } });
 * // { field: 'sampling_params.max_new_tokens', tokens: 8 }
 */
export function budgetOf(endpoint: Endpoint, body: EndpointBody): { field: string; tokens: number } | undefined {
  for (const field of endpoint.budgetFields) {
    const tokens = numberAt(body, field);
    if (tokens !== undefined) return { field, tokens };
  }
  return undefined;
}

/**
 * An endpoint, frozen, with its name and serving kept as literal types (so that the registry
 * derives the name union from its list). Each module of src/endpoints/ defines its own with it.
 *
 * @internal
 */
export function defineEndpoint<const E extends Endpoint>(endpoint: E): Readonly<E> {
  return Object.freeze(endpoint);
}
