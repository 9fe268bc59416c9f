import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import { answerHandoff } from '../protocol/engines/handoff-wire.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { CompletionUsage, LLMEngineOutput } from '../protocol/llm-engine-output.js';

type Json = Record<string, unknown>;

/**
 * OpenAI's finish reasons as the library's. The engines add their own: `abort` (a request
 * vLLM or SGLang dropped) is a cancellation, `error` an error, and TensorRT-LLM's
 * `not_finished` (a context response) no finish at all. Any other reason the library does not
 * know, such as a tool call (`tool_calls`, `function_call`), finishes successfully: `stop`.
 */
function finishReason(value: unknown, detail?: unknown): LLMEngineOutput['finish_reason'] {
  if (value === undefined || value === null || value === 'not_finished') return null;
  if (value === 'error')
    return { error: typeof detail === 'string' && detail !== '' ? detail : 'the worker reported an error' };
  return FinishReason.tryParse(value) ?? 'stop';
}

/** An error the worker put in a JSON body or chunk (`{error: {message}}`, `{object: 'error'}`, `{type: 'error'}`). */
export function errorText(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null) return undefined;
  const { error, object, message, type } = json as Json;
  if (typeof error === 'string') return error;
  if (typeof error === 'object' && error !== null) {
    const text = (error as Json).message;
    return typeof text === 'string' ? text : JSON.stringify(error);
  }
  // OpenAI's `{object: 'error'}`; the Responses API's error event, `{type: 'error', message}`.
  if (object === 'error' || type === 'error') return typeof message === 'string' ? message : 'error';
  return undefined;
}

/**
 * One OpenAI-style completion or chat completion, streamed chunk or whole response, as an
 * engine output: the first choice's text (`text`, `delta.content` or `message.content`), its
 * finish reason, `usage` as `completion_usage`, and the handoff parameters a prefill worker
 * answers with (vLLM's top-level `kv_transfer_params`, TensorRT-LLM's `disaggregated_params`)
 * as `disaggregated_params`. An error body is an error item with the worker's text.
 */
export function outputFromOpenAI(json: unknown): EngineItem {
  const error = errorText(json);
  if (error !== undefined) return Annotated.fromError(error);
  const body = (typeof json === 'object' && json !== null ? json : {}) as Json;
  const choices = Array.isArray(body.choices) ? (body.choices as Json[]) : [];
  const choice = choices[0];
  const output: LLMEngineOutput = { token_ids: [] };
  if (choice !== undefined) {
    const delta = choice.delta as Json | undefined;
    const message = choice.message as Json | undefined;
    const text = choice.text ?? delta?.content ?? message?.content;
    if (typeof text === 'string') output.text = text;
    if (Array.isArray(choice.token_ids)) output.token_ids = choice.token_ids as number[];
    if (typeof choice.index === 'number') output.index = choice.index;
    const reason = finishReason(choice.finish_reason, choice.stop_reason);
    if (reason !== null) output.finish_reason = reason;
  }
  if (typeof body.usage === 'object' && body.usage !== null) output.completion_usage = body.usage as CompletionUsage;
  const params = answerHandoff(body, choice);
  if (params !== undefined) output.disaggregated_params = params;
  return Annotated.fromData(output);
}

/**
 * SGLang's native `/generate`: each streamed chunk holds the whole text so far, so this
 * reader keeps what it has seen and gives the new part; `meta_info.finish_reason.type` is
 * the finish reason (`abort` is a cancellation), and its counts become `completion_usage`.
 */
export function generateReader(): (json: unknown) => EngineItem {
  let seen = 0;
  return (json) => {
    const error = errorText(json);
    if (error !== undefined) return Annotated.fromError(error);
    const body = (typeof json === 'object' && json !== null ? json : {}) as Json;
    const output: LLMEngineOutput = { token_ids: [] };
    if (typeof body.text === 'string') {
      output.text = body.text.slice(seen);
      seen = body.text.length;
    }
    const meta = (body.meta_info ?? {}) as Json;
    const finish = meta.finish_reason as Json | null | undefined;
    if (typeof finish === 'object' && finish !== null) {
      output.finish_reason = finishReason(finish.type, finish.message);
      const prompt = Number(meta.prompt_tokens ?? 0);
      const completion = Number(meta.completion_tokens ?? 0);
      output.completion_usage = {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        ...(meta.cached_tokens === undefined
          ? {}
          : { prompt_tokens_details: { cached_tokens: Number(meta.cached_tokens) } }),
      };
    }
    return Annotated.fromData(output);
  };
}
