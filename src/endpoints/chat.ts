import * as z from 'zod/mini';
import { defineEndpoint } from './endpoint.js';
import { idsAt, messagesText } from './prompt-text.js';
import { has, int, ONE_TOKEN, sampling } from './schema-parts.js';

/**
 * OpenAI's chat completions (`POST /v1/chat/completions`): `messages`, capped by
 * `max_completion_tokens` or else `max_tokens` (vLLM reads them in that order), answered as
 * `chat.completion` choices. Disaggregated, and resumable as a token-id completion.
 */
export const chat = defineEndpoint({
  name: 'chat',
  path: '/v1/chat/completions',
  serving: 'disaggregated',
  answer: 'chat',
  schema: z.looseObject({
    ...sampling,
    messages: z.array(z.looseObject({ role: z.string().check(z.minLength(1)) })).check(z.minLength(1)),
    max_completion_tokens: z.nullish(int(1)),
    logprobs: z.nullish(z.boolean()),
    top_logprobs: z.nullish(int(0)),
    tools: z.nullish(z.array(z.looseObject({ type: z.string() }))),
  }),
  misfit: (body) => {
    if (Array.isArray(body.messages) && body.messages.length > 0) return undefined;
    return {
      param: 'messages',
      message: has(body, 'prompt')
        ? 'The chat route takes messages, not a prompt: send a prompt to /v1/completions'
        : 'The chat route needs messages: a non-empty list',
    };
  },
  combination: (body) =>
    has(body, 'top_logprobs') && body.logprobs !== true
      ? { param: 'top_logprobs', message: 'top_logprobs needs logprobs: true' }
      : undefined,
  budgetFields: ['max_completion_tokens', 'max_tokens'],
  oneToken: ONE_TOKEN,
  promptIds: (body) => idsAt(body, 'prompt', 'input_ids'),
  promptLength: () => undefined,
  routingText: (body, maxChars) => (Array.isArray(body.messages) ? messagesText(body.messages, maxChars) : ''),
  tokenize: 'chat',
  resumable: true,
});
