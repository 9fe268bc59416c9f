// SGLang's native `/generate` answers.
import type { AnswerPlan, Choice } from '../fake-plan.js';
import { OUTPUT_LOGPROB, outputId, PROMPT_LOGPROB, promptId } from '../fake-plan.js';
import type { Format } from './format.js';
import { interleave } from './format.js';

/**
 * SGLang's native answers: the whole text so far in each chunk, the finish in `meta_info`, and
 * with `return_logprob` the input logprobs (from `logprob_start_len`) and the output's so far,
 * each `[logprob, token id, text]` (no text: `return_text_in_logprobs` is off).
 */
export function generateFormat(id: string): Format {
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
