import * as z from 'zod/mini';
import { responsesAsChat, responsesMessages } from './chat-form.js';
import { contentCheck } from './content-checks.js';
import { defineEndpoint, type EndpointBody, type Misfit } from './endpoint.js';
import { messagesText } from './prompt-text.js';
import { responsesInputProblem, responsesPromptFloor } from './responses-items.js';
import { has, int, modelName, responseId, samplingRanges } from './schema-parts.js';

/**
 * The fields that make a Responses request depend on state kept between requests (a stored
 * response, a background task, a conversation): the engines keep none under P/D (each turn
 * runs on the workers chosen for it), so only a router that keeps it (`disagg serve`) may take
 * them; a host that keeps none (the endpoint picker) refuses them.
 */
const STATEFUL: ReadonlyArray<{ field: string; applies: (value: unknown) => boolean; why: string }> = [
  {
    field: 'previous_response_id',
    applies: (value) => value !== undefined && value !== null,
    why: 'needs a stored response, which the endpoint picker does not keep',
  },
  {
    field: 'conversation',
    applies: (value) => value !== undefined && value !== null,
    why: 'needs a stored conversation, which the endpoint picker does not keep',
  },
  {
    field: 'store',
    applies: (value) => value === true,
    why: 'would store the response, which the endpoint picker cannot (it never reads the answer)',
  },
  {
    field: 'background',
    applies: (value) => value === true,
    why: 'needs a stored response, which the endpoint picker does not keep',
  },
];

/**
 * The stateful field of a Responses body, if it has one: a clear refusal naming it, never a
 * turn answered without the context the client meant it to have.
 */
export function statefulMisfit(body: EndpointBody): Misfit | undefined {
  for (const { field, applies, why } of STATEFUL) {
    if (!applies(body[field])) continue;
    return {
      param: field,
      message: `${field} ${why}: send the whole conversation in input, with store: false, or serve the Responses API through disagg serve, which stores it`,
    };
  }
  return undefined;
}

/**
 * OpenAI's Responses API (`POST /v1/responses`), as vLLM serves it: `input` (a text or a list
 * of items) and `instructions`, capped by `max_output_tokens`, answered as typed events
 * (`response.created` ... `response.completed`) or one `response` object. Disaggregated on
 * vLLM (its `kv_transfer_params` ride in the request and at the top of the answer); the
 * engines stay stateless: `disagg serve` keeps stored responses, chains and conversations itself,
 * a host that keeps none refuses them ({@link statefulMisfit}); a broken stream is not
 * continued (its events carry no token ids).
 */
export const responses = defineEndpoint({
  name: 'responses',
  path: '/v1/responses',
  serving: 'disaggregated',
  answer: 'responses',
  schema: z.looseObject({
    ...samplingRanges,
    model: z.nullish(modelName),
    input: z.union([z.string(), z.array(z.unknown()).check(z.minLength(1), contentCheck(responsesInputProblem))]),
    instructions: z.nullish(z.string()),
    max_output_tokens: z.nullish(int(1)),
    stream: z.nullish(z.boolean()),
    tools: z.nullish(z.array(z.looseObject({ type: z.string() }))),
    previous_response_id: z.nullish(responseId),
    conversation: z.nullish(z.union([responseId, z.looseObject({ id: responseId })])),
    metadata: z.nullish(z.record(z.string(), z.string())),
    request_id: z.nullish(responseId),
    store: z.nullish(z.boolean()),
    background: z.nullish(z.boolean()),
  }),
  misfit: (body) => {
    if (has(body, 'input')) return undefined;
    return {
      param: 'input',
      message: has(body, 'messages')
        ? 'The Responses API takes input, not messages: send messages to /v1/chat/completions'
        : 'The Responses API needs an input: a text or a list of items',
    };
  },
  budgetFields: ['max_output_tokens'],
  // Its one output cap, one answer whatever the body says, and nothing stored of a prefill.
  oneToken: Object.freeze({ max_output_tokens: 1, store: false }),
  promptIds: () => undefined,
  promptLength: () => undefined,
  promptFloor: (body) => ({ field: 'input', tokens: responsesPromptFloor(body) }),
  routingText: (body, maxChars) => messagesText(responsesMessages(body), maxChars),
  tokenize: 'chat',
  chatForm: responsesAsChat,
  resumable: false,
  answerIdField: 'request_id',
});
