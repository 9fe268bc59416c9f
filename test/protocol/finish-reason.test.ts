import { describe, expect, it } from 'vitest';
import { FinishReason } from '../../src/protocol/finish-reason.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';

describe('FinishReason', () => {
  it.each([
    ['"eos"', 'eos', 'eos'],
    ['"length"', 'length', 'length'],
    ['"stop"', 'stop', 'stop'],
    ['"cancelled"', 'cancelled', 'cancelled'],
    ['"content_filter"', 'content_filter', 'content_filter'],
    ['the legacy alias "abort"', 'abort', 'cancelled'],
    ['the JSON error form', { error: 'OOM' }, { error: 'OOM' }],
    ['the display error form', 'error: OOM: 3 blocks', { error: 'OOM: 3 blocks' }],
  ])('parses %s', (_, input, expected) => {
    expect(FinishReason.parse(input)).toEqual(expected);
  });

  it('parses the JSON the reference writes', () => {
    expect(FinishReason.parse(JSON.parse('{"error":"boom"}'))).toEqual({ error: 'boom' });
    expect(JSON.stringify(LLMEngineOutput.error('boom').finish_reason)).toBe('{"error":"boom"}');
  });

  it.each([['tool_calls'], [''], [42], [null], [{ error: 1 }], [undefined]])(
    'refuses %j with a message naming what was expected',
    (input) => {
      expect(() => FinishReason.parse(input)).toThrow(TypeError);
      expect(() => FinishReason.parse(input)).toThrow(/expected one of "eos", "length", "stop"/);
      expect(FinishReason.tryParse(input)).toBeUndefined();
    },
  );

  it('formats the display form', () => {
    expect(FinishReason.format('length')).toBe('length');
    expect(FinishReason.format({ error: 'boom' })).toBe('error: boom');
    expect(FinishReason.parse(FinishReason.format({ error: 'boom' }))).toEqual({ error: 'boom' });
  });

  it.each([
    ['eos', 'stop'],
    ['stop', 'stop'],
    ['length', 'length'],
    ['content_filter', 'content_filter'],
    ['cancelled', 'abort'],
  ] as const)('maps %s to the OpenAI-compatible finish reason %s', (reason, openai) => {
    expect(FinishReason.toOpenAI(reason)).toBe(openai);
  });

  it('never maps a failure to a finish: an error is `error`, a cancellation `abort` (as vLLM and SGLang say them)', () => {
    expect(FinishReason.toOpenAI({ error: 'boom' })).toBe('error');
    for (const failed of ['cancelled', { error: 'x' }] as const) {
      expect(['stop', 'length', 'content_filter']).not.toContain(FinishReason.toOpenAI(failed));
    }
  });

  it('tells failures from finishes', () => {
    expect(FinishReason.isFailure({ error: 'x' })).toBe(true);
    expect(FinishReason.isFailure('cancelled')).toBe(true);
    expect(FinishReason.isFailure('abort')).toBe(true);
    for (const reason of ['eos', 'length', 'stop', 'content_filter', undefined, null]) {
      expect(FinishReason.isFailure(reason)).toBe(false);
    }
  });
});
