// How a fake worker plans an answer, whatever its route: the prompt's (fake) tokens and ids,
// the answer's pieces per choice, the finish, logprobs and token ids asked for, and the
// engines' differences in what they say of a prompt. The JSON shapes each route gives a plan
// are the formats' (`formats/`); keeping the plan apart lets a new route add its shape alone.
import { randomUUID } from 'node:crypto';
import type { AnswerShape } from '../endpoints/endpoint.js';
import type { EngineName } from '../protocol/engines/wires.js';
import { elementsOf, samplesOf } from '../protocol/request-counts.js';

/** The logprob of every (fake) output token. */
export const OUTPUT_LOGPROB = -0.25;
/** The logprob of every (fake) prompt token but the first (which has none). */
export const PROMPT_LOGPROB = -0.5;
const PROMPT_ID_BASE = 1000;
const OUTPUT_ID_BASE = 2000;
/** A (fake) prompt token id: the prompt's tokens count from 1,000. */
export const promptId = (at: number): number => PROMPT_ID_BASE + at;
/** A (fake) output token id: the answer's tokens count from 2,000. */
export const outputId = (at: number): number => OUTPUT_ID_BASE + at;

/**
 * What a fake decode worker answers, beyond its default `tok0 tok1 ...` content. Each list is
 * streamed one piece per chunk.
 */
export interface FakeAnswer {
  /**
   * Reasoning pieces, before the content: chat's `reasoning_content`, a Responses reasoning
   * item, a Messages thinking block.
   */
  reasoning?: string[] | undefined;
  /** Content pieces; by default `tok0 `, `tok1 `, ... up to the token budget. */
  content?: string[] | undefined;
  /**
   * Tool calls: each streamed as vLLM does, a first delta with its `id`, `type` and function
   * `name`, then its `arguments` in pieces (a Responses `function_call` item, a Messages
   * `tool_use` block). The finish reason is then `tool_calls`.
   */
  toolCalls?: Array<{ name: string; arguments: string[] }> | undefined;
  /**
   * The finish reason sent: by default `tool_calls` with tool calls, `length` when the token
   * budget ran out, `stop` otherwise. `abort` is what vLLM and SGLang send for a request they
   * dropped.
   */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'abort' | undefined;
  /**
   * Instead of the finish, an error inside the 200 stream, as vLLM sends it: an error chunk
   * (`data: {"error": {..., "code": 400}}`, then `[DONE]`); on Responses the stream cut short
   * (no `response.completed`); on Messages an Anthropic `error` event (no `message_stop`). A
   * whole answer is that status.
   */
  error?: { code: number; message: string } | undefined;
}

/** Whether a streamed request asked for a usage chunk at the end. */
export function wantsUsage(body: Record<string, unknown>): boolean {
  return (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
}

/**
 * The text of a conversation's prompt, rendered as JSON: chat's `messages`, Anthropic's
 * `system` then `messages`, Responses' `instructions` then `input`; undefined for a body of
 * none of them. The system prompt counts too, as the engines' chat template renders it.
 */
function conversationText(body: Record<string, unknown>): string | undefined {
  const head = (value: unknown) => (value === undefined || value === null ? '' : JSON.stringify(value));
  if (body.messages !== undefined) return `${head(body.system)}${JSON.stringify(body.messages)}`;
  if (body.input !== undefined) return `${head(body.instructions)}${JSON.stringify(body.input)}`;
  return undefined;
}

/** The prompt's length in (fake) tokens: a quarter of its characters. */
export function promptTokens(body: Record<string, unknown>): number {
  const ids = body.prompt ?? body.input_ids;
  if (Array.isArray(ids) && ids.length > 0 && ids.every((id) => typeof id === 'number')) return ids.length;
  const text =
    typeof body.prompt === 'string'
      ? body.prompt
      : (conversationText(body) ?? JSON.stringify(body.text ?? body.prompt ?? ''));
  return Math.max(1, Math.ceil(text.length / 4));
}

/** The usage of an answer of `completion` tokens to `body` (prefill's computed it all: cached half). */
export function usageOf(body: Record<string, unknown>, completion: number, cached?: number) {
  const prompt = promptTokens(body);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
  };
}

/** How many choices an answer has: the prompts (strings or lists of token ids) times `n`, as the engines count. */
export const choiceCount = (body: Record<string, unknown>): number => elementsOf(body);

/** One choice of an answer: what it says, piece by piece, and how it ends. */
export interface Choice {
  index: number;
  steps: Array<{ kind: 'reasoning' | 'content' | 'tool' | 'arguments'; text: string; tool?: number; id?: string }>;
  finish: string;
}

/** The engine a fake answers as, and whether the call's prompt KV came from a prefill worker. */
export interface Engine {
  readonly name: EngineName;
  /** A decode call with a prefill's KV: it never ran the prompt forward. */
  readonly remote?: boolean | undefined;
}

