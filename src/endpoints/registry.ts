import { chat } from './chat.js';
import { completions } from './completions.js';
import type { Endpoint, EndpointBody } from './endpoint.js';
import { generate } from './generate.js';
import { countTokens, messages } from './messages.js';
import { classify, embeddings, pooling, rerank, score } from './passthrough.js';
import { responses } from './responses.js';
import { detokenize, tokenize } from './tokenization.js';

/**
 * Every API the router serves, one entry each: `completions`, `chat`, `generate`, `responses`
 * (OpenAI's Responses) and `messages` (Anthropic's Messages), disaggregated; `embeddings`,
 * `rerank`, `score`, `classify` and `pooling`, passed through to a decode worker; and
 * `count_tokens` (Anthropic's), `tokenize` and `detokenize`, answered by the router's tokenizer
 * where it has one, else by a decode worker. The proxy's routes, the body schemas, the HTTP
 * engine's paths and the fake workers' answers are all read from this list: a new API is its
 * module plus one line here.
 *
 * @example
 * ENDPOINTS.filter((each) => each.serving === 'passthrough').map((each) => each.path);
 * // ['/v1/embeddings', '/v1/rerank', '/v1/score', '/v1/classify', '/pooling', '/v1/messages/count_tokens', '/tokenize', '/detokenize']
 */
export const ENDPOINTS = [
  completions,
  chat,
  generate,
  responses,
  messages,
  embeddings,
  rerank,
  score,
  classify,
  pooling,
  countTokens,
  tokenize,
  detokenize,
] as const;

/**
 * The name of an endpoint the router serves: `completions`, `chat`, `generate`, `responses`,
 * `messages`, `embeddings`, `rerank`, `score`, `classify`, `pooling`, `count_tokens`,
 * `tokenize`, `detokenize`.
 */
export type EndpointName = (typeof ENDPOINTS)[number]['name'];

/** The names of the disaggregated (generation) endpoints. */
export type GenerationName = Extract<(typeof ENDPOINTS)[number], { serving: 'disaggregated' }>['name'];

/** An endpoint of the registry: its name one of {@link EndpointName}. */
export type RegisteredEndpoint = Endpoint<EndpointName>;

const BY_NAME: ReadonlyMap<string, RegisteredEndpoint> = new Map(
  ENDPOINTS.map((endpoint) => [endpoint.name, endpoint]),
);

/**
 * The endpoint called `name`: typed by the name when it is a literal (`Endpoint<'chat'>`).
 *
 * @example
 * endpointNamed('chat').path; // '/v1/chat/completions'
 * @throws {TypeError} for a name no endpoint has, listing those there are.
 */
export function endpointNamed<N extends EndpointName>(name: N): Endpoint<N>;
export function endpointNamed(name: string): RegisteredEndpoint;
export function endpointNamed(name: string): RegisteredEndpoint {
  const endpoint = BY_NAME.get(name);
  if (endpoint === undefined) {
    throw new TypeError(`Unknown endpoint '${name}': expected one of ${[...BY_NAME.keys()].join(', ')}`);
  }
  return endpoint;
}

/**
 * Whether `name` names an endpoint.
 *
 * @example
 * isEndpointName('embeddings'); // true
 */
export function isEndpointName(name: unknown): name is EndpointName {
  return typeof name === 'string' && BY_NAME.has(name);
}

/**
 * The generation endpoint a body is for, by its shape, for a caller that has only a body (a
 * library user's `disaggregate({ request })`): chat for `messages`, Responses for an `input`
 * without a `prompt`, SGLang's `/generate` for a `text`, `input_ids` or `input_embeds` without
 * a `prompt`, else completions (an Anthropic Messages body looks like chat's: name
 * `endpointNamed('messages')` for it). The proxy
 * never asks: it knows the route a request came in on. This is the one place the shape is read.
 *
 * @example
 * endpointOf({ messages: [{ role: 'user', content: 'Hi' }] }).name; // 'chat'
 */
export function endpointOf(body: EndpointBody): Endpoint<GenerationName> {
  if (Array.isArray(body.messages)) return chat;
  const given = (value: unknown) => value !== undefined && value !== null;
  if (body.prompt === undefined && given(body.input)) return responses;
  if (body.prompt === undefined && (given(body.text) || given(body.input_ids) || given(body.input_embeds))) {
    return generate;
  }
  return completions;
}
