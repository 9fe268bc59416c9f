// Decode migration, the pure part: which requests can be continued on another worker, what is
// asked of the workers so that they can be, and the continuation's body. The stream that does
// it is `migrating-stream`; what the client is sent of a continuation is `continuation-chunks`.
import { budgetOf, type Endpoint } from '../endpoints/endpoint.js';
import { type EndpointName, isEndpointName } from '../endpoints/registry.js';
import { elementsOf } from '../protocol/request-counts.js';
import type { RequestBody } from './request-shaping.js';

/**
 * Decode migration (NVIDIA Dynamo's `--migration-limit`): a decode stream that breaks after its
 * first token (the worker's connection reset, an error event, a worker silent past the idle
 * budget) is continued on another worker as a token-id completion of the prompt's token ids
 * plus those generated so far, with the rest of the token budget and the same sampling
 * settings; the client reads one stream (same id, same choice, each token once, one finish).
 *
 * @example
 * disaggregate({ ...options, migration: { limit: 2 } }); // up to two moves per request, on decode workers
 */
export interface MigrationOptions {
  /** How many times one request may move to another worker; 0 (the default) turns it off. */
  limit: number;
  /**
   * Where a continuation computes its prompt (the client's prompt and what was generated):
   * `'decode'` (the default: aggregated on a decode worker, as Dynamo does) or `'prefill'` (a
   * new prefill, then a decode worker takes its KV, as for any request).
   */
  via?: 'decode' | 'prefill' | undefined;
  /**
   * The longest sequence (prompt and generated tokens) continued; a longer one fails as
   * without migration (Dynamo's `--migration-max-seq-len`). No bound by default.
   */
  maxSeqLen?: number | undefined;
  /**
   * The model's context length (`max_model_len`): a chat request that sets no token budget is
   * resumed with what the context leaves; without it such a request is replayed.
   */
  maxModelLen?: number | undefined;
}

/**
 * How a request would be continued: `resume`, a token-id completion of the prompt's ids and the
 * generated ones (the workers return token ids on this route); `replay`, the client's request
 * again from the start, the text the client already has skipped (stop strings, which only the
 * engine checks and which it holds text back for, or a route whose stream does not return
 * token ids, such as SGLang's chat); or neither, and why.
 */
export type MigrationPlan = { kind: 'resume' } | { kind: 'replay' } | { kind: 'refused'; why: string };

const GUIDED_FIELDS = [
  // vLLM (structured_outputs today; the guided_* fields of older releases)
  'structured_outputs',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'structural_tag',
  // SGLang
  'regex',
  'json_schema',
  'ebnf',
] as const;

const present = (value: unknown) => value !== undefined && value !== null && value !== false;

/** What {@link migrationPlan} and {@link resumeBody} know beyond the request. */
export interface PlanInputs {
  /** The routes whose streams return token ids when asked (the connector's); chat and completions by default. */
  tokenIdRoutes?: readonly EndpointName[] | undefined;
  /** The API the request came in on. */
  endpoint: Endpoint;
  /** The model's context length (`max_model_len`), for a chat request that sets no budget. */
  maxModelLen?: number | undefined;
}

/** OpenAI's default `max_tokens` of a completion (vLLM's and SGLang's too); chat's is the context. */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

/**
 * Whether a streamed request can be continued faithfully, and how (see {@link MigrationPlan});
 * `known` says which routes return token ids and the model's context length.
 * Refused: several prompts or samples (`n`, `best_of`), guided decoding and structured outputs
 * (a grammar's state is not in the tokens: ai-dynamo/dynamo #7930), tools (the chat server
 * parses tool calls from the whole output), logprobs (a continuation's come in another shape),
 * an echo or a suffix, presence and frequency penalties (an engine applies them to generated
 * tokens only, which a continuation sends as prompt), SGLang's native `/generate` and the agents'
 * APIs (Responses, Anthropic Messages: their events carry no token ids), a request
 * that is not streamed, and a replay the client asked token ids of (they would repeat).
 *
 * @example
 * const endpoint = endpointNamed('completions');
 * migrationPlan({ model: 'm', prompt: 'Hi', stream: true }, { endpoint }); // { kind: 'resume' }
 * migrationPlan({ model: 'm', prompt: 'Hi', stream: true, n: 2 }, { endpoint }); // { kind: 'refused', why: 'n > 1 ...' }
 */
