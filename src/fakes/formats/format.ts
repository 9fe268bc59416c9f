// What every fake answer format shares: the shape of a format (a plan's chunks, its usage
// chunk, its whole answer) and the pieces more than one route's JSON uses.
import type { AnswerPlan, Choice } from '../fake-plan.js';
import { PROMPT_LOGPROB, promptId } from '../fake-plan.js';

/** The JSON shapes of one route's answers. */
export interface Format {
  /** The chunks of one step of every choice still going (round robin over the choices). */
  streamed(plan: AnswerPlan): object[];
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
