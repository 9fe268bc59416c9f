import * as z from 'zod/mini';
import { defineEndpoint, type EndpointBody, type Misfit } from './endpoint.js';
import { clip, idsAt, messagesText, promptText } from './prompt-text.js';
import { has, modelName } from './schema-parts.js';

// The pooling APIs of vLLM and SGLang: one call that computes over its input and answers one
// JSON body, nothing to hand off. They are passed through to a decode worker the pool's policy
// chooses; the body is checked only for what every version agrees on (a model's name, the
// fields that make it this API), and the worker's own 4xx says the rest, relayed unchanged.

const passthroughSchema = z.looseObject({
  model: z.nullish(modelName),
  stream: z.nullish(z.literal(false)),
});

const needs =
  (api: string, ...fields: readonly string[]) =>
  (body: EndpointBody): Misfit | undefined => {
    const missing = fields.find((field) => !has(body, field));
    return missing === undefined ? undefined : { param: missing, message: `${api} needs ${fields.join(' and ')}` };
  };

/**
 * What the pooling APIs that take an `input` (text, texts, token ids) or chat `messages` share:
 * the misfit of a body with neither, the prompt's token ids (an `input` of ids) and the routing
 * text (the messages', else the input's).
 */
const inputOrMessages = (path: string) =>
  ({
    misfit: (body: EndpointBody): Misfit | undefined =>
      has(body, 'input') || Array.isArray(body.messages)
        ? undefined
        : { param: 'input', message: `${path} needs an input (or messages)` },
    promptIds: (body: EndpointBody) => idsAt(body, 'input'),
    routingText: (body: EndpointBody, maxChars: number) =>
      Array.isArray(body.messages) ? messagesText(body.messages, maxChars) : clip(promptText(body.input), maxChars),
  }) as const;

const passthrough = {
  serving: 'passthrough',
  answer: 'json',
  schema: passthroughSchema,
  budgetFields: [],
  oneToken: {},
  promptLength: () => undefined,
  tokenize: undefined,
  resumable: false,
} as const;

/**
 * OpenAI's embeddings (`POST /v1/embeddings`): an `input` (text, texts, token ids), or vLLM's
 * chat form (`messages`). Passed through to a decode worker.
 */
export const embeddings = defineEndpoint({
  ...passthrough,
  name: 'embeddings',
  path: '/v1/embeddings',
  ...inputOrMessages('/v1/embeddings'),
});

/**
 * A rerank (`POST /v1/rerank`, the Jina and Cohere shape vLLM and SGLang serve; also at `/rerank`
 * and `/v2/rerank`, as vLLM serves it): a `query` and its `documents`. Passed through to a
 * decode worker.
 */
export const rerank = defineEndpoint({
  ...passthrough,
  name: 'rerank',
  path: '/v1/rerank',
  aliases: ['/rerank', '/v2/rerank'],
  misfit: needs('/v1/rerank', 'query', 'documents'),
  promptIds: () => undefined,
  routingText: (body, maxChars) => clip(promptText(body.query), maxChars),
});

/**
 * vLLM's classification (`POST /v1/classify`, also `/classify`): an `input` (text, texts, token
 * ids) or chat `messages`, one label and its probabilities each. Passed through to a decode worker.
 */
export const classify = defineEndpoint({
  ...passthrough,
  name: 'classify',
  path: '/v1/classify',
  aliases: ['/classify'],
  ...inputOrMessages('/v1/classify'),
});

/**
 * vLLM's raw pooling (`POST /pooling`): an `input` (or chat `messages`), the model's pooled
 * hidden states back. Passed through to a decode worker.
 */
export const pooling = defineEndpoint({
  ...passthrough,
  name: 'pooling',
  path: '/pooling',
  ...inputOrMessages('/pooling'),
});

/**
 * vLLM's score (`POST /v1/score`): pairs of texts (`text_1` and `text_2`; later versions also
 * `data_1`/`data_2` or `queries`/`documents`, so no field is required here: the worker says
 * which it takes). Passed through to a decode worker.
 */
export const score = defineEndpoint({
  ...passthrough,
  name: 'score',
  path: '/v1/score',
  misfit: () => undefined,
  promptIds: () => undefined,
  routingText: (body, maxChars) => clip(promptText(body.text_1 ?? body.data_1 ?? body.queries), maxChars),
});