export function migrationPlan(request: RequestBody, known: PlanInputs): MigrationPlan {
  const { tokenIdRoutes = ['chat', 'completions'], maxModelLen, endpoint } = known;
  const refused = (why: string): MigrationPlan => ({ kind: 'refused', why });
  if (request.stream !== true) return refused('the request is not streamed');
  const chat = endpoint.answer === 'chat';
  if (!endpoint.resumable) {
    return refused(
      `a ${endpoint.path} stream is not continued: only OpenAI's completions and chat resume as a token-id completion`,
    );
  }
  if (elementsOf(request) > 1) return refused('n > 1 or several prompts: each choice would need its own continuation');
  if (typeof request.best_of === 'number' && request.best_of > 1) return refused('best_of > 1');
  const guided = GUIDED_FIELDS.find((field) => present(request[field]));
  if (guided !== undefined) return refused(`guided decoding (${guided}): a grammar's state is not in the tokens`);
  const format = request.response_format as { type?: unknown } | undefined | null;
  if (typeof format === 'object' && format !== null && format.type !== undefined && format.type !== 'text') {
    return refused(`response_format ${String(format.type)}: guided decoding`);
  }
  if (Array.isArray(request.tools) && request.tools.length > 0 && request.tool_choice !== 'none') {
    return refused('tools: the chat server parses tool calls from the whole output');
  }
  if (present(request.logprobs) || present(request.top_logprobs)) return refused('logprobs');
  if (request.echo === true) return refused('echo');
  if (present(request.suffix)) return refused('suffix');
  for (const penalty of ['presence_penalty', 'frequency_penalty'] as const) {
    const value = request[penalty];
    if (typeof value === 'number' && value !== 0) return refused(`${penalty}: it counts generated tokens only`);
  }
  // Chat without a budget generates to the end of the context: a resume must know where that is.
  const bounded = !chat || budgetOf(endpoint, request) !== undefined || maxModelLen !== undefined;
  const resumable =
    bounded &&
    stopStrings(request).length === 0 &&
    isEndpointName(endpoint.name) &&
    tokenIdRoutes.includes(endpoint.name);
  if (resumable) return { kind: 'resume' };
  if (request.return_token_ids === true) return refused('token ids asked of a replayed request would repeat');
  return { kind: 'replay' };
}

/** The request's stop strings (`stop`, a string or a list). */
export function stopStrings(request: RequestBody): string[] {
  const { stop } = request;
  if (typeof stop === 'string') return stop === '' ? [] : [stop];
  return Array.isArray(stop) ? stop.filter((each): each is string => typeof each === 'string' && each !== '') : [];
}

/**
 * The decode body of a request that may migrate: the workers are asked for the token ids of
 * the prompt and of each chunk (vLLM's and SGLang's `return_token_ids`), which the client gets
 * only if it asked for them.
 */
export function withTokenIds(body: RequestBody): RequestBody {
  return body.return_token_ids === true ? body : { ...body, return_token_ids: true };
}

/** What a continuation is made from: the prompt's token ids and those generated before the break. */
export interface Continuation {
  promptIds: readonly number[];
  generatedIds: readonly number[];
}

/** Fields of the client's request a token-id completion does not take (chat's, the prompt's, the stream's). */
const DROPPED = new Set([
  'messages',
  'prompt',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'chat_template',
  'chat_template_kwargs',
  'add_generation_prompt',
  'continue_final_message',
  'documents',
  'reasoning_effort',
  'include_reasoning',
  'echo',
  'prompt_logprobs',
  'max_completion_tokens',
  'n',
  'best_of',
]);

/**
 * The body of a resume: a streamed token-id completion (`prompt` the prompt's ids, then the
 * generated ones) with the same model and sampling settings, the budget that is left
 * (`max_tokens` less what was generated: the client's, else a completion's default of 16, else
 * for chat what the context leaves), `min_tokens` less
 * what was generated, and the token ids asked for. A replay sends the client's request itself.
 * Throws a `RangeError` when the budget is spent (nothing is left to generate).
 *
 * @example
 * resumeBody({ model: 'm', messages, max_tokens: 20, temperature: 0, stream: true },
 *   { promptIds: [1, 2], generatedIds: [7, 8, 9] }, undefined, endpointNamed('chat'));
 * // { model: 'm', temperature: 0, stream: true, prompt: [1, 2, 7, 8, 9], max_tokens: 17, return_token_ids: true }
 */
export function resumeBody(
  request: RequestBody,
  from: Continuation,
  maxModelLen: number | undefined,
  endpoint: Endpoint,
): RequestBody {
  const generated = from.generatedIds.length;
  const body: RequestBody = {};
  for (const [field, value] of Object.entries(request)) if (!DROPPED.has(field)) body[field] = value;
  body.prompt = [...from.promptIds, ...from.generatedIds];
  // Always a budget: a completion without one stops at 16 tokens, not where the client's would.
  const chat = endpoint.answer === 'chat';
  const budget =
    budgetOf(endpoint, request)?.tokens ??
    (chat
      ? maxModelLen === undefined
        ? undefined
        : maxModelLen - from.promptIds.length
      : COMPLETION_DEFAULT_MAX_TOKENS);
  if (budget === undefined) throw new RangeError("a chat request without a budget needs the model's context length");
  if (budget - generated <= 0) throw new RangeError(`the token budget (${budget}) is spent`);
  body.max_tokens = budget - generated;
  if (typeof request.min_tokens === 'number') {
    const left = request.min_tokens - generated;
    if (left > 0) body.min_tokens = left;
    else delete body.min_tokens;
  }
  body.stream = true;
  body.return_token_ids = true;
  return body;
}
