// How each API ends a stream, and says a failure: OpenAI's completions and chat end with
// `data: [DONE]` and fail with an `error` event carrying OpenAI's error body; the Responses API
// ends at its own `response.completed` and fails with an `error` event then `response.failed`;
// Anthropic's Messages ends at `message_stop` and fails with its `error` event. Whatever fails
// a stream after its first byte (a late prefill failure, a decode worker lost, a deadline, a
// shutdown), the client reads it in its API's own words, never as an end.

import type { AnswerShape, Endpoint } from '../endpoints/endpoint.js';
import type { WireChunk } from '../protocol/annotated.js';
import { anthropicErrorType, apiErrorBody } from './pipeline/api-errors.js';
import type { ErrorAnswer } from './pipeline/error-answers.js';

/** The end and failure of one stream of an API. */
export interface StreamEnding {
  /** Whether items that came from no worker are written (OpenAI's re-created chunks, `[DONE]`). */
  readonly recreates: boolean;
  /** Sees each chunk a worker sent, as it goes on (what a failure event must follow). */
  readonly saw?: ((chunk: WireChunk) => void) | undefined;
  /** The id of the answer under way, where the API names one a client may ask for again (Responses'). */
  answerId?(): string | undefined;
  /** The SSE text that ends a stream that failed after its first byte. */
  failure(answer: ErrorAnswer): string;
  /** A failure's body before the first byte. */
  errorBody(answer: ErrorAnswer): unknown;
}

const event = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

const openai = (): StreamEnding => ({
  recreates: true,
  failure: (answer) => event('error', answer.body),
  errorBody: (answer) => answer.body,
});

/**
 * The Responses API: the events go on as the worker sent them; a failure is the API's `error`
 * event (the SDK's stream throws on it), then `response.failed` with the response as it began
 * (for a client that reads the lifecycle), both numbered after the last event sent.
 */
function responsesEnding(): StreamEnding {
  let sequence = -1;
  let response: Record<string, unknown> | undefined;
  return {
    recreates: false,
    saw: (chunk) => {
      const { json } = chunk;
      if (typeof json.sequence_number === 'number') sequence = json.sequence_number;
      if (response === undefined && typeof json.response === 'object' && json.response !== null) {
        response = json.response as Record<string, unknown>;
      }
    },
    failure: (answer) => {
      const { message, type } = answer.body.error;
      const code = answer.status >= 500 ? 'server_error' : type;
      const error = event('error', {
        type: 'error',
        code,
        message,
        param: answer.body.error.param,
        sequence_number: ++sequence,
      });
      if (response === undefined) return error;
      const failed = { ...response, status: 'failed', error: { code, message } };
      return `${error}${event('response.failed', { type: 'response.failed', response: failed, sequence_number: ++sequence })}`;
    },
    errorBody: (answer) => answer.body,
    answerId: () => (typeof response?.id === 'string' ? response.id : undefined),
  };
}

/** Anthropic's Messages: its `error` event, `{type: 'error', error: {type, message}}` (the SDK throws an APIError on it). */
const messagesEnding = (): StreamEnding => ({
  recreates: false,
  failure: (answer) =>
    event('error', {
      type: 'error',
      error: { type: anthropicErrorType(answer.status), message: answer.body.error.message },
    }),
  errorBody: (answer) => apiErrorBody({ errorShape: 'anthropic' }, answer),
});

const ENDINGS: { readonly [shape in AnswerShape]: () => StreamEnding } = {
  chat: openai,
  text: openai,
  generate: openai,
  json: openai,
  responses: responsesEnding,
  messages: messagesEnding,
};

/**
 * How a stream of `endpoint`'s API ends and fails, fresh for one stream (Responses' numbers
 * its events).
 *
 * @internal
 */
export function streamEnding(endpoint: Pick<Endpoint, 'answer'>): StreamEnding {
  return ENDINGS[endpoint.answer]();
}
