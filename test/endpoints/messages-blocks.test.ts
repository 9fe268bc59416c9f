import { describe, expect, it } from 'vitest';
import { MESSAGES_BLOCK_TYPES, messagesPromptFloor } from '../../src/endpoints/messages-blocks.js';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { UnsupportedRequestError } from '../../src/flow/request-shaping.js';
import { validateRequest } from '../../src/server/pipeline/request-schemas.js';

/** What the schema of `route` says of `messages` (and `rest`): 'ok', or the field at fault and the message. */
function verdict(
  messages: unknown,
  rest: Record<string, unknown> = {},
  route: 'messages' | 'count_tokens' = 'messages',
): string {
  try {
    validateRequest(route, { model: 'm', ...(route === 'messages' ? { max_tokens: 64 } : {}), messages, ...rest });
    return 'ok';
  } catch (error) {
    if (!UnsupportedRequestError.is(error)) throw error;
    return `${error.param}: ${error.message}`;
  }
}

const ask = { role: 'user', content: 'Fix the bug' };
const cached = { type: 'ephemeral' };

/** A turn of Claude Code's, as it sends it: system blocks, thinking, tools used and their results, documents. */
const CLAUDE_CODE_TURN = {
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.160; cch=ab12;' },
    { type: 'text', text: 'You are Claude Code.', cache_control: cached },
  ],
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: '<system-reminder>...</system-reminder>' },
        { type: 'text', text: 'Fix the failing test', cache_control: cached },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
        { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'AAAA' } },
      ],
    },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'Read the test first.', signature: 'EqQBCkYIBxgCKkA...' },
        { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va...' },
        { type: 'text', text: 'Reading it.' },
        { type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/repo/test/a.test.ts' } },
      ],
    },
    {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_1',
          is_error: false,
          content: [
            { type: 'text', text: 'expect(1).toBe(2)' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
            { type: 'tool_reference', tool_name: 'Edit' },
            { type: 'anything', the_engine: 'decides' },
          ],
          cache_control: cached,
        },
      ],
    },
    { role: 'system', content: 'A reminder in the middle' },
    { role: 'ctx', content: [{ type: 'text', text: 'Context of Claude Code 2.1.154 and later' }] },
    { role: 'msg', content: 'Another of its roles' },
  ],
  thinking: { type: 'enabled', budget_tokens: 1024 },
  metadata: { user_id: 'u' },
};

describe('Anthropic messages: every role and content block of a type the API documents, before any worker', () => {
  it("Claude Code's turn passes (thinking, redacted thinking, tool use, tool results with nested content, cache_control, its ctx and msg roles)", () => {
    const { messages, ...rest } = CLAUDE_CODE_TURN;
    expect(verdict(messages, rest)).toBe('ok');
    expect(verdict(messages, { system: rest.system }, 'count_tokens')).toBe('ok');
    expect(verdict([{ role: 'assistant', content: [] }])).toBe('ok');
  });

  it('every block type of the list passes, in a message and in system', () => {
    for (const type of MESSAGES_BLOCK_TYPES) {
      expect(verdict([{ role: 'user', content: [{ type }] }])).toBe('ok');
      expect(verdict([ask], { system: [{ type }] })).toBe('ok');
    }
  });

  it('a message that is no object is refused at its index', () => {
    expect(verdict([ask, 5])).toBe(
      'messages[1]: messages[1] must be a message (an object with role and content), got 5',
    );
  });

  it("a message's role is one of the API's (and Claude Code's ctx and msg)", () => {
    expect(verdict([ask, { role: 'tool', content: 'x' }])).toBe(
      'messages[1].role: messages[1].role must be one of user, assistant, system, ctx, msg, got "tool"',
    );
    expect(verdict([{ content: 'x' }])).toBe(
      'messages[0].role: messages[0].role must be one of user, assistant, system, ctx, msg, got undefined',
    );
  });

  it("a message's content is a text or a list of blocks", () => {
    expect(verdict([{ role: 'user', content: 5 }])).toBe(
      'messages[0].content: messages[0].content must be a text or a list of content blocks, got 5',
    );
    expect(verdict([{ role: 'user' }])).toBe(
      'messages[0].content: messages[0].content must be a text or a list of content blocks, got undefined',
    );
  });

  it('a block of an unknown type, or no object, is refused at its path; in system too', () => {
    expect(
      verdict([
        ask,
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'a' },
            { type: 'txt', text: 'b' },
          ],
        },
      ]),
    ).toBe(
      `messages[1].content[1].type: messages[1].content[1].type must be one of the Messages API's content block types (did you mean text?), got "txt"`,
    );
    expect(verdict([{ role: 'user', content: ['Hi'] }])).toBe(
      'messages[0].content[0]: messages[0].content[0] must be a content block (an object with a type), got a string of 2 characters',
    );
    expect(verdict([ask], { system: [{ type: 'text', text: 'a' }, { type: 'bogus' }] })).toBe(
      `system[1].type: system[1].type must be one of the Messages API's content block types, got "bogus"`,
    );
  });

  it('count_tokens is checked the same way', () => {
    expect(verdict([{ role: 'user', content: [{ type: 'bogus' }] }], {}, 'count_tokens')).toBe(
      `messages[0].content[0].type: messages[0].content[0].type must be one of the Messages API's content block types, got "bogus"`,
    );
    expect(verdict([{ role: 'user', content: 5 }], {}, 'count_tokens')).toBe(
      'messages[0].content: messages[0].content must be a text or a list of content blocks, got 5',
    );
    expect(verdict([{ role: 'robot', content: 'x' }], {}, 'count_tokens')).toBe(
      'messages[0].role: messages[0].role must be one of user, assistant, system, ctx, msg, got "robot"',
    );
  });
});

describe('messagesPromptFloor: the fewest tokens an Anthropic prompt can be, one per chat message', () => {
  it("each text message and each assistant's counts one, a user's blocks one per tool result and one for text; system nothing", () => {
    expect(messagesPromptFloor({ system: 'S', messages: [ask] })).toBe(1);
    // user (text and a document: one), assistant: one, tool_result: one, system: none, ctx: one, msg: one.
    expect(messagesPromptFloor(CLAUDE_CODE_TURN)).toBe(5);
    // A user turn of tool results alone is no user message in vLLM's conversion: its tool messages only.
    expect(
      messagesPromptFloor({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'a' },
              { type: 'text', text: '' },
            ],
          },
        ],
      }),
    ).toBe(1);
    expect(messagesPromptFloor({ messages: Array.from({ length: 200_000 }, () => ask) })).toBe(200_000);
  });

  it('is what the Messages endpoint gives the context check, under the field messages; count_tokens has none', () => {
    expect(endpointNamed('messages').promptFloor?.({ messages: [ask] })).toEqual({ field: 'messages', tokens: 1 });
    expect(endpointNamed('count_tokens').promptFloor).toBeUndefined();
  });
});
