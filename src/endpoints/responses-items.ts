// What a Responses body's `input` may hold, item by item, as data: read from openai-python
// 3.3.1 (August 2026), `src/openai/types/responses/response_input_item_param.py`
// (`ResponseInputItemParam`), `response_output_item.py` (`ResponseOutputItem`),
// `response_input_content_param.py` and `response_output_message_param.py`. vLLM's and
// SGLang's `ResponsesRequest.input` is `str | list[ResponseInputItemParam | ResponseOutputItem]`
// of that package, so a type outside these lists is refused by both engines: here, before any
// worker. Only the types, roles and the shape of a message's content are checked; every other
// field of an item passes as it is (the engine's business).

import { type ContentProblem, isObject, oneOf } from './content-checks.js';
import type { EndpointBody } from './endpoint.js';

/**
 * Every input item type of OpenAI's Responses API (input and output items: a client sends back
 * what an answer held). An item without `type` is a message when it has a `role`
 * (`EasyInputMessageParam`), an item reference when it has only an `id` (`ItemReference`,
 * whose `type` is optional).
 */
export const RESPONSES_ITEM_TYPES: readonly string[] = Object.freeze([
  'message',
  'function_call',
  'function_call_output',
  'reasoning',
  'item_reference',
  'custom_tool_call',
  'custom_tool_call_output',
  'compaction',
  'compaction_trigger',
  'file_search_call',
  'web_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'tool_search_call',
  'tool_search_output',
  'additional_tools',
  'mcp_list_tools',
  'mcp_approval_request',
  'mcp_approval_response',
  'mcp_call',
  'program',
  'program_output',
]);

/** The roles of a message item (`EasyInputMessageParam.role`). */
export const RESPONSES_ROLES: readonly string[] = Object.freeze(['user', 'assistant', 'system', 'developer']);

/**
 * The content part types of a message item: an input message's (`input_text`, `input_image`,
 * `input_file`) and an assistant's output message's (`output_text`, `refusal`).
 */
export const RESPONSES_PART_TYPES: readonly string[] = Object.freeze([
  'input_text',
  'input_image',
  'input_file',
  'output_text',
  'refusal',
]);

const ITEM_TYPES = new Set(RESPONSES_ITEM_TYPES);
const ROLES = new Set(RESPONSES_ROLES);
const PART_TYPES = new Set(RESPONSES_PART_TYPES);

/** What an item is: its type, or what an item without one stands for; undefined when it is neither. */
function kindOf(item: Record<string, unknown>): unknown {
  const { type } = item;
  if (type !== undefined && type !== null) return type;
  if (item.role !== undefined) return 'message';
  return typeof item.id === 'string' ? 'item_reference' : undefined;
}

/**
 * The first item of a Responses `input` list that no engine takes: not an object, of no known
 * type, a message of an unknown role or with content that is neither a text nor a list of
 * known parts; undefined when every item fits. Its path is under `input`.
 *
 * @example
 * responsesInputProblem([{ role: 'user', content: [{ type: 'input_txt', text: 'Hi' }] }]);
 * // { path: [0, 'content', 0, 'type'], message: 'must be one of input_text, ...' }
 */
export function responsesInputProblem(input: readonly unknown[]): ContentProblem | undefined {
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (!isObject(item)) return { path: [i], message: 'must be an input item (an object)', quiet: true };
    const kind = kindOf(item);
    if (kind === undefined) {
      return {
        path: [i],
        message: 'must be an input item: a message (role and content) or an object with a type',
        quiet: true,
      };
    }
    if (typeof kind !== 'string' || !ITEM_TYPES.has(kind)) {
      return { path: [i, 'type'], message: oneOf("one of the Responses API's item types", RESPONSES_ITEM_TYPES, kind) };
    }
    if (kind === 'message') {
      const problem = messageProblem(item, i);
      if (problem !== undefined) return problem;
    }
  }
  return undefined;
}

/** A message item's role and content. */
function messageProblem(item: Record<string, unknown>, i: number): ContentProblem | undefined {
  const { role, content } = item;
  if (typeof role !== 'string' || !ROLES.has(role)) {
    return { path: [i, 'role'], message: oneOf('a role', RESPONSES_ROLES, role) };
  }
  if (typeof content === 'string') return undefined;
  if (!Array.isArray(content))
    return { path: [i, 'content'], message: 'must be a text or a list of content parts', quiet: true };
  for (let j = 0; j < content.length; j++) {
    const part: unknown = content[j];
    if (!isObject(part))
      return { path: [i, 'content', j], message: 'must be a content part (an object with a type)', quiet: true };
    if (typeof part.type !== 'string' || !PART_TYPES.has(part.type)) {
      return {
        path: [i, 'content', j, 'type'],
        message: oneOf('a content part type', RESPONSES_PART_TYPES, part.type),
      };
    }
  }
  return undefined;
}

/**
 * The fewest tokens a Responses body's prompt can be under any chat template, without the
 * tokenizer: one per chat message it becomes, as vLLM converts it
 * (`vllm/entrypoints/openai/responses/utils.py`): the instructions, a text input, each message
 * item (an assistant's may fill the message a tool call or a reasoning item began, one each),
 * each `function_call_output` (a tool message). Every chat template marks a message with at
 * least one token (its role's header, or an end of turn). Tool calls, reasoning and references
 * count nothing: they may join a message or be left out by a template.
 *
 * @example
 * responsesPromptFloor({ instructions: 'Be brief', input: [{ role: 'user', content: 'Hi' }] }); // 2
 */
export function responsesPromptFloor(body: EndpointBody): number {
  const { input, instructions } = body;
  let floor = typeof instructions === 'string' && instructions !== '' ? 1 : 0;
  if (typeof input === 'string') return floor + 1;
  if (!Array.isArray(input)) return floor;
  for (const item of input) {
    if (!isObject(item)) continue;
    const kind = kindOf(item);
    if (kind === 'message' || kind === 'function_call_output') floor++;
  }
  return floor;
}
