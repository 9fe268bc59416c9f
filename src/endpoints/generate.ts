import * as z from 'zod/mini';
import { defineEndpoint } from './endpoint.js';
import { clip, flatIdsLength, idsAt, promptText } from './prompt-text.js';
import { has, int, ONE_TOKEN, samplingRanges, tokenIds } from './schema-parts.js';

/**
 * SGLang's native `POST /generate`: a `text`, `input_ids` or `input_embeds` (one, or a batch),
 * sampling in `sampling_params` (capped by its `max_new_tokens`), answered as SGLang's
 * elements with `meta_info`. Disaggregated; a broken stream is not continued.
 */
export const generate = defineEndpoint({
  name: 'generate',
  path: '/generate',
  serving: 'disaggregated',
  answer: 'generate',
  schema: z.looseObject({
    text: z.nullish(z.union([z.string(), z.array(z.string()).check(z.minLength(1))])),
    input_ids: z.nullish(z.union([tokenIds, z.array(tokenIds).check(z.minLength(1))])),
    stream: z.nullish(z.boolean()),
    sampling_params: z.nullish(
      z.looseObject({
        ...samplingRanges,
        max_new_tokens: z.nullish(int(0)),
        min_new_tokens: z.nullish(int(0)),
        n: z.nullish(int(1)),
      }),
    ),
  }),
  misfit: (body) =>
    has(body, 'text') || has(body, 'input_ids') || has(body, 'input_embeds')
      ? undefined
      : { param: 'text', message: '/generate needs a text, input_ids or input_embeds' },
  budgetFields: ['sampling_params.max_new_tokens'],
  // SGLang's prefill server stops after the first token whatever the cap; the OpenAI names
  // ride along unread, as they always have.
  oneToken: ONE_TOKEN,
  promptIds: (body) => idsAt(body, 'prompt', 'input_ids'),
  promptLength: (body) => flatIdsLength(body.input_ids),
  routingText: (body, maxChars) => clip(promptText(body.prompt ?? body.text), maxChars),
  tokenize: 'text',
  resumable: false,
});
