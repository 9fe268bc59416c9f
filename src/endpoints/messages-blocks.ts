// What an Anthropic Messages body's `messages` and `system` may hold, block by block, as data:
// read from anthropic-sdk-python 0.121.0 (August 2026), `src/anthropic/types/message_param.py`
// (`MessageParam`: its roles, and content as a text or `ContentBlockParam`s and
// `ContentBlock`s) and its beta namespace (`beta/beta_content_block_param.py`, what Claude Code
// sends through the beta API), with vLLM's `vllm/entrypoints/anthropic/protocol.py`
// (`AnthropicContentBlock`, which adds `tool_reference`; `AnthropicMessage`, whose roles
// include Claude Code's `ctx` and `msg`). Only the types, roles and the shape of the content
// are checked; every other field of a block passes as it is (a `tool_result`'s nested
// content, `cache_control`, signatures: the engine's business).

import { type ContentProblem, isObject, oneOf } from './content-checks.js';
import type { EndpointBody } from './endpoint.js';

/** Every content block type of Anthropic's Messages API (the stable and beta ones), and vLLM's `tool_reference`. */
export const MESSAGES_BLOCK_TYPES: readonly string[] = Object.freeze([
  'text',
  'image',
  'document',
  'search_result',
  'thinking',
  'redacted_thinking',
  'tool_use',
  'tool_result',
  'tool_reference',
  'server_tool_use',
  'web_search_tool_result',
  'web_fetch_tool_result',
  'code_execution_tool_result',
  'bash_code_execution_tool_result',
  'text_editor_code_execution_tool_result',
  'tool_search_tool_result',
  'advisor_tool_result',
  'mcp_tool_use',
  'mcp_tool_result',
  'container_upload',
  'compaction',
  'mid_conv_system',
  'tool_addition',
  'tool_removal',
  'fallback',
]);

/**
 * The roles of a message: Anthropic's (`user`, `assistant`, `system`), and the `ctx` and `msg`
 * that Claude Code sends since 2.1.154, which vLLM reads as `user` (vllm-project/vllm#44000).
 */
export const MESSAGES_ROLES: readonly string[] = Object.freeze(['user', 'assistant', 'system', 'ctx', 'msg']);

const BLOCK_TYPES = new Set(MESSAGES_BLOCK_TYPES);
const ROLES = new Set(MESSAGES_ROLES);

/**
 * The first message of an Anthropic `messages` list that no engine takes: not an object, of
 * an unknown role, with content neither a text nor a list of known blocks ({@link blocksProblem});
 * undefined when all fit. Its path is under `messages`.
 *
 * @example
 * messagesProblem([{ role: 'user', content: 5 }]);
 * // { path: [0, 'content'], message: 'must be a text or a list of content blocks', quiet: true }
 */
export function messagesProblem(messages: readonly unknown[]): ContentProblem | undefined {
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    if (!isObject(message))
      return { path: [i], message: 'must be a message (an object with role and content)', quiet: true };
    const { role, content } = message;
    if (typeof role !== 'string' || !ROLES.has(role)) {
      return { path: [i, 'role'], message: oneOf('a role', MESSAGES_ROLES, role) };
    }
    if (typeof content === 'string') continue;
    if (!Array.isArray(content))
      return { path: [i, 'content'], message: 'must be a text or a list of content blocks', quiet: true };
    const problem = blocksProblem(content);
    if (problem !== undefined) return { ...problem, path: [i, 'content', ...problem.path] };
  }
  return undefined;
}

/**
 * The first block of a list of content blocks (a message's, or `system`) that is not an
 * object of a known type; its path is under the list.
 *
 * @example
 * blocksProblem([{ type: 'text', text: 'Hi' }, { type: 'txt' }]);
 * // { path: [1, 'type'], message: "must be one of the Messages API's content block types (did you mean text?)" }
 */
export function blocksProblem(blocks: readonly unknown[]): ContentProblem | undefined {
  for (let j = 0; j < blocks.length; j++) {
    const block = blocks[j];
    if (!isObject(block)) return { path: [j], message: 'must be a content block (an object with a type)', quiet: true };
    if (typeof block.type !== 'string' || !BLOCK_TYPES.has(block.type)) {
      return {
        path: [j, 'type'],
        message: oneOf("one of the Messages API's content block types", MESSAGES_BLOCK_TYPES, block.type),
      };
    }
  }
  return undefined;
}

/**
 * The fewest tokens an Anthropic body's prompt can be under any chat template, without the
 * tokenizer: one per chat message its `messages` become, as vLLM converts them
 * (`vllm/entrypoints/anthropic/serving.py`): each user's or assistant's message with a text;
 * of a user's blocks, one per `tool_result` (a tool message) and one for its text;
 * of an assistant's, one. Every chat template marks a message with at least one token (its
 * role's header, or an end of turn). The system prompt counts nothing: vLLM joins it into one
 * message, or leaves it out (Claude Code's billing header alone).
 *
 * @example
 * messagesPromptFloor({ system: 'Be brief', messages: [{ role: 'user', content: 'Hi' }] }); // 1
 */
export function messagesPromptFloor(body: EndpointBody): number {
  const { messages } = body;
  if (!Array.isArray(messages)) return 0;
  let floor = 0;
  for (const message of messages) {
    if (!isObject(message) || message.role === 'system') continue;
    const { role, content } = message;
    if (typeof content === 'string' || role === 'assistant') {
      floor++;
      continue;
    }
    if (!Array.isArray(content)) continue;
    let text = 0;
    for (const block of content) {
      if (!isObject(block)) continue;
      if (block.type === 'tool_result') floor++;
      else if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') text = 1;
    }
    floor += text;
  }
  return floor;
}
