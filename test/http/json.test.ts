import { describe, expect, it } from 'vitest';
import { parseJson, stringifyJson } from '../../src/http/json.js';

describe('lossless JSON', () => {
  it('integers above 2^53 - 1 are read as exact bigints; everything else as JSON.parse reads it', () => {
    expect(
      parseJson('{"room":9007199254740993,"max":18446744073709551615,"n":12,"x":1.5,"s":"9007199254740993"}'),
    ).toEqual({
      room: 9007199254740993n,
      max: 18446744073709551615n,
      n: 12,
      x: 1.5,
      s: '9007199254740993',
    });
    expect(parseJson('{"edge":9007199254740991}')).toEqual({ edge: 9007199254740991 });
    expect(parseJson('[-9007199254740993]')).toEqual([-9007199254740993n]);
    expect(parseJson('{"small":[1,2,3]}')).toEqual({ small: [1, 2, 3] });
  });

  it('bigints are written as exact JSON integers, and round-trip', () => {
    const body = { bootstrap_room: 9223372036854775807n, nested: [{ id: 2n ** 60n }], n: 1, s: 'x' };
    const text = stringifyJson(body);
    expect(text).toBe('{"bootstrap_room":9223372036854775807,"nested":[{"id":1152921504606846976}],"n":1,"s":"x"}');
    expect(parseJson(text)).toEqual(body);
    expect(stringifyJson({ a: 1, b: [true, null] })).toBe(JSON.stringify({ a: 1, b: [true, null] }));
  });

  it('text that is not JSON is a SyntaxError, on both paths', () => {
    expect(() => parseJson('{"a":')).toThrow(SyntaxError);
    expect(() => parseJson('{"a":12345678901234567890')).toThrow(SyntaxError);
  });
});