/**
 * What an answer says of its prompt, as the engine computes it: its (fake) tokens, four
 * characters each; the text an echo puts first (completions: the prompt; vLLM's chat: the last
 * message, when its role is the answer's); whether the echo comes with the prompt's logprobs;
 * vLLM's `prompt_logprobs` (whole answers); SGLang's input logprobs from `logprob_start_len`.
 * A decode with remote KV has none of the logprobs on SGLang (it answers empty lists); vLLM's
 * computes the prompt again to answer them (vLLM with skip_reading_prefix_cache honoured).
 */
export interface PromptPlan {
  /** The (fake) tokens of the prompt choice `index` answers. */
  pieces(index: number): string[];
  /** What an echo puts before choice `index`, if anything. */
  echo(index: number): string | undefined;
  echoLogprobs: boolean;
  promptLogprobs: boolean;
  /** SGLang: the first prompt token whose logprob is answered (`logprob_start_len`). */
  inputLogprobsFrom: ((index: number) => number) | undefined;
  /** Asked for something of the prompt a decode with remote KV cannot give without computing it. */
  asked: boolean;
}

/** The plan of an answer: its choices and their pieces, and the tokens it counts. */
export interface AnswerPlan {
  choices: Choice[];
  completionTokens: number;
  error: FakeAnswer['error'];
  logprobs: boolean;
  prompt: PromptPlan;
  engine: Engine;
  /** The request it answers: what Responses echoes of it (`instructions`, `tools`, its cap, ...). */
  request: Record<string, unknown>;
  /**
   * With `return_token_ids`: the prompt's ids and the id of the answer's first token (each step
   * one more), which the answer carries as vLLM's does (`prompt_token_ids`, `token_ids`).
   */
  tokenIds: { prompt: number[]; first: number } | undefined;
}

/** The prompt's text (a completions prompt, SGLang's `text`, a chat rendered as JSON), and its (fake) tokens. */
function promptPieces(body: Record<string, unknown>, index = 0): string[] {
  const ids = body.prompt ?? body.input_ids;
  if (Array.isArray(ids) && ids.length > 0 && ids.every((id) => typeof id === 'number'))
    return ids.map((id) => `<${id}>`);
  const source = Array.isArray(body.prompt)
    ? body.prompt[index]
    : Array.isArray(body.text)
      ? body.text[index]
      : undefined;
  const text =
    typeof source === 'string'
      ? source
      : typeof body.prompt === 'string'
        ? body.prompt
        : typeof body.text === 'string'
          ? body.text
          : (conversationText(body) ?? JSON.stringify(body.prompt ?? ''));
  const pieces: string[] = [];
  const chars = [...text];
  for (let at = 0; at < chars.length; at += 4) pieces.push(chars.slice(at, at + 4).join(''));
  return pieces.length === 0 ? [''] : pieces;
}

/** The typed-event APIs (Responses, Anthropic Messages): one answer, none of the prompt's logprobs or echo. */
const agentShape = (shape: AnswerShape): boolean => shape === 'responses' || shape === 'messages';

function planPrompt(body: Record<string, unknown>, engine: Engine, shape: AnswerShape): PromptPlan {
  // Choice i answers prompt floor(i / n): the engines give each prompt its n choices in a row.
  const n = samplesOf(body).n;
  const pieces = (index: number) => promptPieces(body, Math.floor(index / n));
  if (agentShape(shape)) {
    // Neither API has an echo or prompt logprobs (vLLM ignores such keys there).
    const none = () => undefined;
    return {
      pieces,
      echo: none,
      echoLogprobs: false,
      promptLogprobs: false,
      inputLogprobsFrom: undefined,
      asked: false,
    };
  }
  // The route says what the request is (its endpoint's answer shape), not the body's fields.
  const chat = shape === 'chat';
  const generate = shape === 'generate';
  const logprobs = body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false;
  let echo: (index: number) => string | undefined = () => undefined;
  if (!chat && !generate && body.echo === true) echo = (index) => pieces(index).join('');
  if (chat && body.echo === true && engine.name === 'vllm') {
    const last = (body.messages as Array<{ role?: unknown; content?: unknown }>).at(-1);
    const text = last?.role === 'assistant' && typeof last.content === 'string' ? last.content : '';
    if (text !== '') echo = () => text;
  }
  const echoLogprobs = !chat && !generate && body.echo === true && logprobs;
  const promptLogprobs =
    engine.name === 'vllm' &&
    ((body.prompt_logprobs !== undefined && body.prompt_logprobs !== null) ||
      echoLogprobs ||
      (chat && body.echo === true));
  const start = typeof body.logprob_start_len === 'number' ? body.logprob_start_len : -1;
  const inputLogprobsFrom =
    generate && body.return_logprob === true
      ? (index: number) => (start >= 0 ? Math.min(start, pieces(index).length) : pieces(index).length - 1)
      : undefined;
  const asked = echoLogprobs || promptLogprobs || inputLogprobsFrom !== undefined;
  if (engine.remote === true && engine.name === 'sglang') {
    // SGLang's decode never computed the prompt: its input logprobs are empty.
    return {
      pieces,
      echo,
      echoLogprobs: false,
      promptLogprobs: false,
      inputLogprobsFrom: inputLogprobsFrom && ((index) => pieces(index).length),
      asked,
    };
  }
  return { pieces, echo, echoLogprobs, promptLogprobs, inputLogprobsFrom, asked };
}

