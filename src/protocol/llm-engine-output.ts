import type { FinishReason } from './finish-reason.js';

/** Token usage as OpenAI reports it, with the detail a disaggregated router cares about. */
export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number | null | undefined; [field: string]: unknown } | null | undefined;
  completion_tokens_details?: Record<string, unknown> | null | undefined;
}

/**
 * One output of an LLM engine, with the reference's snake_case JSON field names so that it
 * serialises unchanged. Only `token_ids` is required; a terminal output has a
 * `finish_reason`. The fields are these and no others, so that a misspelt one
 * (`finsh_reason`) does not compile; what else a worker sent for the item (its roles, tool
 * calls, logprobs, engine fields) is its own JSON, `Annotated.wire(item)`, which a relay
 * passes on as it came.
 */
export interface LLMEngineOutput {
  /** The new token ids of this step (often one). */
  token_ids: number[];
  /** The decoded tokens, when the engine detokenises per token. */
  tokens?: (string | null)[] | null | undefined;
  /** The decoded text of this step. */
  text?: string | null | undefined;
  cum_log_probs?: number | null | undefined;
  log_probs?: number[] | null | undefined;
  top_logprobs?: unknown[] | null | undefined;
  /** Set on the last output of a sequence. */
  finish_reason?: FinishReason | null | undefined;
  /** Which choice this output belongs to, for `n` > 1. */
  index?: number | null | undefined;
  /** Handoff parameters a prefill worker returns for the decode worker (engine specific). */
  disaggregated_params?: unknown | undefined;
  completion_usage?: CompletionUsage | null | undefined;
}

function terminal(finish_reason: FinishReason): LLMEngineOutput {
  return { token_ids: [], finish_reason };
}

/**
 * Constructors of terminal outputs, mirroring the reference's.
 *
 * @example
 * LLMEngineOutput.length();         // { token_ids: [], finish_reason: 'length' }
 * LLMEngineOutput.error('OOM');     // { token_ids: [], finish_reason: { error: 'OOM' } }
 */
export const LLMEngineOutput = {
  /** The sequence hit its token budget. */
  length: (): LLMEngineOutput => terminal('length'),
  /** The sequence hit a stop condition. */
  stop: (): LLMEngineOutput => terminal('stop'),
  /** The model produced its end-of-sequence token. */
  eos: (): LLMEngineOutput => terminal('eos'),
  /** The engine cancelled the sequence. */
  cancelled: (): LLMEngineOutput => terminal('cancelled'),
  /** The engine failed; `message` is its own text. */
  error: (message: string): LLMEngineOutput => terminal({ error: message }),
} as const;
