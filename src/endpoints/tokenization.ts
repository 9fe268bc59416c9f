import * as z from 'zod/mini';
import { defineEndpoint, type EndpointBody } from './endpoint.js';
import { clip, idsAt, messagesText, promptText } from './prompt-text.js';
import { has, modelName, tokenIds } from './schema-parts.js';

const json = {
  serving: 'passthrough',
  answer: 'json',
  budgetFields: [],
  oneToken: {},
  promptLength: () => undefined,
  resumable: false,
} as const;

/** The content part types that are no text: a router's text tokenizer cannot count them. */
const TEXT_PARTS = new Set(['text', 'input_text', 'output_text']);

/**
 * The part of a tokenize body that is not text (an image, audio, a video: a message content
 * part of another type), if any: its count needs the model's processor, which only a worker has.
 */
export function multimodalPart(body: EndpointBody): string | undefined {
  if (!Array.isArray(body.messages)) return undefined;
  for (const message of body.messages) {
    const content = (message as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      const type = (part as { type?: unknown } | null)?.type;
      if (typeof type === 'string' && !TEXT_PARTS.has(type)) return type;
    }
  }
  return undefined;
}

/**
 * vLLM's `POST /tokenize`: a completion's `prompt` (special tokens added unless
 * `add_special_tokens: false`) or a chat's `messages` (through the chat template, without
 * special tokens), answered `{ count, max_model_len, tokens }`. The router answers it with its
 * own tokenizer where it has one (multimodal input: a 501, never an undercount; `token_strs`
 * asked: a worker's), else passes it to a decode worker.
 */
export const tokenize = defineEndpoint({
  ...json,
  name: 'tokenize',
  path: '/tokenize',
  schema: z.looseObject({
    model: z.nullish(modelName),
    prompt: z.nullish(z.string()),
    messages: z.nullish(z.array(z.looseObject({ role: z.string().check(z.minLength(1)) }))),
    add_special_tokens: z.nullish(z.boolean()),
    add_generation_prompt: z.nullish(z.boolean()),
    return_token_strs: z.nullish(z.boolean()),
  }),
  misfit: (body) =>
    has(body, 'prompt') || Array.isArray(body.messages)
      ? undefined
      : { param: 'prompt', message: '/tokenize needs a prompt (or messages)' },
  promptIds: () => undefined,
  routingText: (body, maxChars) =>
    Array.isArray(body.messages) ? messagesText(body.messages, maxChars) : clip(promptText(body.prompt), maxChars),
  // Answered by the tokenizer itself (`tokenizedAs`); a tenant's estimate is its text's.
  tokenize: undefined,
});

/** How the router's tokenizer reads a tokenize body: a chat's messages, or a completion's prompt. */
export function tokenizedAs(body: EndpointBody): 'chat' | 'completions' {
  return Array.isArray(body.messages) ? 'chat' : 'completions';
}

/**
 * vLLM's `POST /detokenize`: token ids (`tokens`) back to their text, special tokens kept,
 * answered `{ prompt }`. The router answers it with its own tokenizer where it has one, else
 * passes it to a decode worker.
 */
export const detokenize = defineEndpoint({
  ...json,
  name: 'detokenize',
  path: '/detokenize',
  schema: z.looseObject({ model: z.nullish(modelName), tokens: tokenIds }),
  misfit: (body) =>
    Array.isArray(body.tokens)
      ? undefined
      : { param: 'tokens', message: '/detokenize needs tokens: a list of token ids' },
  promptIds: (body) => idsAt(body, 'tokens'),
  routingText: () => '',
  tokenize: undefined,
});
