import { describe, expect, it } from 'vitest';
import { describeKind, describeValue } from '../../src/util/describe-value.js';

describe('describeKind: a value said by its kind, never its content (a prompt may be in it)', () => {
  it('a string by its length, a list by its size, an object as one; anything else as describeValue says it', () => {
    expect(describeKind('SECRET-PROMPT')).toBe('a string of 13 characters');
    expect(describeKind(['SECRET', 'PROMPT'])).toBe('a list of 2');
    expect(describeKind({ text: 'SECRET-PROMPT' })).toBe('an object');
    for (const value of [42, true, null, undefined]) expect(describeKind(value)).toBe(describeValue(value));
  });
});
