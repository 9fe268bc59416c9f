import { randomBytes } from 'node:crypto';
import type { JsonObject } from '../../agent-state/agent-store.js';

// The items of a turn as the router keeps them: the client's input as a list of items (a text
// is one user message), each with an id (OpenAI lists input items by id, and a conversation's
// items are addressed by it), and an answer's output items as the engine wrote them.

/** The id prefixes OpenAI gives items of each type; any other type's items get `item_`. */
const PREFIXES: Readonly<Record<string, string>> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  reasoning: 'rs',
  custom_tool_call: 'ctc',
  custom_tool_call_output: 'ctco',
};

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null;

/** A new id for an item of `type`: its prefix and 192 random bits. */
export function newItemId(type: unknown): string {
  const prefix = (typeof type === 'string' ? PREFIXES[type] : undefined) ?? 'item';
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

/** A new conversation id: `conv_` and 192 random bits, unguessable. */
export function newConversationId(): string {
  return `conv_${randomBytes(24).toString('hex')}`;
}

/**
 * A Responses `input` as a list of items, each with an id: a text is one user message (its
 * content one `input_text` part, as OpenAI lists it); an item keeps every field it has, and
 * gets an id of its type when it has none. An item without `type` is a message (the easy
 * form), as the API reads it.
 *
 * @internal
 */
export function inputItems(input: unknown): JsonObject[] {
  if (typeof input === 'string') {
    return [
      { id: newItemId('message'), type: 'message', role: 'user', content: [{ type: 'input_text', text: input }] },
    ];
  }
  if (!Array.isArray(input)) return [];
  return input.filter(isObject).map(withId);
}

/** `item` with an id: its own, or a new one of its type (a message when it names none). */
export function withId(item: JsonObject): JsonObject {
  if (typeof item.id === 'string' && item.id !== '') return item;
  const type = item.type ?? (item.role === undefined ? undefined : 'message');
  return { id: newItemId(type), ...(item.type === undefined && type === 'message' ? { type } : {}), ...item };
}

/** The output items of a response object, in order (its messages, tool calls, reasoning). */
export function outputItems(response: JsonObject | undefined): JsonObject[] {
  const output = response?.output;
  return Array.isArray(output) ? output.filter(isObject) : [];
}
