import * as z from 'zod/mini';
import { defineEndpoint } from './endpoint.js';
import { clip, flatIdsLength, idsAt, promptText } from './prompt-text.js';
import { has, int, ONE_TOKEN, sampling, tokenIds } from './schema-parts.js';

/**
 * OpenAI's completions (`POST /v1/completions`): a `prompt` (a string, token ids, or a batch of
 * either), capped by `max_tokens`, answered as `text_completion` choices. Disaggregated, and
 * resumable as a token-id completion.
 */
export const completions = defineEndpoint({
  name: 'completions',
  path: '/v1/completions',
  serving: 'disaggregated',
  answer: 'text',
  schema: z.looseObject({
    ...sampling,
    prompt: z.union(
      [z.string(), z.array(z.string()).check(z.minLength(1)), tokenIds, z.array(tokenIds).check(z.minLength(1))],
      { error: 'must be a string, a list of strings, a list of token ids or a list of such lists' },
    ),
    best_of: z.nullish(int(1)),
    echo: z.nullish(z.boolean()),
    logprobs: z.nullish(int(0)),
    suffix: z.nullish(z.string()),
  }),
  misfit: (body) => {
    if (has(body, 'prompt')) return undefined;
    return {
      param: 'prompt',
      message: has(body, 'messages')
        ? 'The completions route takes a prompt, not messages: send messages to /v1/chat/completions'
        : 'The completions route needs a prompt',
    };
  },
  budgetFields: ['max_tokens'],
  oneToken: ONE_TOKEN,
  promptIds: (body) => idsAt(body, 'prompt', 'input_ids'),
  promptLength: (body) => flatIdsLength(body.prompt),
  routingText: (body, maxChars) => clip(promptText(body.prompt ?? body.text), maxChars),
  tokenize: 'prompt',
  resumable: true,
});
