import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { RoutingInput, routingText } from '../../src/routing/routing-input.js';
import { propertyOptions } from '../support/property.js';

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

describe('routingText: the endpoint named', () => {
  it("reads the prompt where the named endpoint has it, not where the body's shape would guess", () => {
    const rerank = { query: 'which one', documents: ['a', 'b'] };
    expect(routingText(rerank, 100, endpointNamed('rerank'))).toBe('which one');
    // Alone, the body reads as a completion without a prompt.
    expect(routingText(rerank)).toBe('');
  });
});

describe('routingText: its first maxChars characters', () => {
  it('a prompt that fits is kept whole, one that does not is cut at maxChars', () => {
    expect(routingText({ prompt: 'abcd' }, 4)).toBe('abcd');
    expect(routingText({ prompt: 'abcdef' }, 4)).toBe('abcd');
    // A text that fits is not cut, even one that ends in a lone high surrogate.
    expect(routingText({ prompt: 'ab\ud83d' }, 3)).toBe('ab\ud83d');
    expect(routingText({ prompt: 'abc' }, 0)).toBe('');
    expect(routingText({ prompt: 'abc' }, -1)).toBe('');
  });

  it('never cuts a surrogate pair in half: one character fewer instead', () => {
    expect(routingText({ prompt: 'ab😀c' }, 3)).toBe('ab');
    expect(routingText({ prompt: 'a😀b' }, 3)).toBe('a😀'); // cut after the pair
    expect(routingText({ prompt: 'a\u{10000}b' }, 2)).toBe('a'); // high surrogate 0xd800
    expect(routingText({ prompt: 'a\u{10fc00}b' }, 2)).toBe('a'); // high surrogate 0xdbff
    expect(routingText({ prompt: 'a\ue000b' }, 2)).toBe('a\ue000'); // past the surrogates
    expect(routingText({ prompt: 'a\ud7ffb' }, 2)).toBe('a\ud7ff'); // just before them
  });

  it('a chat is cut within the message that does not fit: its role, then its text, without the closing separator', () => {
    const chat = {
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'ok' },
      ],
    };
    const whole = 'user\u0000hi\u0001assistant\u0000ok\u0001';
    expect(routingText(chat, 21)).toBe(whole);
    expect(routingText(chat, 20)).toBe('user\u0000hi\u0001assistant\u0000ok');
    expect(routingText(chat, 19)).toBe('user\u0000hi\u0001assistant\u0000o');
    expect(routingText(chat, 10)).toBe('user\u0000hi\u0001as');
    expect(routingText(chat, 8)).toBe('user\u0000hi\u0001');
    expect(routingText(chat, 7)).toBe('user\u0000hi');
    expect(routingText(chat, 3)).toBe('use');
    expect(routingText({ messages: [{ role: 'user', content: 'a😀' }] }, 7)).toBe('user\u0000a');
  });

  it('property: a clipped text is a prefix of the whole, at most maxChars long, and never ends in half a pair', () => {
    const part = fc.constantFrom('a', 'é', '😀', '\u{10000}', 'text ');
    const content = fc.oneof(
      fc.array(part, { maxLength: 6 }).map((parts) => parts.join('')),
      fc.array(fc.record({ type: fc.constant('text'), text: fc.array(part, { maxLength: 4 }).map((p) => p.join('')) })),
    );
    fc.assert(
      fc.property(
        fc.array(fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content }), { maxLength: 5 }),
        fc.integer({ min: 0, max: 60 }),
        (messages, maxChars) => {
          const whole = routingText({ messages }, 1_000_000);
          const clipped = routingText({ messages }, maxChars);
          expect(whole.startsWith(clipped)).toBe(true);
          expect(clipped.length).toBeLessThanOrEqual(maxChars);
          expect(clipped.length).toBeGreaterThanOrEqual(Math.min(whole.length, maxChars - 1));
          if (whole.length <= maxChars) expect(clipped).toBe(whole);
          const last = clipped.charCodeAt(clipped.length - 1);
          if (clipped.length < whole.length) expect(last >= 0xd800 && last <= 0xdbff).toBe(false);
        },
      ),
      propertyOptions(500, 1149),
    );
  });

  it('a message that is not an object (a string, a number, null) adds nothing', () => {
    expect(routingText({ messages: ['hi', 5, null, { role: 'user', content: 'x' }] })).toBe('user\u0000x\u0001');
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
    expect(new RoutingInput({ prompt: 'Hello' }).promptText).toBe('Hello');
  });

  it("a prefix key the client named is the text prefix routing reads, never equal to a prompt's; the prompt's size is still its own", () => {
    const endpoint = endpointNamed('completions');
    const keyed = new RoutingInput({ prompt: 'a long prompt' }, undefined, undefined, endpoint, 'conv-1');
    expect(keyed.text).toBe('\u0002conv-1');
    expect(keyed.promptText).toBe('a long prompt');
    // A prompt that is the key's own text does not share its prefix.
    expect(new RoutingInput({ prompt: 'conv-1' }).text.startsWith(keyed.text)).toBe(false);
    // Empty is none; a key past the routing text's limit is cut to it.
    expect(new RoutingInput({ prompt: 'p' }, undefined, undefined, endpoint, '').text).toBe('p');
    expect(new RoutingInput({ prompt: 'p' }, undefined, undefined, endpoint, 'k'.repeat(70_000)).text).toHaveLength(
      65_536,
    );
  });
});

