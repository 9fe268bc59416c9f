// The answers of the fake workers, in the JSON shapes each route has when vLLM and SGLang send
// it: OpenAI completions and chat completions (streamed chunks, the usage chunk, whole answers,
// reasoning, tool calls, logprobs in both formats, several choices) and SGLang's /generate.
import { randomUUID } from 'node:crypto';
import { elementsOf, samplesOf } from '../protocol/request-counts.js';

/**
 * What a fake decode worker answers, beyond its default `tok0 tok1 ...` content. Each list is
 * streamed one piece per chunk.
 */
export interface FakeAnswer {
  /** Reasoning pieces (`reasoning_content`, before the content; chat). */
  reasoning?: string[] | undefined;
  /** Content pieces; by default `tok0 `, `tok1 `, ... up to the token budget. */
  content?: string[] | undefined;
  /**
   * Tool calls (chat): each streamed as vLLM does, a first delta with its `id`, `type` and
   * function `name`, then its `arguments` in pieces. The finish reason is then `tool_calls`.
   */
  toolCalls?: Array<{ name: string; arguments: string[] }> | undefined;
  /**
   * The finish reason sent: by default `tool_calls` with tool calls, `length` when the token
   * budget ran out, `stop` otherwise. `abort` is what vLLM and SGLang send for a request they
   * dropped.
   */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'abort' | undefined;
  /**
   * Instead of the finish, an error chunk inside the 200 stream, as vLLM sends it
   * (`data: {"error": {..., "code": 400}}`, then `[DONE]`); a whole answer is that status.
   */
  error?: { code: number; message: string } | undefined;
}

