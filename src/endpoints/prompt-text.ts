// Reading a prompt out of a body, shared by the endpoints: the text routing compares and the
// token ids a body gives. Separators are control characters no client text is made of, so two
// conversations share a prefix only where their messages do.

import type { EndpointBody } from './endpoint.js';

/** The first `max` characters of `text`, one fewer if that would split a surrogate pair. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 0) return '';
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

/** A prompt as text: a string, a batch's first string, or token ids joined by commas. */
export function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return '';
  const [first] = prompt;
  // A batch of prompts routes by its first; a list of token ids is one prompt.
  if (typeof first === 'string') return first;
  if (Array.isArray(first)) return first.join(',');
  return prompt.join(',');
}

/** A message's content as text: a string, or its parts' texts in order. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    const { text } = (part ?? {}) as { text?: unknown };
    if (typeof text === 'string') out += text;
  }
  return out;
}

/**
 * Chat messages as routing text: each message's role and text, in order, clipped piece by
 * piece (slicing the whole afterwards would copy all of it first).
 */
export function messagesText(messages: readonly unknown[], maxChars: number): string {
  let out = '';
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) continue;
    const { role, content } = message as { role?: unknown; content?: unknown };
    const head = `${typeof role === 'string' ? role : ''}\u0000`;
    const body = contentText(content);
    if (out.length + head.length + body.length + 1 <= maxChars) {
      out += `${head}${body}\u0001`;
      continue;
    }
    out += clip(`${head}${clip(body, maxChars - out.length - head.length)}`, maxChars - out.length);
    break;
  }
  return out;
}

/** The token ids of the first of `fields` that holds a list of ids (a batch's first list). */
export function idsAt(body: EndpointBody, ...fields: readonly string[]): readonly number[] | undefined {
  for (const field of fields) {
    const value = body[field];
    if (!Array.isArray(value) || value.length === 0) continue;
    const first = value[0];
    const ids = Array.isArray(first) ? first : value;
    if (ids.length > 0 && ids.every((id) => Number.isInteger(id))) return ids as number[];
  }
  return undefined;
}

/** The length of `value` when it is one prompt of token ids (a flat list of integers). */
export function flatIdsLength(value: unknown): number | undefined {
  return Array.isArray(value) && value.length > 0 && value.every((id) => typeof id === 'number')
    ? value.length
    : undefined;
}
