// OpenAI Responses as vLLM answers them on its "simple" (non-Harmony) path: typed events from
// `response.created` to `response.completed`, one output item per run of reasoning, of content
// or per tool call (vLLM opens a new item where the chat deltas change kind), and the
// `response` object, which is both the whole answer and the last event's `response`.
import type { AnswerPlan } from '../fake-plan.js';
import { promptTokens } from '../fake-plan.js';
import { type Block, blocksOf, type Format, freshHex, hex16, type OpenAiUsage } from './format.js';

/** The context vLLM caps `max_output_tokens` with when the fake is not told its own. */
const DEFAULT_CONTEXT = 4096;

/**
 * Responses' usage from the fake's OpenAI-named one, with vLLM's per-turn lists (empty on the
 * simple path); `reasoning` tokens as vLLM counts them with a reasoning parser.
 */
export function responsesUsage(usage: OpenAiUsage, reasoning = 0) {
  const input = usage.prompt_tokens ?? 0;
  const output = usage.completion_tokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
      input_tokens_per_turn: [],
      cached_tokens_per_turn: [],
    },
    output_tokens: output,
    output_tokens_details: {
      reasoning_tokens: reasoning,
      tool_output_tokens: 0,
      output_tokens_per_turn: [],
      tool_output_tokens_per_turn: [],
    },
    total_tokens: input + output,
  };
}

/** The effective cap vLLM echoes: the request's, within what the context leaves after the prompt. */
function effectiveCap(body: Record<string, unknown>): number {
  const left = DEFAULT_CONTEXT - promptTokens(body);
  return typeof body.max_output_tokens === 'number' ? Math.min(body.max_output_tokens, left) : left;
}

const reasoningCount = (plan: AnswerPlan): number =>
  plan.choices[0]?.steps.filter((step) => step.kind === 'reasoning').length ?? 0;

/** The output items of the final object: vLLM builds them anew, with `rs_`/`msg_`/`fc_` ids. */
function finalItems(blocks: Block[]): object[] {
  const message = (text: string) => ({
    id: `msg_${freshHex()}`,
    content: text === '' ? [] : [{ annotations: [], text, type: 'output_text', logprobs: null }],
    role: 'assistant',
    status: 'completed',
    type: 'message',
  });
  const items = blocks.map((block) => {
    const text = block.pieces.join('');
    if (block.kind === 'reasoning') {
      return {
        id: `rs_${freshHex()}`,
        summary: [],
        type: 'reasoning',
        content: [{ text, type: 'reasoning_text' }],
        encrypted_content: null,
        status: null,
      };
    }
    if (block.kind === 'content') return message(text);
    return {
      id: `fc_${freshHex()}`,
      call_id: block.id,
      type: 'function_call',
      status: 'completed',
      name: block.name,
      arguments: text,
    };
  });
  // Nothing said at all: vLLM still answers a message, with no content.
  return items.length === 0 ? [message('')] : items;
}

/** The events of one output item at `index`; `open` leaves it unclosed (the stream broke in it). */
function itemEvents(block: Block, index: number, open: boolean): Array<Record<string, unknown>> {
  const id = freshHex();
  const text = block.pieces.join('');
  const at = { item_id: id, output_index: index };
  if (block.kind === 'reasoning') {
    const part = { text: '', type: 'reasoning_text' };
    return [
      {
        type: 'response.output_item.added',
        item: { id, summary: [], type: 'reasoning', content: null, encrypted_content: null, status: 'in_progress' },
        output_index: index,
      },
      { type: 'response.reasoning_part.added', content_index: 0, ...at, part },
      ...block.pieces.map((delta) => ({ type: 'response.reasoning_text.delta', content_index: 0, delta, ...at })),
      ...(open
        ? []
        : [
            { type: 'response.reasoning_text.done', content_index: 0, ...at, text },
            { type: 'response.reasoning_part.done', content_index: 0, ...at, part: { ...part, text } },
            {
              type: 'response.output_item.done',
              item: {
                id,
                summary: [],
                type: 'reasoning',
                content: [{ ...part, text }],
                encrypted_content: null,
                status: 'completed',
              },
              output_index: index,
            },
          ]),
    ];
  }
  if (block.kind === 'content') {
    const done = { annotations: [], text, type: 'output_text', logprobs: null };
    return [
      {
        type: 'response.output_item.added',
        item: { id, content: [], role: 'assistant', status: 'in_progress', type: 'message' },
        output_index: index,
      },
      {
        type: 'response.content_part.added',
        content_index: 0,
        ...at,
        part: { annotations: [], text: '', type: 'output_text', logprobs: [] },
      },
      ...block.pieces.map((delta) => ({
        type: 'response.output_text.delta',
        content_index: 0,
        delta,
        ...at,
        logprobs: [],
      })),
      ...(open
        ? []
        : [
            { type: 'response.output_text.done', content_index: 0, ...at, logprobs: [], text },
            { type: 'response.content_part.done', content_index: 0, ...at, part: done },
            {
              type: 'response.output_item.done',
              // The stray `summary` is vLLM's.
              item: {
                id,
                content: text === '' ? [] : [done],
                role: 'assistant',
                status: 'completed',
                type: 'message',
                summary: [],
              },
              output_index: index,
            },
          ]),
    ];
  }
  const call = { arguments: '', call_id: block.id, name: block.name, type: 'function_call', id };
  return [
    { type: 'response.output_item.added', item: { ...call, status: 'in_progress' }, output_index: index },
    ...block.pieces.map((delta) => ({ type: 'response.function_call_arguments.delta', delta, ...at })),
    ...(open
      ? []
      : [
          // vLLM sends the arguments' end only after at least one delta.
          ...(block.pieces.length === 0
            ? []
            : [{ type: 'response.function_call_arguments.done', arguments: text, ...at, name: block.name }]),
          {
            type: 'response.output_item.done',
            item: { ...call, arguments: text, status: 'completed' },
            output_index: index,
          },
        ]),
  ];
}

