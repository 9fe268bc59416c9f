// What every fake answer format shares: the shape of a format (a plan's chunks, its usage
// chunk, its whole answer) and the pieces more than one route's JSON uses.
import { randomUUID } from 'node:crypto';
import type { AnswerPlan, Choice } from '../fake-plan.js';
import { PROMPT_LOGPROB, promptId } from '../fake-plan.js';

/** The JSON shapes of one route's answers. */
export interface Format {
  /**
   * The chunks of one step of every choice still going (round robin over the choices).
   * `usage` is the answer's, for the formats whose events carry it (Responses' last event,
   * Messages' first and last); the OpenAI chunk formats send it in a chunk of its own instead.
   */
  streamed(plan: AnswerPlan, usage?: object): object[];
  /** The usage chunk of a stream that asked for one (`stream_options.include_usage`). */
  usage(usage: object): object;
  /** The whole (unstreamed) answer. */
  whole(plan: AnswerPlan, usage: object): object;
}

/** A route's format for one answer: its id, creation time (seconds) and model are fixed per answer. */
export type FormatOf = (id: string, created: number, model: string) => Format;

/** vLLM's `prompt_logprobs`: none for the first token, then each token's id with its logprob. */
export const vllmPromptLogprobs = (plan: AnswerPlan, index: number) =>
  plan.prompt
    .pieces(index)
    .map((piece, i) =>
      i === 0 ? null : { [String(promptId(i))]: { logprob: PROMPT_LOGPROB, rank: 1, decoded_token: piece } },
    );

/** The token ids of step `k` of a choice, when the request asked for them (`return_token_ids`). */
export const stepIds = (plan: AnswerPlan, k: number) =>
  plan.tokenIds === undefined ? {} : { token_ids: [plan.tokenIds.first + k] };

/** Every token id of a choice (a whole answer's), when the request asked for them. */
export const allIds = (plan: AnswerPlan, choice: Choice) =>
  plan.tokenIds === undefined
    ? {}
    : { token_ids: choice.steps.map((_, k) => (plan.tokenIds as { first: number }).first + k) };

/** Interleaves the choices' chunks: each choice's first chunk, then each one's second, and so on. */
export function interleave(plan: AnswerPlan, chunksOf: (choice: Choice) => object[]): object[] {
  const lists = plan.choices.map(chunksOf);
  const out: object[] = [];
  for (let at = 0; lists.some((list) => at < list.length); at++) {
    for (const list of lists) if (at < list.length) out.push(list[at] as object);
  }
  return out;
}

/** The usage a fake answer is counted in, OpenAI's names (`usageOf`), as the typed formats read it. */
export interface OpenAiUsage {
  prompt_tokens?: number | undefined;
  completion_tokens?: number | undefined;
  prompt_tokens_details?: { cached_tokens?: number | undefined } | undefined;
}

/** 16 hex digits of `id` (its last ones), so that an answer's ids follow the id the format was given. */
export const hex16 = (id: string): string =>
  id
    .replace(/[^0-9a-f]/gi, '')
    .slice(-16)
    .padStart(16, '0');

/** A fresh id of `digits` hex digits, as vLLM's `random_uuid()` gives an output item or a signature. */
export const freshHex = (digits = 16): string => randomUUID().replaceAll('-', '').slice(0, digits);

/**
 * One output item (Responses) or content block (Messages) of a choice: a run of reasoning, a
 * run of content, or one tool call with its argument pieces. Both APIs open a new item where
 * the chat stream switches from one kind of delta to another.
 */
export type Block =
  | { kind: 'reasoning'; pieces: string[] }
  | { kind: 'content'; pieces: string[] }
  | { kind: 'tool'; id: string; name: string; pieces: string[] };

/** The items of a choice, in the order its steps come. */
export function blocksOf(choice: Choice): Block[] {
  const blocks: Block[] = [];
  for (const step of choice.steps) {
    const last = blocks.at(-1);
    if (step.kind === 'tool') {
      blocks.push({ kind: 'tool', id: step.id ?? `call_${freshHex()}`, name: step.text, pieces: [] });
    } else if (step.kind === 'arguments') {
      if (last?.kind === 'tool') last.pieces.push(step.text);
    } else if (last?.kind === step.kind) {
      last.pieces.push(step.text);
    } else {
      blocks.push({ kind: step.kind, pieces: [step.text] });
    }
  }
  return blocks;
}
