// The shapes OpenAI's two generation APIs answer in, written once: what the router writes
// itself (an item no worker sent, a continuation's chunks, the end of a budget spent) takes
// them from here, as the fake workers do.

import type { AnswerShape } from './endpoint.js';

type Json = Record<string, unknown>;

/** The OpenAI answer shapes: chat completions' and completions'. */
export type OpenAIShape = Extract<AnswerShape, 'chat' | 'text'>;

/**
 * Per shape: the `object` of a streamed chunk and of a whole answer, and the prefix of the
 * answer's id (`chatcmpl-...`, `cmpl-...`), as OpenAI and vLLM name them.
 *
 * @example
 * OPENAI_OBJECTS.chat.chunk; // 'chat.completion.chunk'
 */
export const OPENAI_OBJECTS = Object.freeze({
  chat: Object.freeze({ chunk: 'chat.completion.chunk', whole: 'chat.completion', idPrefix: 'chatcmpl' }),
  text: Object.freeze({ chunk: 'text_completion', whole: 'text_completion', idPrefix: 'cmpl' }),
});

/** The OpenAI shape of an endpoint's answer: chat's, or completions' for every other. */
export function openAIShape(answer: AnswerShape): OpenAIShape {
  return answer === 'chat' ? 'chat' : 'text';
}

/**
 * One choice of a streamed chunk: chat's `delta` (the `role` with it when `role` is given: the
 * first chunk of a choice), completions' `text`; `extra` after (a stop reason, token ids).
 *
 * @example
 * streamedChoice('chat', 0, 'Hi', null); // { index: 0, delta: { content: 'Hi' }, logprobs: null, finish_reason: null }
 */
export function streamedChoice(
  shape: OpenAIShape,
  index: number,
  text: string,
  finishReason: unknown,
  options: { role?: string | undefined; extra?: Json | undefined } = {},
): Json {
  if (shape === 'text') return { index, text, logprobs: null, finish_reason: finishReason, ...options.extra };
  const delta =
    options.role !== undefined ? { role: options.role, content: text } : text === '' ? {} : { content: text };
  return { index, delta, logprobs: null, finish_reason: finishReason, ...options.extra };
}

/**
 * One choice of a whole answer: chat's assistant `message`, completions' `text`.
 *
 * @example
 * wholeChoice('text', 0, 'Hi', 'stop'); // { index: 0, text: 'Hi', logprobs: null, finish_reason: 'stop' }
 */
export function wholeChoice(shape: OpenAIShape, index: number, text: string, finishReason: unknown): Json {
  return shape === 'chat'
    ? { index, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finishReason }
    : { index, text, logprobs: null, finish_reason: finishReason };
}
