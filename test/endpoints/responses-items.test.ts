import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { RESPONSES_ITEM_TYPES, responsesPromptFloor } from '../../src/endpoints/responses-items.js';
import { UnsupportedRequestError } from '../../src/flow/request-shaping.js';
import { validateRequest } from '../../src/server/pipeline/request-schemas.js';

/** What the Responses schema says of `input`: 'ok', or the field at fault and the message. */
function verdict(input: unknown, rest: Record<string, unknown> = {}): string {
  try {
    validateRequest('responses', { model: 'm', input, ...rest });
    return 'ok';
  } catch (error) {
    if (!UnsupportedRequestError.is(error)) throw error;
    return `${error.param}: ${error.message}`;
  }
}

const user = { role: 'user', content: 'Hi' };

/** What Codex and the OpenAI Agents SDK send back of a turn: every item kind they keep in a conversation. */
const AGENT_TURN = [
  { type: 'message', role: 'developer', content: [{ type: 'input_text', text: '<permissions>...</permissions>' }] },
  {
    type: 'message',
    role: 'user',
    content: [
      { type: 'input_text', text: 'Fix the failing test' },
      { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'auto' },
      { type: 'input_file', file_data: 'data:application/pdf;base64,AAAA', filename: 'spec.pdf' },
    ],
  },
  {
    type: 'reasoning',
    id: 'rs_1',
    summary: [{ type: 'summary_text', text: 'Looking at the test' }],
    content: [{ type: 'reasoning_text', text: 'The assertion is off by one' }],
    encrypted_content: 'gAAAAABo...',
  },
  { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'shell', arguments: '{"command":["ls"]}' },
  { type: 'function_call_output', call_id: 'call_1', output: 'src test' },
  { type: 'custom_tool_call', call_id: 'call_2', name: 'apply_patch', input: '*** Begin Patch' },
  { type: 'custom_tool_call_output', call_id: 'call_2', output: 'Done' },
  { type: 'local_shell_call', call_id: 'call_3', status: 'completed', action: { type: 'exec', command: ['ls'] } },
  { type: 'local_shell_call_output', id: 'call_3', output: 'src' },
  { type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'vitest' } },
  { type: 'compaction', encrypted_content: 'gAAAAABp...' },
  {
    type: 'message',
    role: 'assistant',
    phase: 'final_answer',
    content: [
      { type: 'output_text', text: 'Fixed.', annotations: [] },
      { type: 'refusal', refusal: 'Not that.' },
    ],
  },
  { type: 'item_reference', id: 'msg_0' },
  { id: 'msg_1' },
  { role: 'system', content: 'Be brief', future_field: { any: 'thing' } },
];

