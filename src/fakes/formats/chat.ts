// OpenAI chat completions as vLLM and SGLang answer them: streamed chunks (the role first,
// reasoning, content, tool calls, the finish), the usage chunk and the whole answer.

import { OPENAI_OBJECTS } from '../../endpoints/openai-shapes.js';
import { OUTPUT_LOGPROB } from '../fake-plan.js';
import type { Format } from './format.js';
import { allIds, interleave, stepIds, vllmPromptLogprobs } from './format.js';

const chatLogprobs = (text: string) => ({
  content: [{ token: text, logprob: OUTPUT_LOGPROB, bytes: [...Buffer.from(text)], top_logprobs: [] }],
});

/** The JSON shapes of `/v1/chat/completions`' answers. */
export function chatFormat(id: string, created: number, model: string): Format {
  const chunk = (choice: object) => ({ id, object: OPENAI_OBJECTS.chat.chunk, created, model, choices: [choice] });
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
    usage: (usage) => ({ id, object: OPENAI_OBJECTS.chat.chunk, created, model, choices: [], usage }),
    whole: (plan, usage) => ({
      id,
      object: OPENAI_OBJECTS.chat.whole,
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
