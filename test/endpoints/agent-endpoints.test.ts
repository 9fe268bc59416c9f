import { describe, expect, it } from 'vitest';
import { anthropicAsChat, responsesAsChat } from '../../src/endpoints/chat-form.js';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { statefulMisfit } from '../../src/endpoints/responses.js';
import { sglangBootstrap } from '../../src/engines/sglang/connector.js';
import { vllmNixl } from '../../src/engines/vllm/connector.js';
import { UnsupportedRequestError } from '../../src/flow/request-shaping.js';
import { routingText } from '../../src/routing/routing-input.js';
import { validateRequest } from '../../src/server/pipeline/request-schemas.js';

const responses = endpointNamed('responses');
const messages = endpointNamed('messages');

/** The refusal `validateRequest` throws for `body` on `route`: its field and message. */
function refusal(route: 'responses' | 'messages', body: unknown): { param: string; message: string } | undefined {
  try {
    validateRequest(route, body);
    return undefined;
  } catch (error) {
    if (!UnsupportedRequestError.is(error)) throw error;
    return { param: error.param, message: error.message };
  }
}

describe("the agents' APIs: OpenAI Responses and Anthropic Messages, declared as endpoints", () => {
  it("the prefill leg of a Responses request: max_output_tokens 1, not streamed, nothing stored, vLLM's handoff asked; the rest as the client sent it", () => {
    const body = {
      model: 'm',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }],
      instructions: 'Be brief',
      max_output_tokens: 300,
      stream: true,
      stream_options: { include_obfuscation: false },
      min_tokens: 4,
      tools: [{ type: 'function', name: 'f', parameters: {} }],
      reasoning: { effort: 'low' },
      temperature: 0.2,
    };
    const prefill = vllmNixl.prefillBody(body, undefined, responses);
    expect(prefill).toEqual({
      model: 'm',
      input: body.input,
      instructions: 'Be brief',
      max_output_tokens: 1,
      stream: false,
      store: false,
      tools: body.tools,
      reasoning: { effort: 'low' },
      temperature: 0.2,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    // No field of another API's: vLLM's Responses takes neither n nor max_tokens.
    expect(prefill).not.toHaveProperty('n');
    expect(prefill).not.toHaveProperty('max_tokens');
    // The decode leg is the client's body with prefill's handoff, nothing else changed.
    const params = { do_remote_prefill: true, remote_engine_id: 'e' };
    expect(vllmNixl.decodeBody(body, { kind: 'params', params } as never)).toEqual({
      ...body,
      kv_transfer_params: params,
    });
  });

  it("the prefill leg of a Messages request: max_tokens 1, not streamed, vLLM's handoff asked; system, tools and thinking as sent", () => {
    const body = {
      model: 'claude-like',
      max_tokens: 1024,
      system: [{ type: 'text', text: 'You are terse.' }],
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
      thinking: { type: 'enabled', budget_tokens: 512 },
      stop_sequences: ['END'],
    };
    const prefill = vllmNixl.prefillBody(body, undefined, messages);
    const { kv_transfer_params: params, ...rest } = prefill;
    expect(rest).toEqual({ ...body, max_tokens: 1, stream: false });
    expect(params).toMatchObject({ do_remote_decode: true, do_remote_prefill: false });
    expect(prefill).not.toHaveProperty('n');
    expect(prefill).not.toHaveProperty('max_completion_tokens');
  });

  it("the output cap is each API's own field, checked against the context like chat's", () => {
    expect(refusal('responses', { input: 'Hi', max_output_tokens: 0 })).toEqual({
      param: 'max_output_tokens',
      message: 'max_output_tokens must be at least 1, got 0',
    });
    expect(() =>
      validateRequest('responses', { input: 'Hi', max_output_tokens: 5000 }, { maxModelLen: () => 4096 }),
    ).toThrow("max_output_tokens 5000 is more than the model's context of 4096 tokens (max_model_len)");
    expect(refusal('messages', { model: 'm', messages: [{ role: 'user', content: 'Hi' }] })).toEqual({
      param: 'max_tokens',
      message: 'The Messages API needs max_tokens',
    });
    expect(
      refusal('messages', { model: 'm', max_tokens: 'ten', messages: [{ role: 'user', content: 'Hi' }] })?.param,
    ).toBe('max_tokens');
  });

  it('a body of the other API is told where to go, before any worker', () => {
    expect(refusal('responses', { model: 'm', messages: [{ role: 'user', content: 'Hi' }] })).toEqual({
      param: 'input',
      message: 'The Responses API takes input, not messages: send messages to /v1/chat/completions',
    });
    expect(refusal('messages', { model: 'm', max_tokens: 8, input: 'Hi' })).toEqual({
      param: 'messages',
      message: 'The Messages API takes messages, not input: send input to /v1/responses',
    });
  });

  it('a stateful Responses field is no misfit of the endpoint (disagg serve keeps that state); statefulMisfit names each for a host that keeps none', () => {
    for (const [field, value] of [
      ['previous_response_id', 'resp_1'],
      ['conversation', 'conv_1'],
      ['store', true],
      ['background', true],
    ] as const) {
      expect(refusal('responses', { input: 'Hi', [field]: value })).toBeUndefined();
      const found = statefulMisfit({ input: 'Hi', [field]: value });
      expect(found?.param).toBe(field);
      expect(found?.message).toContain('send the whole conversation in input, with store: false');
    }
    // Stateless: store: false, background: false, nothing to resume.
    expect(statefulMisfit({ input: 'Hi', store: false, background: false })).toBeUndefined();
  });

  it('routing text: Responses puts its instructions first, then each item as its role and text, tool calls and outputs included', () => {
    const text = routingText({
      instructions: 'Sys',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Q1' }] },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'R' },
      ],
    });
    expect(text).toBe('system\u0000Sys\u0001user\u0000Q1\u0001assistant\u0000\u0001tool\u0000R\u0001');
    expect(responses.routingText({ input: 'Hi' }, 100)).toBe('user\u0000Hi\u0001');
    // A second turn starts with the first: its prefix is the first turn's text.
    const first = responses.routingText({ instructions: 'S', input: [{ role: 'user', content: 'Q1' }] }, 1000);
    const second = responses.routingText(
      {
        instructions: 'S',
        input: [
          { role: 'user', content: 'Q1' },
          { role: 'assistant', content: [{ type: 'output_text', text: 'A1' }] },
          { role: 'user', content: 'Q2' },
        ],
      },
      1000,
    );
    expect(second.startsWith(first)).toBe(true);
  });

  it("routing text: Messages puts system first (without Claude Code's billing header, different in every request), then the messages", () => {
    const body = (billing: string) => ({
      system: [
        { type: 'text', text: `x-anthropic-billing-header: cc_version=2.1; cch=${billing};` },
        { type: 'text', text: 'You are Claude Code.' },
      ],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Fix the bug' }] }],
    });
    expect(messages.routingText(body('a1'), 1000)).toBe(
      'system\u0000You are Claude Code.\u0001user\u0000Fix the bug\u0001',
    );
    expect(messages.routingText(body('b2'), 1000)).toBe(messages.routingText(body('a1'), 1000));
  });

  it('the tokenizer renders each API as vLLM converts it to chat: system first, tool calls and results, tools as functions', () => {
    expect(
      anthropicAsChat({
        system: 'S',
        messages: [
          { role: 'user', content: 'Q' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: { a: 1 } }] },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't1', content: 'R' },
              { type: 'text', text: 'go on' },
            ],
          },
        ],
        tools: [{ name: 'f', description: 'd', input_schema: { type: 'object' } }],
      }),
    ).toEqual({
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'Q' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
        },
        { role: 'tool', tool_call_id: 't1', content: 'R' },
        { role: 'user', content: 'go on' },
      ],
      tools: [{ type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object' } } }],
    });
    expect(responsesAsChat({ instructions: 'S', input: 'Q', reasoning: { effort: 'high' } })).toEqual({
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'Q' },
      ],
      chat_template_kwargs: { reasoning_effort: 'high' },
    });
  });

  it('SGLang refuses Messages under P/D (its route drops the bootstrap fields); vLLM serves both', () => {
    expect(sglangBootstrap.unsupported?.messages).toContain('sglang#35229');
    expect(sglangBootstrap.unsupported?.responses).toBeUndefined();
    expect(vllmNixl.unsupported).toBeUndefined();
  });
});
