// The agents' APIs as the library's items: OpenAI's Responses and Anthropic's Messages, each a
// stream of typed events (`event: <type>`, the same `type` in the JSON) or one whole object.
// What an item needs is read (the text of a delta, the finish, the usage in OpenAI's names,
// the handoff); the worker's JSON itself goes on untouched (`Annotated.wire`).

import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { answerHandoff } from '../protocol/engines/handoff-wire.js';
import type { FinishReason } from '../protocol/finish-reason.js';
import type { CompletionUsage, LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { errorText } from './openai-output.js';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null;
const count = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) ? value : 0);

/** How a typed-event API's answer reads: one JSON document (an event's data, `event` its name; or a whole body) as an item. */
export type EventReader = (json: unknown, event?: string) => EngineItem;

/**
 * Responses' usage in OpenAI's completion names (`input_tokens` as `prompt_tokens`, the
 * cached ones as `prompt_tokens_details.cached_tokens`), for the library's counts.
 */
export function responsesUsage(usage: unknown): CompletionUsage | undefined {
  if (!isObject(usage)) return undefined;
  const prompt = count(usage.input_tokens);
  const completion = count(usage.output_tokens);
  const details = usage.input_tokens_details;
  const cached = isObject(details) && typeof details.cached_tokens === 'number' ? details.cached_tokens : undefined;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: typeof usage.total_tokens === 'number' ? usage.total_tokens : prompt + completion,
    ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
  };
}

/** The finish of a Responses `response` object, by its status. */
function responseFinish(response: Json): LLMEngineOutput['finish_reason'] | 'failed' {
  switch (response.status) {
    case 'completed':
      return 'stop';
    case 'incomplete': {
      const reason = isObject(response.incomplete_details) ? response.incomplete_details.reason : undefined;
      return reason === 'max_output_tokens' ? 'length' : reason === 'content_filter' ? 'content_filter' : 'stop';
    }
    case 'cancelled':
      return 'cancelled';
    case 'failed':
      return 'failed';
    default:
      return null;
  }
}

/** The text of a Responses `response` object's message items (a whole answer's). */
function responseText(response: Json): string {
  let out = '';
  if (!Array.isArray(response.output)) return out;
  for (const item of response.output) {
    if (!isObject(item) || item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content) if (isObject(part) && typeof part.text === 'string') out += part.text;
  }
  return out;
}

/** A whole `response` object (a body, or the one `response.completed` carries) as an output. */
function responseOutput(response: Json, withText: boolean): EngineItem {
  const finish = responseFinish(response);
  if (finish === 'failed') {
    const error = isObject(response.error) ? response.error.message : undefined;
    return Annotated.fromError(typeof error === 'string' ? error : 'the response failed');
  }
  const output: LLMEngineOutput = { token_ids: [] };
  if (withText) output.text = responseText(response);
  if (finish !== null) output.finish_reason = finish;
  const usage = responsesUsage(response.usage);
  if (usage !== undefined) output.completion_usage = usage;
  const params = answerHandoff(response, undefined);
  if (params !== undefined) output.disaggregated_params = params;
  return Annotated.fromData(output);
}

/**
 * Reads OpenAI's Responses as vLLM serves it: an `output_text` delta is text, the final
 * `response.completed` (or `response.incomplete`) the finish with the usage and, for a whole
 * body, `kv_transfer_params`; `response.failed` and an `error` event are failures. Every
 * other event (the items' and parts' beginnings and ends, reasoning, tool calls) is an item
 * without text, relayed as it came.
 */