describe('Responses input items: every item and content part of a type the API documents, before any worker', () => {
  it('the items real agents send pass, with their other fields unchecked (an item without type: a message by its role, a reference by its id)', () => {
    expect(verdict(AGENT_TURN)).toBe('ok');
    expect(verdict('Hi')).toBe('ok');
    expect(verdict([{ role: 'user', content: [] }])).toBe('ok');
  });

  it('every type of the list passes as an item of its own', () => {
    for (const type of RESPONSES_ITEM_TYPES) {
      const item = type === 'message' ? { type, ...user } : { type };
      expect(verdict([item])).toBe('ok');
    }
  });

  it('an item that is no object is refused at its index, said by its kind (it may be prompt text, and the message is logged)', () => {
    expect(verdict([user, 42])).toBe('input[1]: input[1] must be an input item (an object), got 42');
    expect(verdict(['Hi'])).toBe('input[0]: input[0] must be an input item (an object), got a string of 2 characters');
    expect(verdict([null])).toBe('input[0]: input[0] must be an input item (an object), got null');
    expect(verdict([[user]])).toBe('input[0]: input[0] must be an input item (an object), got a list of 1');
  });

  it('an item of an unknown type is refused at its type, with the closest type when it looks like a typo', () => {
    expect(verdict([user, user, user, { type: 'bogus' }])).toBe(
      `input[3].type: input[3].type must be one of the Responses API's item types, got "bogus"`,
    );
    expect(verdict([{ type: 'function_cal', call_id: 'c', name: 'f', arguments: '{}' }])).toBe(
      `input[0].type: input[0].type must be one of the Responses API's item types (did you mean function_call?), got "function_cal"`,
    );
    expect(verdict([{ type: 7 }])).toBe(
      `input[0].type: input[0].type must be one of the Responses API's item types, got 7`,
    );
  });

  it('an object that is neither a message nor a typed item nor a reference is refused as an item', () => {
    expect(verdict([{ content: 'Hi' }])).toBe(
      'input[0]: input[0] must be an input item: a message (role and content) or an object with a type, got an object',
    );
  });

  it("a message's role is one of the API's: user, assistant, system, developer", () => {
    expect(verdict([{ role: 'tool', content: 'x' }])).toBe(
      'input[0].role: input[0].role must be one of user, assistant, system, developer, got "tool"',
    );
    expect(verdict([{ type: 'message', content: 'x' }])).toBe(
      'input[0].role: input[0].role must be one of user, assistant, system, developer, got undefined',
    );
    expect(verdict([{ role: 1, content: 'x' }])).toBe(
      'input[0].role: input[0].role must be one of user, assistant, system, developer, got 1',
    );
  });

  it("a message's content is a text or a list of parts", () => {
    expect(verdict([{ role: 'user', content: 42 }])).toBe(
      'input[0].content: input[0].content must be a text or a list of content parts, got 42',
    );
    expect(verdict([{ role: 'user' }])).toBe(
      'input[0].content: input[0].content must be a text or a list of content parts, got undefined',
    );
    expect(verdict([{ role: 'user', content: { type: 'input_text', text: 'Hi' } }])).toBe(
      'input[0].content: input[0].content must be a text or a list of content parts, got an object',
    );
  });

  it('a content part of an unknown type, or no object, is refused at its path', () => {
    const parts = (content: unknown[]) => [user, { role: 'user', content }];
    expect(
      verdict(
        parts([
          { type: 'input_text', text: 'a' },
          { type: 'text', text: 'b' },
        ]),
      ),
    ).toBe(
      'input[1].content[1].type: input[1].content[1].type must be one of input_text, input_image, input_file, output_text, refusal, got "text"',
    );
    expect(verdict(parts(['Hi']))).toBe(
      'input[1].content[0]: input[1].content[0] must be a content part (an object with a type), got a string of 2 characters',
    );
    expect(verdict(parts([{ text: 'Hi' }]))).toBe(
      'input[1].content[0].type: input[1].content[0].type must be one of input_text, input_image, input_file, output_text, refusal, got undefined',
    );
  });

  it("the body's shape is said first: a wrong top-level field before any item", () => {
    expect(verdict([42], { temperature: 'hot' })).toBe('temperature: temperature must be a number, got "hot"');
  });
});

describe('responsesPromptFloor: the fewest tokens a Responses prompt can be, one per chat message', () => {
  it('the instructions, a text input, each message item and each function output count one; tool calls, reasoning and references nothing', () => {
    expect(responsesPromptFloor({ input: 'Hi' })).toBe(1);
    expect(responsesPromptFloor({ instructions: 'Be brief', input: 'Hi' })).toBe(2);
    expect(responsesPromptFloor({ instructions: '', input: [user] })).toBe(1);
    // developer, user, function_call_output, assistant, { role: system }: five; the rest join or vanish.
    expect(responsesPromptFloor({ input: AGENT_TURN })).toBe(5);
    expect(responsesPromptFloor({ input: Array.from({ length: 200_000 }, () => user) })).toBe(200_000);
  });

  it('is what the Responses endpoint gives the context check, under the field input', () => {
    expect(endpointNamed('responses').promptFloor?.({ input: [user, user] })).toEqual({ field: 'input', tokens: 2 });
  });
});
