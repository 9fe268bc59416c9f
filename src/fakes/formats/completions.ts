// OpenAI completions as vLLM and SGLang answer them: streamed chunks (an echo first, logprobs
// with their text offsets), the usage chunk and the whole answer.
import { OPENAI_OBJECTS } from '../../endpoints/openai-shapes.js';
import type { AnswerPlan, Choice, Engine } from '../fake-plan.js';
import { OUTPUT_LOGPROB, PROMPT_LOGPROB } from '../fake-plan.js';
import type { Format } from './format.js';
import { allIds, interleave, stepIds, vllmPromptLogprobs } from './format.js';

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

/** The JSON shapes of `/v1/completions`' answers. */
export function completionFormat(id: string, created: number, model: string): Format {
  const chunk = (choice: object) => ({ id, object: OPENAI_OBJECTS.text.chunk, created, model, choices: [choice] });
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
    usage: (usage) => ({ id, object: OPENAI_OBJECTS.text.chunk, created, model, choices: [], usage }),
    whole: (plan, usage) => ({
      id,
      object: OPENAI_OBJECTS.text.whole,
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
