import { describe, expect, it } from 'vitest';
import { RoutingInput, routingText } from '../../src/routing/routing-input.js';

describe('routingText', () => {
  it("a completion's prompt: the text, a batch's first prompt, token ids as numbers; SGLang's text", () => {
    expect(routingText({ prompt: 'Hello' })).toBe('Hello');
    expect(routingText({ prompt: ['first', 'second'] })).toBe('first');
    expect(routingText({ prompt: [1, 2, 3] })).toBe('1,2,3');
    expect(routingText({ prompt: [[4, 5], [6]] })).toBe('4,5');
    expect(routingText({ text: 'native' })).toBe('native');
    expect(routingText({ prompt: [] })).toBe('');
    expect(routingText({ model: 'm' })).toBe('');
  });

  it('chat messages in order, each its role and its text parts; two conversations share a prefix only where their messages do', () => {
    const chat = (...contents: unknown[]) =>
      routingText({ messages: contents.map((content, i) => ({ role: i === 0 ? 'system' : 'user', content })) });
    expect(
      chat('Be brief.', [{ type: 'text', text: 'Hi ' }, { type: 'image_url' }, { type: 'text', text: 'there' }]),
    ).toBe('system\u0000Be brief.\u0001user\u0000Hi there\u0001');
    expect(chat('ab', 'c')).not.toBe(chat('a', 'bc'));
    // A growing conversation: each turn's text starts with the previous turn's.
    const turn1 = chat('sys', 'q1');
    const turn2 = routingText({
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'q1' },
        { role: 'assistant', content: 'a1' },
        { role: 'user', content: 'q2' },
      ],
    });
    expect(turn2.startsWith(turn1)).toBe(true);
    expect(routingText({ messages: [null, { content: 7 }] })).toBe('\u0000\u0001');
  });
});

describe('RoutingInput', () => {
  it('the session key is the one given (a header), else the body user; empty is none', () => {
    expect(new RoutingInput({ user: 'u1' }, 'chat-9').sessionKey).toBe('chat-9');
    expect(new RoutingInput({ user: 'u1' }).sessionKey).toBe('u1');
    expect(new RoutingInput({ user: 'u1' }, '').sessionKey).toBe('u1');
    expect(new RoutingInput({ user: '' }).sessionKey).toBeUndefined();
    expect(new RoutingInput({ user: 5 }).sessionKey).toBeUndefined();
  });

  it('the text is the routing text of the body', () => {
    expect(new RoutingInput({ prompt: 'Hello' }).text).toBe('Hello');
  });
});