export function responsesReader(): EventReader {
  return (json, event) => {
    if (!isObject(json)) return Annotated.fromData({ token_ids: [] });
    const type = typeof json.type === 'string' ? json.type : event;
    if (type === 'error') return Annotated.fromError(errorText(json) ?? 'the worker failed the response');
    if (type === 'response.output_text.delta') {
      return Annotated.fromData({ token_ids: [], text: typeof json.delta === 'string' ? json.delta : '' });
    }
    if (type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed') {
      return isObject(json.response)
        ? responseOutput(json.response, false)
        : Annotated.fromError(`${type} without its response`);
    }
    // A whole answer: the response object itself.
    if (json.object === 'response') return responseOutput(json, true);
    const error = errorText(json);
    if (error !== undefined && json.type === undefined) return Annotated.fromError(error);
    return Annotated.fromData({ token_ids: [] });
  };
}

/** Anthropic's stop reasons as the library's finishes: a cap reached is `length`, every other stop a `stop`. */
function anthropicFinish(reason: unknown): FinishReason {
  return reason === 'max_tokens' || reason === 'model_context_window_exceeded' ? 'length' : 'stop';
}

/**
 * Anthropic's usage in OpenAI's completion names: the prompt is the input tokens with those
 * read from and written to the cache (Anthropic counts them apart), the cached ones those read.
 */
export function anthropicUsage(usage: unknown, start?: Json): CompletionUsage | undefined {
  if (!isObject(usage)) return undefined;
  // A message_delta without the input counts (Anthropic's own API) has them in message_start.
  const input = usage.input_tokens === undefined ? start : usage;
  const read = input?.cache_read_input_tokens;
  const prompt = count(input?.input_tokens) + count(read) + count(input?.cache_creation_input_tokens);
  const completion = count(usage.output_tokens);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    ...(typeof read === 'number' ? { prompt_tokens_details: { cached_tokens: read } } : {}),
  };
}

/** The text blocks of a whole Anthropic message. */
function messageText(message: Json): string {
  let out = '';
  if (!Array.isArray(message.content)) return out;
  for (const block of message.content)
    if (isObject(block) && block.type === 'text' && typeof block.text === 'string') out += block.text;
  return out;
}

/**
 * Reads Anthropic's Messages as vLLM serves it: a `text_delta` is text, `message_delta` (with
 * its `stop_reason`) the finish with the usage (the input counts of `message_start` where the
 * delta has none); a whole `message` its text, finish, usage and `kv_transfer_params`. Every
 * other event (`message_start`, blocks' starts and stops, thinking and tool input deltas,
 * `message_stop`, `ping`) is an item without text, relayed as it came.
 */
export function messagesReader(): EventReader {
  let start: Json | undefined;
  return (json, event) => {
    if (!isObject(json)) return Annotated.fromData({ token_ids: [] });
    const type = typeof json.type === 'string' ? json.type : event;
    if (type === 'error') return Annotated.fromError(errorText(json) ?? 'the worker failed the message');
    if (type === 'content_block_delta') {
      const delta = isObject(json.delta) ? json.delta : {};
      return Annotated.fromData({
        token_ids: [],
        ...(delta.type === 'text_delta' && typeof delta.text === 'string' ? { text: delta.text } : {}),
      });
    }
    if (type === 'message_start') {
      const message = isObject(json.message) ? json.message : {};
      start = isObject(message.usage) ? message.usage : undefined;
      return Annotated.fromData({ token_ids: [] });
    }
    if (type === 'message_delta') {
      const delta = isObject(json.delta) ? json.delta : {};
      const output: LLMEngineOutput = { token_ids: [], finish_reason: anthropicFinish(delta.stop_reason) };
      const usage = anthropicUsage(json.usage, start);
      if (usage !== undefined) output.completion_usage = usage;
      return Annotated.fromData(output);
    }
    if (type === 'message') {
      const output: LLMEngineOutput = {
        token_ids: [],
        text: messageText(json),
        finish_reason: anthropicFinish(json.stop_reason),
      };
      const usage = anthropicUsage(json.usage);
      if (usage !== undefined) output.completion_usage = usage;
      const params = answerHandoff(json, undefined);
      if (params !== undefined) output.disaggregated_params = params;
      return Annotated.fromData(output);
    }
    return Annotated.fromData({ token_ids: [] });
  };
}
