// The agents' APIs as chat messages, as vLLM converts them before its chat template (Responses:
// `vllm/entrypoints/openai/responses/utils.py`; Anthropic Messages:
// `vllm/entrypoints/anthropic/serving.py`): what the router's tokenizer renders, and what
// routing compares, so that a turn of an agent shares its prefix with the turn before it as
// the engine's cache does. Pure functions over JSON; a part the router does not know is left
// out of the text (it cannot be routed on) rather than guessed.

import type { EndpointBody } from './endpoint.js';

type Json = Record<string, unknown>;

/** A chat message as the chat template reads it. */
export interface ChatMessage {
  role: string;
  content: string;
  tool_calls?: Json[];
  tool_call_id?: string;
  reasoning?: string;
}

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null;
const text = (value: unknown): string => (typeof value === 'string' ? value : '');

/** The texts of a list of content parts (`input_text`, `output_text`, `text`), joined as vLLM joins them. */
function partsText(content: unknown, separator: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content) if (isObject(part) && typeof part.text === 'string') texts.push(part.text);
  return texts.join(separator);
}

/** The tools of a body as chat's function tools (Responses' flat ones, Anthropic's `input_schema`). */
function chatTools(tools: unknown, schemaField: 'parameters' | 'input_schema'): Json[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  const out: Json[] = [];
  for (const tool of tools) {
    if (!isObject(tool) || typeof tool.name !== 'string') continue;
    out.push({
      type: 'function',
      function: {
        name: tool.name,
        ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
        ...(isObject(tool[schemaField]) ? { parameters: tool[schemaField] } : {}),
      },
    });
  }
  return out.length === 0 ? undefined : out;
}

/** An assistant message to add a tool call to: the last one, when it is an assistant's; else a new one. */
function assistantFor(messages: ChatMessage[]): ChatMessage {
  const last = messages.at(-1);
  if (last?.role === 'assistant') return last;
  const added: ChatMessage = { role: 'assistant', content: '' };
  messages.push(added);
  return added;
}

/**
 * A Responses body (`instructions`, `input`: a text or a list of items) as chat messages:
 * the instructions as the system message, each message item with its role and text, a
 * `function_call` as the assistant's tool call, a `function_call_output` as a tool message, a
 * reasoning item as the assistant's reasoning.
 *
 * @example
 * responsesMessages({ instructions: 'Be brief', input: 'Hi' });
 * // [{ role: 'system', content: 'Be brief' }, { role: 'user', content: 'Hi' }]
 */
export function responsesMessages(body: EndpointBody): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (typeof body.instructions === 'string' && body.instructions !== '') {
    messages.push({ role: 'system', content: body.instructions });
  }
  const { input } = body;
  if (typeof input === 'string') {
    messages.push({ role: 'user', content: input });
    return messages;
  }
  if (!Array.isArray(input)) return messages;
  for (const item of input) {
    if (!isObject(item)) continue;
    const type = item.type ?? 'message';
    if (type === 'message' && typeof item.role === 'string') {
      messages.push({ role: item.role, content: partsText(item.content, '\n') });
    } else if (type === 'function_call') {
      const assistant = assistantFor(messages);
      assistant.tool_calls ??= [];
      assistant.tool_calls.push({
        id: text(item.call_id),
        type: 'function',
        function: { name: text(item.name), arguments: text(item.arguments) },
      });
    } else if (type === 'function_call_output') {
      messages.push({ role: 'tool', tool_call_id: text(item.call_id), content: partsText(item.output, '\n') });
    } else if (type === 'reasoning') {
      const assistant = assistantFor(messages);
      assistant.reasoning = partsText(item.content ?? item.summary, '\n');
    }
  }
  return messages;
}

/**
 * A Responses body as a chat completions body for the router's tokenizer: its messages, its
 * function tools, and `chat_template_kwargs` (with `reasoning.effort` as `reasoning_effort`).
 */
export function responsesAsChat(body: EndpointBody): EndpointBody {
  const tools = chatTools(body.tools, 'parameters');
  const effort = isObject(body.reasoning) ? body.reasoning.effort : undefined;
  const kwargs = isObject(body.chat_template_kwargs) ? body.chat_template_kwargs : undefined;
  return {
    messages: responsesMessages(body),
    ...(tools === undefined ? {} : { tools }),
    ...(typeof effort === 'string' || kwargs !== undefined
      ? { chat_template_kwargs: { ...(typeof effort === 'string' ? { reasoning_effort: effort } : {}), ...kwargs } }
      : {}),
  };
}

/** Claude Code's first system block, different in every request: vLLM and llm-d leave it out, so does routing. */
const BILLING_HEADER = 'x-anthropic-billing-header';

/** An Anthropic `system` (a text, or text blocks joined without a separator, as vLLM does). */
function systemText(system: unknown): string {
  if (typeof system === 'string') return system;
  if (!Array.isArray(system)) return '';
  let out = '';
  for (const block of system) {
    if (!isObject(block) || typeof block.text !== 'string' || block.text.startsWith(BILLING_HEADER)) continue;
    out += block.text;
  }
  return out;
}

/**
 * An Anthropic Messages body (`system`, `messages` of content blocks) as chat messages, as
 * vLLM converts it: the system prompt first, text blocks as the message's text, `tool_use` as
 * the assistant's tool calls (arguments as JSON), each `tool_result` as a tool message before
 * the rest of its user turn, `thinking` as the assistant's reasoning.
 *
 * @example
 * anthropicMessages({ system: 'Be brief', messages: [{ role: 'user', content: 'Hi' }] });
 * // [{ role: 'system', content: 'Be brief' }, { role: 'user', content: 'Hi' }]
 */
export function anthropicMessages(body: EndpointBody): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const system = systemText(body.system);
  if (system !== '') messages.push({ role: 'system', content: system });
  if (!Array.isArray(body.messages)) return messages;
  for (const message of body.messages) {
    if (!isObject(message) || typeof message.role !== 'string') continue;
    const { role, content } = message;
    if (!Array.isArray(content)) {
      messages.push({ role, content: text(content) });
      continue;
    }
    const own: ChatMessage = { role, content: '' };
    const texts: string[] = [];
    for (const block of content) {
      if (!isObject(block)) continue;
      if (block.type === 'text') texts.push(text(block.text));
      else if (block.type === 'thinking') own.reasoning = text(block.thinking);
      else if (block.type === 'tool_use') {
        own.tool_calls ??= [];
        own.tool_calls.push({
          id: text(block.id),
          type: 'function',
          function: { name: text(block.name), arguments: JSON.stringify(block.input ?? {}) },
        });
      } else if (block.type === 'tool_result') {
        messages.push({ role: 'tool', tool_call_id: text(block.tool_use_id), content: partsText(block.content, '\n') });
      }
    }
    own.content = texts.join('\n');
    if (own.content !== '' || own.tool_calls !== undefined || own.reasoning !== undefined) messages.push(own);
  }
  return messages;
}

/** An Anthropic Messages body as a chat completions body for the router's tokenizer: messages and tools. */
export function anthropicAsChat(body: EndpointBody): EndpointBody {
  const tools = chatTools(body.tools, 'input_schema');
  const kwargs = isObject(body.chat_template_kwargs) ? { chat_template_kwargs: body.chat_template_kwargs } : {};
  return { messages: anthropicMessages(body), ...(tools === undefined ? {} : { tools }), ...kwargs };
}
