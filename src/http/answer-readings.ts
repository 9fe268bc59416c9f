import type { AnswerShape } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import { messagesReader, responsesReader } from './agent-output.js';
import type { AnswerEnd } from './openai-answer.js';
import { generateReader, outputFromOpenAI } from './openai-output.js';

/** How an answer of one shape is read: its documents as items, and, for a typed-event stream, its end. */
export interface AnswerReading {
  readonly convert: (json: unknown, event?: string) => EngineItem;
  readonly ends?: AnswerEnd | undefined;
  /** One answer whatever the body says (the agents' APIs have no `n`, nor batches). */
  readonly single?: true | undefined;
}

const end = (name: string, ...others: string[]): AnswerEnd =>
  Object.freeze({ events: new Set([name, ...others]), name });

/**
 * Per answer shape, how its answer is read (a fresh reader per answer: SGLang's and
 * Anthropic's keep what they have seen). OpenAI's streams end at `[DONE]`; Responses' at its
 * final `response.completed` (vLLM's status `incomplete` rides in it; another server's
 * `response.incomplete` is taken too); Anthropic's at `message_stop`, after the `message_delta`
 * that says how it finished. Typed by the shapes, so that a shape without its reading does
 * not compile.
 */
const READINGS: { readonly [shape in AnswerShape]: () => AnswerReading } = {
  chat: () => ({ convert: outputFromOpenAI }),
  text: () => ({ convert: outputFromOpenAI }),
  json: () => ({ convert: outputFromOpenAI }),
  generate: () => ({ convert: generateReader() }),
  responses: () => ({
    convert: responsesReader(),
    ends: end('response.completed', 'response.incomplete'),
    single: true,
  }),
  messages: () => ({ convert: messagesReader(), ends: end('message_stop'), single: true }),
};

/**
 * How the answer of `endpoint` is read, fresh for one answer.
 *
 * @internal
 */
export function readingOf(endpoint: { readonly answer: AnswerShape }): AnswerReading {
  return READINGS[endpoint.answer]();
}