/** Whether a streamed request asked for a usage chunk at the end. */
export function wantsUsage(body: Record<string, unknown>): boolean {
  return (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
}

/** The prompt's length in (fake) tokens: a quarter of its characters. */
export function promptTokens(body: Record<string, unknown>): number {
  const ids = body.prompt ?? body.input_ids;
  if (Array.isArray(ids) && ids.length > 0 && ids.every((id) => typeof id === 'number')) return ids.length;
  const text =
    typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.messages ?? body.text ?? body.prompt ?? '');
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
interface Choice {
  index: number;
  steps: Array<{ kind: 'reasoning' | 'content' | 'tool' | 'arguments'; text: string; tool?: number; id?: string }>;
  finish: string;
}

/** The engine a fake answers as, and whether the call's prompt KV came from a prefill worker. */
export interface Engine {
  readonly name: 'vllm' | 'sglang' | 'trtllm';
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
          : JSON.stringify(body.messages ?? body.prompt ?? '');
  const pieces: string[] = [];
  const chars = [...text];
  for (let at = 0; at < chars.length; at += 4) pieces.push(chars.slice(at, at + 4).join(''));
  return pieces.length === 0 ? [''] : pieces;
}

function planPrompt(body: Record<string, unknown>, engine: Engine): PromptPlan {
  // Choice i answers prompt floor(i / n): the engines give each prompt its n choices in a row.
  const n = samplesOf(body).n;
  const pieces = (index: number) => promptPieces(body, Math.floor(index / n));
  const chat = Array.isArray(body.messages);
  const generate = !chat && body.prompt === undefined && (body.text !== undefined || body.input_ids !== undefined);
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

/** Plans the answer to `body` from `answer` (or the default tokens), within the token budget. */
export function planAnswer(
  body: Record<string, unknown>,
  answer: FakeAnswer | undefined,
  defaultTokens: number,
  engine: Engine = { name: 'vllm' },
): AnswerPlan {
  const sampling = body.sampling_params as { max_new_tokens?: unknown } | undefined;
  const limit = Number(
    body.max_tokens ?? body.max_completion_tokens ?? sampling?.max_new_tokens ?? Number.POSITIVE_INFINITY,
  );
  // A continuation (a token-id prompt ending in ids this fake generated) goes on from there.
  const generated = generatedBefore(body);
  const count = Math.max(0, Math.min(defaultTokens - generated, limit));
  const content = answer?.content ?? Array.from({ length: count }, (_, i) => defaultPiece(body, generated + i));
  const tools = answer?.toolCalls ?? [];
  const finish =
    answer?.finishReason ??
    (tools.length > 0 ? 'tool_calls' : answer?.content === undefined && count === limit ? 'length' : 'stop');
  const choices: Choice[] = Array.from({ length: choiceCount(body) }, (_, index) => ({
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
    body.logprobs === true ||
    typeof body.logprobs === 'number' ||
    typeof body.top_logprobs === 'number' ||
    body.return_logprob === true;
  return {
    choices,
    completionTokens: choices[0]?.steps.length ?? 0,
    error: answer?.error,
    logprobs,
    prompt: planPrompt(body, engine),
    engine,
    tokenIds: body.return_token_ids === true ? { prompt: fakePromptIds(body), first: outputId(generated) } : undefined,
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

/** The JSON shapes of one route's answers. */
export interface Format {
  /** The chunks of one step of every choice still going (round robin over the choices). */
  streamed(plan: AnswerPlan): object[];
  usage(usage: object): object;
  whole(plan: AnswerPlan, usage: object): object;
}

const OUTPUT_LOGPROB = -0.25;
const PROMPT_LOGPROB = -0.5;
const PROMPT_ID_BASE = 1000;
const OUTPUT_ID_BASE = 2000;
/** A (fake) token id: the prompt's tokens count from 1,000, the answer's from 2,000. */
const promptId = (at: number) => PROMPT_ID_BASE + at;
const outputId = (at: number) => OUTPUT_ID_BASE + at;

const chatLogprobs = (text: string) => ({
  content: [{ token: text, logprob: OUTPUT_LOGPROB, bytes: [...Buffer.from(text)], top_logprobs: [] }],
});

/**
 * Completions logprobs of `tokens` (a list of [text, logprob] with null for the prompt's
 * first), their offsets counted from `offset` in code points as vLLM counts them; SGLang's
 * are all -1 (not supported there).
 */
function textLogprobs(tokens: Array<[string, number | null]>, offset: number, engine: Engine) {
  let at = offset;
  const text_offset = tokens.map(([text]) => {
    const here = at;
    at += [...text].length;
    return engine.name === 'sglang' ? -1 : here;
  });
  return {
    tokens: tokens.map(([text]) => text),
    token_logprobs: tokens.map(([, logprob]) => logprob),
    top_logprobs: tokens.map(([text, logprob]) => (logprob === null ? null : { [text]: logprob })),
    text_offset,
  };
}

/** The prompt's own entries, as completions' logprobs list them: the first has no logprob. */
const promptEntries = (plan: AnswerPlan, index: number): Array<[string, number | null]> =>
  plan.prompt.pieces(index).map((piece, i) => [piece, i === 0 ? null : PROMPT_LOGPROB]);

/** vLLM's `prompt_logprobs`: none for the first token, then each token's id with its logprob. */
const vllmPromptLogprobs = (plan: AnswerPlan, index: number) =>
  plan.prompt
    .pieces(index)
    .map((piece, i) =>
      i === 0 ? null : { [String(promptId(i))]: { logprob: PROMPT_LOGPROB, rank: 1, decoded_token: piece } },
    );

/** The JSON shapes of each route: OpenAI completions, chat completions, SGLang's /generate. */
export function formatFor(path: string, model = 'fake-model'): Format {
  const id = `fake-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  if (path === '/v1/chat/completions') return chatFormat(id, created, model);
  if (path === '/generate') return generateFormat(id);
  return completionFormat(id, created, model);
}

/** The token ids of step `k` of a choice, when the request asked for them (`return_token_ids`). */
const stepIds = (plan: AnswerPlan, k: number) =>
  plan.tokenIds === undefined ? {} : { token_ids: [plan.tokenIds.first + k] };

/** Every token id of a choice (a whole answer's), when the request asked for them. */
const allIds = (plan: AnswerPlan, choice: Choice) =>
  plan.tokenIds === undefined
    ? {}
    : { token_ids: choice.steps.map((_, k) => (plan.tokenIds as { first: number }).first + k) };

/** Interleaves the choices' chunks: each choice's first chunk, then each one's second, and so on. */
function interleave(plan: AnswerPlan, chunksOf: (choice: Choice) => object[]): object[] {
  const lists = plan.choices.map(chunksOf);
  const out: object[] = [];
  for (let at = 0; lists.some((list) => at < list.length); at++) {
    for (const list of lists) if (at < list.length) out.push(list[at] as object);
  }
  return out;
}

function chatFormat(id: string, created: number, model: string): Format {
  const chunk = (choice: object) => ({ id, object: 'chat.completion.chunk', created, model, choices: [choice] });
  return {
    streamed: (plan) =>
      interleave(plan, (choice) => [
        // As vLLM does: a first chunk with the role and no text (and the prompt's ids, when
        // asked for), then the echo, if any.
        {
          ...chunk({
            index: choice.index,
            delta: { role: 'assistant', content: '' },
            logprobs: null,
            finish_reason: null,
          }),
          ...(plan.tokenIds === undefined ? {} : { prompt_token_ids: plan.tokenIds.prompt }),
        },
        ...(plan.prompt.echo(choice.index) === undefined
          ? []
          : [
              chunk({
                index: choice.index,
                delta: { content: plan.prompt.echo(choice.index) },
                logprobs: null,
                finish_reason: null,
              }),
            ]),
        ...choice.steps.map((step, k) =>
          chunk({
            index: choice.index,
            ...stepIds(plan, k),
            delta:
              step.kind === 'reasoning'
                ? { reasoning_content: step.text }
                : step.kind === 'content'
                  ? { content: step.text }
                  : step.kind === 'tool'
                    ? {
                        tool_calls: [
                          {
                            index: step.tool,
                            id: step.id,
                            type: 'function',
                            function: { name: step.text, arguments: '' },
                          },
                        ],
                      }
                    : { tool_calls: [{ index: step.tool, function: { arguments: step.text } }] },
            logprobs: plan.logprobs && step.kind === 'content' ? chatLogprobs(step.text) : null,
            finish_reason: null,
          }),
        ),
        ...(plan.error === undefined
          ? [
              chunk({
                index: choice.index,
                delta: {},
                logprobs: null,
                finish_reason: choice.finish,
                stop_reason: null,
                ...(plan.tokenIds === undefined ? {} : { token_ids: [] }),
              }),
            ]
          : []),
      ]),
    usage: (usage) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage }),
    whole: (plan, usage) => ({
      id,
      object: 'chat.completion',
      created,
      model,
      choices: plan.choices.map((choice) => {
        const reasoning = choice.steps.filter((s) => s.kind === 'reasoning').map((s) => s.text);
        const content = choice.steps.filter((s) => s.kind === 'content').map((s) => s.text);
        const tools = choice.steps.filter((s) => s.kind === 'tool');
        return {
          index: choice.index,
          message: {
            role: 'assistant',
            content: `${plan.prompt.echo(choice.index) ?? ''}${content.join('')}`,
            ...(reasoning.length === 0 ? {} : { reasoning_content: reasoning.join('') }),
            ...(tools.length === 0
              ? {}
              : {
                  tool_calls: tools.map((tool) => ({
                    id: tool.id,
                    type: 'function',
                    function: {
                      name: tool.text,
                      arguments: choice.steps
                        .filter((s) => s.kind === 'arguments' && s.tool === tool.tool)
                        .map((s) => s.text)
                        .join(''),
                    },
                  })),
                }),
          },
          logprobs: plan.logprobs ? { content: content.flatMap((text) => chatLogprobs(text).content) } : null,
          finish_reason: choice.finish,
          stop_reason: null,
          ...allIds(plan, choice),
        };
      }),
      ...(plan.prompt.promptLogprobs ? { prompt_logprobs: vllmPromptLogprobs(plan, 0) } : {}),
      ...(plan.tokenIds === undefined ? {} : { prompt_token_ids: plan.tokenIds.prompt }),
      usage,
    }),
  };
}

function completionFormat(id: string, created: number, model: string): Format {
  const chunk = (choice: object) => ({ id, object: 'text_completion', created, model, choices: [choice] });
  const texts = (choice: Choice) => choice.steps.filter((step) => step.kind === 'content').map((step) => step.text);
  const echoOf = (plan: AnswerPlan, choice: Choice) => plan.prompt.echo(choice.index) ?? '';
  const head = (plan: AnswerPlan, choice: Choice) =>
    plan.prompt.echoLogprobs ? promptEntries(plan, choice.index) : [];
  return {
    streamed: (plan) =>
      interleave(plan, (choice) => {
        const out: object[] = [];
        // vLLM counts a stream's offsets over what it has sent of the choice (the echo first).
        let sent = 0;
        const emit = (text: string, entries: Array<[string, number | null]>, step?: number) => {
          const logprobs = plan.logprobs ? textLogprobs(entries, sent, plan.engine) : null;
          sent += [...text].length;
          out.push(
            chunk({
              index: choice.index,
              text,
              logprobs,
              finish_reason: null,
              stop_reason: null,
              // As vLLM does with return_token_ids: the prompt's on a choice's first chunk.
              ...(plan.tokenIds !== undefined && out.length === 0 ? { prompt_token_ids: plan.tokenIds.prompt } : {}),
              ...(plan.tokenIds === undefined ? {} : step === undefined ? { token_ids: [] } : stepIds(plan, step)),
            }),
          );
        };
        const pieces = texts(choice);
        if (pieces.length === 0 && echoOf(plan, choice) !== '') emit(echoOf(plan, choice), head(plan, choice));
        for (const [i, text] of pieces.entries()) {
          if (i === 0) emit(`${echoOf(plan, choice)}${text}`, [...head(plan, choice), [text, OUTPUT_LOGPROB]], i);
          else emit(text, [[text, OUTPUT_LOGPROB]], i);
        }
        if (plan.error === undefined) {
          out.push(
            chunk({
              index: choice.index,
              text: '',
              logprobs: null,
              finish_reason: choice.finish,
              stop_reason: null,
              ...(plan.tokenIds === undefined ? {} : { token_ids: [] }),
            }),
          );
        }
        return out;
      }),
    usage: (usage) => ({ id, object: 'text_completion', created, model, choices: [], usage }),
    whole: (plan, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: plan.choices.map((choice) => ({
        index: choice.index,
        text: `${echoOf(plan, choice)}${texts(choice).join('')}`,
        logprobs: plan.logprobs
          ? textLogprobs(
              [...head(plan, choice), ...texts(choice).map((text) => [text, OUTPUT_LOGPROB] as [string, number])],
              0,
              plan.engine,
            )
          : null,
        finish_reason: choice.finish,
        stop_reason: null,
        ...(plan.prompt.promptLogprobs ? { prompt_logprobs: vllmPromptLogprobs(plan, choice.index) } : {}),
        ...(plan.tokenIds === undefined ? {} : { prompt_token_ids: plan.tokenIds.prompt }),
        ...allIds(plan, choice),
      })),
      usage,
    }),
  };
}

/**
 * SGLang's native answers: the whole text so far in each chunk, the finish in `meta_info`, and
 * with `return_logprob` the input logprobs (from `logprob_start_len`) and the output's so far,
 * each `[logprob, token id, text]` (no text: `return_text_in_logprobs` is off).
 */
function generateFormat(id: string): Format {
  const meta = (
    plan: AnswerPlan,
    choice: Choice,
    done: number,
    finished: boolean,
    usage?: { prompt_tokens?: number },
  ) => ({
    id,
    finish_reason: finished
      ? { type: choice.finish, ...(choice.finish === 'abort' ? { message: 'Abort by the scheduler' } : {}) }
      : null,
    prompt_tokens: usage?.prompt_tokens ?? 0,
    completion_tokens: done,
    ...(plan.logprobs && plan.prompt.inputLogprobsFrom !== undefined
      ? {
          input_token_logprobs: plan.prompt
            .pieces(choice.index)
            .map((_, i) => [i === 0 ? null : PROMPT_LOGPROB, promptId(i), null])
            .slice(plan.prompt.inputLogprobsFrom(choice.index)),
          output_token_logprobs: Array.from({ length: done }, (_, k) => [OUTPUT_LOGPROB, outputId(k), null]),
        }
      : {}),
  });
  const cumulative = (choice: Choice, upTo: number) =>
    choice.steps
      .slice(0, upTo)
      .map((step) => step.text)
      .join('');
  return {
    streamed: (plan) =>
      interleave(plan, (choice) => [
        ...choice.steps.map((_, i) => ({
          text: cumulative(choice, i + 1),
          ...(plan.choices.length > 1 ? { index: choice.index } : {}),
          meta_info: meta(plan, choice, i + 1, false),
        })),
        {
          text: cumulative(choice, choice.steps.length),
          ...(plan.choices.length > 1 ? { index: choice.index } : {}),
          meta_info: meta(plan, choice, choice.steps.length, true),
        },
      ]),
    usage: (usage) => ({ text: '', meta_info: { id, finish_reason: null, ...usage } }),
    whole: (plan, usage) => {
      const answers = plan.choices.map((choice) => ({
        text: cumulative(choice, choice.steps.length),
        meta_info: meta(plan, choice, choice.steps.length, true, usage as { prompt_tokens: number }),
      }));
      return answers.length === 1 ? (answers[0] as object) : answers;
    },
  };
}

/**
 * The one-token answer of a prefill call, in the shape of its route (with `cachedTokens` of
 * its prompt cached: half of it when not given); `abort` (a prefill the engine dropped) or `stop` (its one token ended the
 * answer) when the answer it was given says so.
 */
export function oneTokenAnswer(
  record: { path: string; body: Record<string, unknown> },
  model: string | undefined,
  answer?: FakeAnswer,
  cachedTokens?: number,
  engine: Engine = { name: 'vllm' },
) {
  const prompt = promptTokens(record.body);
  // A prefill whose one token ends the answer (an end of sequence) says so; otherwise `length`.
  const finishReason =
    answer?.finishReason === 'abort' || answer?.finishReason === 'stop' ? answer.finishReason : 'length';
  const plan = planAnswer({ ...record.body, n: 1, max_tokens: 1 }, { content: ['tok0 '], finishReason }, 1, engine);
  return formatFor(record.path, model).whole(plan, usageOf(record.body, 1, cachedTokens ?? Math.floor(prompt / 2)));
}