describe('RoutingInput: token ids', () => {
  it("a completion's prompt as ids (a batch's first), else SGLang's input_ids", () => {
    expect(new RoutingInput({ prompt: [1, 2, 3] }).tokenIds).toEqual([1, 2, 3]);
    expect(new RoutingInput({ prompt: [[4, 5], [6]] }).tokenIds).toEqual([4, 5]);
    expect(new RoutingInput({ input_ids: [7, 8] }).tokenIds).toEqual([7, 8]);
    expect(new RoutingInput({ input_ids: [[9], [10]] }).tokenIds).toEqual([9]);
    // A prompt that is no list of ids leaves it to input_ids.
    expect(new RoutingInput({ prompt: [], input_ids: [1] }).tokenIds).toEqual([1]);
    expect(new RoutingInput({ prompt: [1.5, 2], input_ids: [3] }).tokenIds).toEqual([3]);
    expect(new RoutingInput({ prompt: [[], [1]], input_ids: [4] }).tokenIds).toEqual([4]);
  });

  it('none for a text prompt, a chat, a list with anything but whole numbers, or no prompt', () => {
    expect(new RoutingInput({ prompt: 'Hello' }).tokenIds).toBeUndefined();
    expect(new RoutingInput({ prompt: ['first', 'second'] }).tokenIds).toBeUndefined();
    expect(new RoutingInput({ messages: [{ role: 'user', content: 'Hi' }] }).tokenIds).toBeUndefined();
    expect(new RoutingInput({ prompt: [1, '2'] }).tokenIds).toBeUndefined();
    expect(new RoutingInput({ prompt: [[]] }).tokenIds).toBeUndefined();
    expect(new RoutingInput({ input_ids: [] }).tokenIds).toBeUndefined();
    const none = new RoutingInput({});
    expect(none.tokenIds).toBeUndefined();
    expect(none.tokenIds).toBeUndefined(); // asked twice: still none
  });

  it("the ids the router's tokenizer made are taken over the body's", () => {
    expect(new RoutingInput({ messages: [{ role: 'user', content: 'Hi' }] }, undefined, [11, 12]).tokenIds).toEqual([
      11, 12,
    ]);
    expect(new RoutingInput({ prompt: [1, 2] }, 's', [3]).tokenIds).toEqual([3]);
  });

  it('the cached tokens a policy expected, per worker; none before one says', () => {
    const input = new RoutingInput({ prompt: [1, 2] });
    expect(input.predictedCached('w0')).toBeUndefined();
    input.notePredictedCached('w0', 16);
    input.notePredictedCached('w1', 32);
    input.notePredictedCached('w0', 48); // a retry routed again: the latest expectation
    expect(input.predictedCached('w0')).toBe(48);
    expect(input.predictedCached('w1')).toBe(32);
    expect(input.predictedCached('w2')).toBeUndefined();
  });

  it('the body is the one the client sent', () => {
    const body = { model: 'm', prompt: 'Hi' };
    expect(new RoutingInput(body).body).toBe(body);
  });
});

describe('RoutingInput: the endpoint and the tokenizer', () => {
  it('names the API the request came in on: the one given, else the body says', () => {
    expect(new RoutingInput({ prompt: 'Hi' }).endpoint).toBe(endpointNamed('completions'));
    expect(new RoutingInput({ messages: [] }).endpoint).toBe(endpointNamed('chat'));
    expect(new RoutingInput({ text: 'Hi' }, undefined, undefined, endpointNamed('generate')).endpoint).toBe(
      endpointNamed('generate'),
    );
  });

  it("takes the tokenizer's ids once they are known, unless the body or an earlier call gave some", () => {
    const input = new RoutingInput({ prompt: 'Hi' });
    expect(input.tokenIds).toBeUndefined();
    input.tokenized([1, 2]);
    expect(input.tokenIds).toEqual([1, 2]);
    input.tokenized([3]);
    expect(input.tokenIds).toEqual([1, 2]);
    const given = new RoutingInput({ prompt: 'Hi' }, undefined, [7]);
    given.tokenized([8]);
    expect(given.tokenIds).toEqual([7]);
    const fromBody = new RoutingInput({ prompt: [5, 6] });
    fromBody.tokenized([9]);
    expect(fromBody.tokenIds).toEqual([5, 6]);
  });
});

describe("a request's service levels and the legs that cannot meet them", () => {
  it('starts with no service levels, priority 0 and no leg unmeetable', () => {
    const input = new RoutingInput({ prompt: 'Hi' });
    expect(input.serviceLevels).toBeUndefined();
    expect(input.priority).toBe(0);
    expect(input.unmeetable).toEqual([]);
  });

  it('remembers each leg noted unmeetable once, until a new decision clears the picks', () => {
    const input = new RoutingInput({ prompt: 'Hi' });
    input.noteUnmeetable('prefill');
    input.noteUnmeetable('prefill');
    input.noteUnmeetable('decode');
    expect(input.unmeetable).toEqual(['prefill', 'decode']);
    input.clearPicked();
    expect(input.unmeetable).toEqual([]);
  });
});