/**
 * Plans the answer to `body` from `answer` (or the default tokens), within the token budget, as
 * the engine answers a request of that shape (the endpoint of the route it came in on).
 */
export function planAnswer(
  body: Record<string, unknown>,
  answer: FakeAnswer | undefined,
  defaultTokens: number,
  engine: Engine,
  shape: AnswerShape,
): AnswerPlan {
  const sampling = body.sampling_params as { max_new_tokens?: unknown } | undefined;
  const limit = Number(
    body.max_tokens ??
      body.max_completion_tokens ??
      body.max_output_tokens ??
      sampling?.max_new_tokens ??
      Number.POSITIVE_INFINITY,
  );
  // A continuation (a token-id prompt ending in ids this fake generated) goes on from there.
  const generated = generatedBefore(body);
  const count = Math.max(0, Math.min(defaultTokens - generated, limit));
  const content = answer?.content ?? Array.from({ length: count }, (_, i) => defaultPiece(body, generated + i));
  const tools = answer?.toolCalls ?? [];
  const finish =
    answer?.finishReason ??
    (tools.length > 0 ? 'tool_calls' : answer?.content === undefined && count === limit ? 'length' : 'stop');
  // Responses and Messages have no `n` (vLLM ignores the key there): always one answer.
  const choices: Choice[] = Array.from({ length: agentShape(shape) ? 1 : choiceCount(body) }, (_, index) => ({
    index,
    finish,
    steps: [
      ...(answer?.reasoning ?? []).map((text) => ({ kind: 'reasoning' as const, text })),
      ...content.map((text) => ({ kind: 'content' as const, text })),
      ...tools.flatMap((tool, k) => [
        { kind: 'tool' as const, text: tool.name, tool: k, id: `call_${index}_${k}_${randomUUID().slice(0, 8)}` },
        ...tool.arguments.map((text) => ({ kind: 'arguments' as const, text, tool: k })),
      ]),
    ],
  }));
  const logprobs =
    !agentShape(shape) &&
    (body.logprobs === true ||
      typeof body.logprobs === 'number' ||
      typeof body.top_logprobs === 'number' ||
      body.return_logprob === true);
  return {
    choices,
    completionTokens: choices[0]?.steps.length ?? 0,
    error: answer?.error,
    logprobs,
    prompt: planPrompt(body, engine, shape),
    engine,
    request: body,
    tokenIds:
      body.return_token_ids === true && !agentShape(shape)
        ? { prompt: fakePromptIds(body), first: outputId(generated) }
        : undefined,
  };
}

/** FNV-1a over a string: the fakes' stable hash. */
function fnv(text: string): number {
  let hash = 0x811c9dc5;
  for (let at = 0; at < text.length; at++) {
    hash ^= text.charCodeAt(at);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** The ids of a token-id prompt (`prompt` or SGLang's `input_ids`), if it is one. */
function idsOf(body: Record<string, unknown>): number[] | undefined {
  const ids = body.prompt ?? body.input_ids;
  return Array.isArray(ids) && ids.length > 0 && ids.every((id) => typeof id === 'number') ? ids : undefined;
}

/**
 * How many tokens of a token-id prompt this fake generated: the ids from 2,000 to 2,999 at its
 * end, after a prompt's own. A router continuing a broken stream sends them back, and the
 * answer goes on from there, as a real engine's would.
 */
function generatedBefore(body: Record<string, unknown>): number {
  const ids = idsOf(body);
  if (ids === undefined) return 0;
  const mine = (id: number) => id >= OUTPUT_ID_BASE && id < OUTPUT_ID_BASE + 1000;
  let count = 0;
  for (let at = ids.length - 1; at >= 0 && mine(ids[at] as number); at--) count++;
  // All of them: a prompt of its own that happens to use those ids, not a continuation.
  return count === ids.length ? 0 : count;
}

/**
 * The prompt's (fake) token ids: a token-id prompt's own (without what this fake generated),
 * else one id per token of its text, from 1,000 up by the token's text.
 */
export function fakePromptIds(body: Record<string, unknown>): number[] {
  const ids = idsOf(body);
  if (ids !== undefined) return ids.slice(0, ids.length - generatedBefore(body));
  const pieces = promptPieces(body);
  return Array.from({ length: promptTokens(body) }, (_, at) => PROMPT_ID_BASE + (fnv(pieces[at] ?? '') % 1000));
}

/**
 * The default piece `at` of an answer: `tok<at> `, or with a `seed` a word that depends on the
 * prompt's ids, the seed and the position, so that a stream continued elsewhere can be
 * compared with an unbroken one token by token.
 */
function defaultPiece(body: Record<string, unknown>, at: number): string {
  if (typeof body.seed !== 'number') return `tok${at} `;
  const prompt = fakePromptIds(body).join(',');
  return `w${fnv(`${prompt}/${body.seed}/${at}`) % 10_000} `;
}
