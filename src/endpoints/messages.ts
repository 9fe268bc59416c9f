import * as z from 'zod/mini';
import { anthropicAsChat, anthropicMessages } from './chat-form.js';
import { contentCheck } from './content-checks.js';
import { defineEndpoint, type EndpointBody } from './endpoint.js';
import { blocksProblem, messagesProblem, messagesPromptFloor } from './messages-blocks.js';
import { messagesText } from './prompt-text.js';
import { has, int, modelName, number } from './schema-parts.js';

/**
 * The prompt of an Anthropic body, the same for a message and its token count: each message's
 * role and content blocks, and the system prompt's blocks, of the types the API documents.
 */
const prompt = {
  messages: z.array(z.unknown()).check(z.minLength(1), contentCheck(messagesProblem)),
  system: z.nullish(z.union([z.string(), z.array(z.unknown()).check(contentCheck(blocksProblem))])),
  tools: z.nullish(z.array(z.looseObject({ name: z.string() }))),
};

/** What an Anthropic body is to routing and the tokenizer: its chat form, as vLLM converts it. */
const asChat = {
  promptIds: () => undefined,
  promptLength: () => undefined,
  routingText: (body: EndpointBody, maxChars: number) => messagesText(anthropicMessages(body), maxChars),
  tokenize: 'chat',
  chatForm: anthropicAsChat,
  errorShape: 'anthropic',
  resumable: false,
} as const;

/**
 * Anthropic's Messages API (`POST /v1/messages`), as vLLM serves it: `system` and `messages`
 * of content blocks, capped by the required `max_tokens`, answered as typed events
 * (`message_start` ... `message_stop`) or one `message`, errors in Anthropic's shape.
 * Disaggregated on vLLM (`kv_transfer_params` in the request and at the top of a whole
 * answer); a broken stream is not continued (its events carry no token ids).
 */
export const messages = defineEndpoint({
  name: 'messages',
  path: '/v1/messages',
  serving: 'disaggregated',
  answer: 'messages',
  schema: z.looseObject({
    ...prompt,
    model: modelName,
    max_tokens: int(1),
    stream: z.nullish(z.boolean()),
    temperature: z.nullish(number(z.minimum(0))),
    top_p: z.nullish(number(z.gt(0), z.maximum(1))),
    top_k: z.nullish(int(-1)),
    stop_sequences: z.nullish(z.array(z.string())),
  }),
  misfit: (body) => {
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      return {
        param: 'messages',
        message: has(body, 'input')
          ? 'The Messages API takes messages, not input: send input to /v1/responses'
          : 'The Messages API needs messages: a non-empty list',
      };
    }
    if (!has(body, 'max_tokens')) return { param: 'max_tokens', message: 'The Messages API needs max_tokens' };
    return undefined;
  },
  budgetFields: ['max_tokens'],
  oneToken: Object.freeze({ max_tokens: 1 }),
  promptFloor: (body) => ({ field: 'messages', tokens: messagesPromptFloor(body) }),
  ...asChat,
});

/**
 * Anthropic's token count (`POST /v1/messages/count_tokens`, which vLLM, SGLang and
 * TensorRT-LLM serve): a Messages body without `max_tokens`, answered `{ input_tokens }`. The
 * router answers it with its own tokenizer where it has one (the body rendered as vLLM renders
 * it, through the chat template), else passes it to a decode worker.
 */
export const countTokens = defineEndpoint({
  name: 'count_tokens',
  path: '/v1/messages/count_tokens',
  serving: 'passthrough',
  answer: 'json',
  schema: z.looseObject({ ...prompt, model: z.nullish(modelName) }),
  misfit: (body) =>
    Array.isArray(body.messages) && body.messages.length > 0
      ? undefined
      : { param: 'messages', message: 'count_tokens needs messages: a non-empty list' },
  budgetFields: [],
  oneToken: {},
  ...asChat,
});