/**
 * The JSON shapes of `/v1/responses`' answers, as vLLM's serving layer builds them: the id is
 * `resp_` and 16 hex digits (or the body's `request_id`); streamed item ids are bare hex, the
 * final object's `rs_`/`msg_`/`fc_` ones; the usage is only in the final object. A plan that
 * ran out of its cap is `incomplete` (`max_output_tokens`), still ended by `response.completed`.
 */
export function responsesFormat(id: string, created: number, model: string): Format {
  const responseId = `resp_${hex16(id)}`;
  const object = (plan: AnswerPlan, status: string, output: object[], usage: object | null) => {
    const body = plan.request;
    const tools = Array.isArray(body.tools) ? body.tools : [];
    return {
      id: typeof body.request_id === 'string' ? body.request_id : responseId,
      created_at: created,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      instructions: body.instructions ?? null,
      metadata: body.metadata ?? null,
      model,
      object: 'response',
      output,
      parallel_tool_calls: body.parallel_tool_calls ?? true,
      temperature: body.temperature ?? 1.0,
      // vLLM rewrites the choice to `none` when there are no tools.
      tool_choice: tools.length === 0 ? 'none' : (body.tool_choice ?? 'auto'),
      tools,
      top_p: body.top_p ?? 1.0,
      background: body.background ?? false,
      max_output_tokens: effectiveCap(body),
      max_tool_calls: body.max_tool_calls ?? null,
      previous_response_id: body.previous_response_id ?? null,
      prompt: null,
      reasoning: body.reasoning ?? null,
      service_tier: body.service_tier ?? 'auto',
      status,
      text: body.text ?? null,
      top_logprobs: body.top_logprobs ?? null,
      truncation: body.truncation ?? 'disabled',
      usage,
      user: body.user ?? null,
      presence_penalty: body.presence_penalty ?? 0,
      frequency_penalty: body.frequency_penalty ?? 0,
      // A prefill's answer puts its handoff here (the vLLM fake overwrites it).
      kv_transfer_params: null,
      input_messages: null,
      output_messages: null,
    };
  };
  const whole = (plan: AnswerPlan, usage: object) => {
    const choice = plan.choices[0];
    const status = choice?.finish === 'length' ? 'incomplete' : 'completed';
    const blocks = choice === undefined ? [] : blocksOf(choice);
    return object(plan, status, finalItems(blocks), responsesUsage(usage as OpenAiUsage, reasoningCount(plan)));
  };
  return {
    streamed: (plan, usage = {}) => {
      const choice = plan.choices[0];
      const blocks = choice === undefined ? [] : blocksOf(choice);
      const initial = object(plan, 'in_progress', [], null);
      const events: Array<Record<string, unknown>> = [
        { type: 'response.created', response: initial },
        { type: 'response.in_progress', response: initial },
        // An error cuts the stream in the item it was in: nothing closes it, nothing follows.
        ...blocks.flatMap((block, index) =>
          itemEvents(block, index, plan.error !== undefined && index === blocks.length - 1),
        ),
        ...(plan.error === undefined ? [{ type: 'response.completed', response: whole(plan, usage) }] : []),
      ];
      // vLLM's events: the fields, then their sequence number (from 0), then the type.
      return events.map(({ type, ...fields }, sequence_number) => ({ ...fields, sequence_number, type }));
    },
    usage: (usage) => responsesUsage(usage as OpenAiUsage),
    whole,
  };
}
