// The answers of the fake workers, in the JSON shapes each route has when vLLM and SGLang send
// it: OpenAI completions and chat completions (streamed chunks, the usage chunk, whole answers,
// reasoning, tool calls, logprobs in both formats, several choices) and SGLang's /generate.
import { randomUUID } from 'node:crypto';
import { elementsOf } from '../flow/connectors.js';

/**
 * What a fake decode worker answers, beyond its default `tok0 tok1 ...` content. Each list is
 * streamed one piece per chunk.
 */
export interface FakeAnswer {
  /** Reasoning pieces (`reasoning_content`, before the content; chat). */
  reasoning?: string[];
  /** Content pieces; by default `tok0 `, `tok1 `, ... up to the token budget. */
  content?: string[];
  /**
   * Tool calls (chat): each streamed as vLLM does, a first delta with its `id`, `type` and
   * function `name`, then its `arguments` in pieces. The finish reason is then `tool_calls`.
   */
  toolCalls?: Array<{ name: string; arguments: string[] }>;
  /**
   * The finish reason sent: by default `tool_calls` with tool calls, `length` when the token
   * budget ran out, `stop` otherwise. `abort` is what vLLM and SGLang send for a request they
   * dropped.
   */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'abort';
  /**
   * Instead of the finish, an error chunk inside the 200 stream, as vLLM sends it
   * (`data: {"error": {..., "code": 400}}`, then `[DONE]`); a whole answer is that status.
   */
  error?: { code: number; message: string };
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

/** The plan of an answer: its choices and their pieces, and the tokens it counts. */
export interface AnswerPlan {
  choices: Choice[];
  completionTokens: number;
  error: FakeAnswer['error'];
  logprobs: boolean;
}

/** Plans the answer to `body` from `answer` (or the default tokens), within the token budget. */
export function planAnswer(
  body: Record<string, unknown>,
  answer: FakeAnswer | undefined,
  defaultTokens: number,
): AnswerPlan {
  const sampling = body.sampling_params as { max_new_tokens?: unknown } | undefined;
  const limit = Number(
    body.max_tokens ?? body.max_completion_tokens ?? sampling?.max_new_tokens ?? Number.POSITIVE_INFINITY,
  );
  const count = Math.max(0, Math.min(defaultTokens, limit));
  const content = answer?.content ?? Array.from({ length: count }, (_, i) => `tok${i} `);
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
  const logprobs = body.logprobs === true || typeof body.logprobs === 'number' || typeof body.top_logprobs === 'number';
  return { choices, completionTokens: choices[0]?.steps.length ?? 0, error: answer?.error, logprobs };
}

/** The JSON shapes of one route's answers. */
export interface Format {
  /** The chunks of one step of every choice still going (round robin over the choices). */
  streamed(plan: AnswerPlan): object[];
  usage(usage: object): object;
  whole(plan: AnswerPlan, usage: object): object;
}

const chatLogprobs = (text: string) => ({
  content: [{ token: text, logprob: -0.25, bytes: [...Buffer.from(text)], top_logprobs: [] }],
});
const textLogprobs = (text: string) => ({
  tokens: [text],
  token_logprobs: [-0.25],
  top_logprobs: [{ [text]: -0.25 }],
  text_offset: [0],
});

/** The JSON shapes of each route: OpenAI completions, chat completions, SGLang's /generate. */
export function formatFor(path: string, model = 'fake-model'): Format {
  const id = `fake-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  if (path === '/v1/chat/completions') return chatFormat(id, created, model);
  if (path === '/generate') return generateFormat(id);
  return completionFormat(id, created, model);
}

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
        // As vLLM does: a first chunk with the role and no text.
        chunk({ index: choice.index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }),
        ...choice.steps.map((step) =>
          chunk({
            index: choice.index,
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
          ? [chunk({ index: choice.index, delta: {}, logprobs: null, finish_reason: choice.finish, stop_reason: null })]
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
            content: content.join(''),
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
        };
      }),
      usage,
    }),
  };
}

function completionFormat(id: string, created: number, model: string): Format {
  const chunk = (choice: object) => ({ id, object: 'text_completion', created, model, choices: [choice] });
  const texts = (choice: Choice) => choice.steps.filter((step) => step.kind === 'content').map((step) => step.text);
  return {
    streamed: (plan) =>
      interleave(plan, (choice) => [
        ...texts(choice).map((text) =>
          chunk({
            index: choice.index,
            text,
            logprobs: plan.logprobs ? textLogprobs(text) : null,
            finish_reason: null,
            stop_reason: null,
          }),
        ),
        ...(plan.error === undefined
          ? [chunk({ index: choice.index, text: '', logprobs: null, finish_reason: choice.finish, stop_reason: null })]
          : []),
      ]),
    usage: (usage) => ({ id, object: 'text_completion', created, model, choices: [], usage }),
    whole: (plan, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: plan.choices.map((choice) => ({
        index: choice.index,
        text: texts(choice).join(''),
        logprobs: plan.logprobs ? textLogprobs(texts(choice).join('')) : null,
        finish_reason: choice.finish,
        stop_reason: null,
      })),
      usage,
    }),
  };
}

/** SGLang's native answers: the whole text so far in each chunk, the finish in `meta_info`. */
function generateFormat(id: string): Format {
  const meta = (choice: Choice, done: number, finished: boolean, usage?: { prompt_tokens?: number }) => ({
    id,
    finish_reason: finished
      ? { type: choice.finish, ...(choice.finish === 'abort' ? { message: 'Abort by the scheduler' } : {}) }
      : null,
    prompt_tokens: usage?.prompt_tokens ?? 0,
    completion_tokens: done,
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
          meta_info: meta(choice, i + 1, false),
        })),
        {
          text: cumulative(choice, choice.steps.length),
          ...(plan.choices.length > 1 ? { index: choice.index } : {}),
          meta_info: meta(choice, choice.steps.length, true),
        },
      ]),
    usage: (usage) => ({ text: '', meta_info: { id, finish_reason: null, ...usage } }),
    whole: (plan, usage) => {
      const answers = plan.choices.map((choice) => ({
        text: cumulative(choice, choice.steps.length),
        meta_info: meta(choice, choice.steps.length, true, usage as { prompt_tokens: number }),
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
) {
  const prompt = promptTokens(record.body);
  // A prefill whose one token ends the answer (an end of sequence) says so; otherwise `length`.
  const finishReason =
    answer?.finishReason === 'abort' || answer?.finishReason === 'stop' ? answer.finishReason : 'length';
  const plan = planAnswer({ ...record.body, n: 1, max_tokens: 1 }, { content: ['tok0 '], finishReason }, 1);
  return formatFor(record.path, model).whole(plan, usageOf(record.body, 1, cachedTokens ?? Math.floor(prompt / 2)));
}
