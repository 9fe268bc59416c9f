// Anthropic Messages as vLLM answers them (its Anthropic layer over the chat pipeline): typed
// events from `message_start` to `message_stop`, one content block per run of thinking, of
// text or per tool call, and the whole `message` with vLLM's `exclude_none`.
import type { AnswerPlan } from '../fake-plan.js';
import { promptTokens } from '../fake-plan.js';
import { type Block, blocksOf, type Format, freshHex, hex16, type OpenAiUsage } from './format.js';
import type { PoolingAnswer } from './pooling.js';

/** vLLM's mapping of the chat finish reasons; any other (an abort) has none. */
const STOP_REASONS: Readonly<Record<string, string>> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
};

/** Messages' usage from the fake's OpenAI-named one (no cache fields: vLLM's default). */
export function messagesUsage(usage: OpenAiUsage) {
  return { input_tokens: usage.prompt_tokens ?? 0, output_tokens: usage.completion_tokens ?? 0 };
}

/** A tool call's arguments as the `input` object of a whole answer (vLLM parses the JSON; `{}` when it is none). */
function inputOf(text: string): unknown {
  try {
    return text === '' ? {} : JSON.parse(text);
  } catch {
    return {};
  }
}

/** The events of one content block at `index`; `open` leaves it unclosed (the stream broke in it). */
function blockEvents(block: Block, index: number, open: boolean): object[] {
  const delta = (fields: object) => ({ type: 'content_block_delta', index, delta: fields });
  const start =
    block.kind === 'reasoning'
      ? { type: 'thinking', thinking: '' }
      : block.kind === 'content'
        ? { type: 'text', text: '' }
        : { type: 'tool_use', id: block.id, name: block.name, input: {} };
  const deltas = block.pieces.map((text) =>
    block.kind === 'reasoning'
      ? delta({ type: 'thinking_delta', thinking: text })
      : block.kind === 'content'
        ? delta({ type: 'text_delta', text })
        : delta({ type: 'input_json_delta', partial_json: text }),
  );
  return [
    { type: 'content_block_start', index, content_block: start },
    ...deltas,
    ...(open
      ? []
      : [
          // vLLM signs a thinking block just before it closes it.
          ...(block.kind === 'reasoning' ? [delta({ type: 'signature_delta', signature: freshHex(32) })] : []),
          { type: 'content_block_stop', index },
        ]),
  ];
}

/**
 * The JSON shapes of `/v1/messages`' answers, as vLLM's Anthropic layer builds them: the id is
 * the chat completion's (`chatcmpl-` and 16 hex digits, not `msg_`); `message_start` carries
 * the prompt's tokens, `message_delta` the stop reason and both counts; no `ping`, no
 * `stop_sequence` in the delta. A whole answer leaves out what is null (`stop_sequence`, an
 * unmapped stop reason).
 */
export function messagesFormat(id: string, _created: number, model: string): Format {
  const messageId = `chatcmpl-${hex16(id)}`;
  const blocksIn = (plan: AnswerPlan) => {
    const choice = plan.choices[0];
    return choice === undefined ? [] : blocksOf(choice);
  };
  return {
    streamed: (plan, usage = {}) => {
      const counts = messagesUsage(usage as OpenAiUsage);
      const blocks = blocksIn(plan);
      const broken = plan.error !== undefined;
      const stop = STOP_REASONS[plan.choices[0]?.finish ?? ''] ?? null;
      return [
        {
          type: 'message_start',
          message: {
            id: messageId,
            type: 'message',
            role: 'assistant',
            content: [],
            model,
            stop_reason: null,
            stop_sequence: null,
            usage: { input_tokens: counts.input_tokens, output_tokens: 0 },
          },
        },
        // An error leaves the block it broke in open, and nothing ends the message.
        ...blocks.flatMap((block, index) => blockEvents(block, index, broken && index === blocks.length - 1)),
        ...(broken
          ? []
          : [{ type: 'message_delta', delta: { stop_reason: stop }, usage: counts }, { type: 'message_stop' }]),
      ];
    },
    usage: (usage) => messagesUsage(usage as OpenAiUsage),
    whole: (plan, usage) => {
      const content = blocksIn(plan).map((block) => {
        const text = block.pieces.join('');
        if (block.kind === 'reasoning') return { type: 'thinking', thinking: text, signature: freshHex(32) };
        if (block.kind === 'content') return { type: 'text', text };
        return { type: 'tool_use', id: block.id, name: block.name, input: inputOf(text) };
      });
      const stop = STOP_REASONS[plan.choices[0]?.finish ?? ''];
      return {
        id: messageId,
        type: 'message',
        role: 'assistant',
        // An empty completion is one empty text block (vllm#46525).
        content: content.length === 0 ? [{ type: 'text', text: '' }] : content,
        model,
        ...(stop === undefined ? {} : { stop_reason: stop }),
        usage: messagesUsage(usage as OpenAiUsage),
      };
    },
  };
}

/**
 * `/v1/messages/count_tokens` as vLLM answers it: the prompt's tokens as the generation would
 * count them (its `system` and `messages`), which a router can answer without generating; the
 * 400 of its request model without `messages` (OpenAI's shape, as vLLM's validation handler).
 */
export function countTokensAnswer(body: Readonly<Record<string, unknown>>): PoolingAnswer {
  if (body.messages === undefined) return { status: 400, message: 'messages: Field required' };
  const tokens = promptTokens({ ...body });
  return { status: 200, body: { input_tokens: tokens, context_management: { original_input_tokens: tokens } } };
}
