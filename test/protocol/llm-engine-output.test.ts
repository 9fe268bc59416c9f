import { describe, expect, it } from 'vitest';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';

describe('LLMEngineOutput constructors', () => {
  it.each([
    ['length', LLMEngineOutput.length(), 'length'],
    ['stop', LLMEngineOutput.stop(), 'stop'],
    ['eos', LLMEngineOutput.eos(), 'eos'],
    ['cancelled', LLMEngineOutput.cancelled(), 'cancelled'],
  ])('%s() is a terminal output with no tokens', (_, output, reason) => {
    expect(output).toEqual({ token_ids: [], finish_reason: reason });
  });

  it('error(message) carries the engine text in the wire form', () => {
    expect(JSON.stringify(LLMEngineOutput.error('CUDA OOM'))).toBe(
      '{"token_ids":[],"finish_reason":{"error":"CUDA OOM"}}',
    );
  });

  it('each call returns a new object', () => {
    expect(LLMEngineOutput.length()).not.toBe(LLMEngineOutput.length());
  });
});
