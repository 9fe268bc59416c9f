import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nestsDeeperThan, parseJson, stringifyJson } from '../../src/http/json.js';
import { propertyOptions } from '../support/property.js';

/** JSON values with bigints among the leaves, beyond what a double holds exactly. */
const exactValue = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).filter((n) => !Number.isSafeInteger(Number(n))),
    // Sixteen digits: the shortest integers beyond 2^53 - 1.
    fc.bigInt({ min: 2n ** 53n + 1n, max: 10n ** 16n - 1n }).map((n) => (n % 2n === 0n ? n : -n)),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    // Strings full of what the scan looks for: digit runs, quotes, backslashes, signs, dots.
    fc.stringMatching(/^[0-9"\\.eE+\-a ]{0,40}$/),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.stringMatching(/^[0-9a-z"\\]{0,20}$/), tie('value'), { maxKeys: 4 }),
  ),
})).value;

/** What stringifyJson must write: JSON.stringify's text with each bigint as its digits. */
function reference(value: unknown): string {
  const digits: string[] = [];
  const text = JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? `@@${digits.push(v.toString()) - 1}@@` : v));
  return text.replace(/"@@(\d+)@@"/g, (_, i) => digits[Number(i)] as string);
}

describe('lossless JSON', () => {
  it('property: bigints among any JSON are written as JSON.stringify writes the rest, and read back to the same text', () => {
    fc.assert(
      fc.property(exactValue, (value) => {
        const text = reference(value);
        expect(stringifyJson(value)).toBe(text);
        expect(stringifyJson(parseJson(text))).toBe(text);
      }),
      propertyOptions(500, 1129),
    );
  });

  it('long strings (a prompt both legs carry) are written as JSON.stringify writes them, the same one twice, another of the same length as itself', () => {
    const prompt = `"quoted" \\ \n ${'é中 '.repeat(8000)}`;
    const other = `${prompt.slice(0, -1)}!`;
    expect(other.length).toBe(prompt.length);
    const prefill = { prompt, max_tokens: 1, bootstrap_room: 2n ** 63n - 1n };
    const decode = { prompt, max_tokens: 64, bootstrap_room: 2n ** 63n - 1n };
    for (const body of [
      prefill,
      decode,
      { ...decode, prompt: other },
      { messages: [{ content: [{ text: other }] }] },
    ]) {
      expect(stringifyJson(body)).toBe(reference(body));
    }
    expect(stringifyJson(prompt)).toBe(JSON.stringify(prompt));
    expect(stringifyJson({ prompt: other })).toBe(JSON.stringify({ prompt: other }));
    expect(stringifyJson([prompt, 1, other])).toBe(JSON.stringify([prompt, 1, other]));
    // A chat with several long messages, written for two legs; and more long strings than are
    // kept, each still written as JSON.stringify writes it.
    const chat = { messages: [prompt, other, `${other}?`].map((content) => ({ role: 'user', content })) };
    for (let leg = 0; leg < 2; leg++)
      expect(stringifyJson({ ...chat, room: 1n })).toBe(reference({ ...chat, room: 1n }));
    const many = Array.from({ length: 12 }, (_, i) => `${i}${'x'.repeat(300_000)}`);
    expect(stringifyJson(many)).toBe(JSON.stringify(many));
    expect(stringifyJson(many.slice(0, 3))).toBe(JSON.stringify(many.slice(0, 3)));
  });

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
    expect(() => parseJson('{"a":012345678901234567890}')).toThrow(SyntaxError);
    expect(() => parseJson('{"a" 12345678901234567890}')).toThrow(SyntaxError);
  });

  it('long digits inside strings, fractions and exponents stay what JSON.parse makes of them', () => {
    const text =
      '{"s":"x\\"12345678901234567890","t":"\\\\","u":12345678901234567890,"f":12345678901234567890.5,"e":1.5e12345678901234567,"g":-0.12345678901234567890}';
    expect(parseJson(text)).toEqual({
      s: 'x"12345678901234567890',
      t: '\\',
      u: 12345678901234567890n,
      f: Number('12345678901234567890.5'),
      e: Number.POSITIVE_INFINITY,
      g: Number('-0.12345678901234567890'),
    });
    expect(parseJson('12345678901234567890')).toBe(12345678901234567890n);
    expect(parseJson('"12345678901234567890"')).toBe('12345678901234567890');
  });

  it('a long run of digits next to an exponent, on either side and in either case, is a number as JSON.parse reads it', () => {
    for (const number of [
      '12345678901234567890e2',
      '12345678901234567890E2',
      '1e12345678901234567',
      '1E12345678901234567',
      '1e+12345678901234567',
      '1E-12345678901234567890',
      '-12345678901234567890e-30',
    ]) {
      const text = `{"u":12345678901234567890,"n":${number}}`;
      expect(parseJson(text), number).toEqual({ u: 12345678901234567890n, n: JSON.parse(number) });
    }
  });

  it('a string left open after a long integer is a SyntaxError, not a scan without end', () => {
    expect(() => parseJson('{"a":12345678901234567890,"b":"open')).toThrow(SyntaxError);
    expect(() => parseJson('{"a":12345678901234567890,"b":"open\\"')).toThrow(SyntaxError);
  });

  it('nesting far deeper than a call stack is read, with its integers exact', () => {
    const depth = 100_000;
    const value = parseJson(`${'['.repeat(depth)}9223372036854775807${']'.repeat(depth)}`);
    let inner: unknown = value;
    for (let i = 0; i < depth; i++) inner = (inner as unknown[])[0];
    expect(inner).toBe(9223372036854775807n);
  });

  it('strings with NUL characters and marks of their own survive a round trip', () => {
    const body = { a: '\u0000', b: '\u0000disagg-0000000000000000:12', room: 2n ** 64n, list: [1n, 'x', 2n ** 63n] };
    const text = stringifyJson(body);
    expect(text).toBe(
      '{"a":"\\u0000","b":"\\u0000disagg-0000000000000000:12","room":18446744073709551616,"list":[1,"x",9223372036854775808]}',
    );
    expect(parseJson(text)).toEqual({ ...body, list: [1, 'x', 2n ** 63n] });
    expect(stringifyJson(2n ** 64n)).toBe('18446744073709551616');
  });

  it('only the objects on the way to a bigint are copied; the value given is left as it was', () => {
    const shared = { big: [1, 2, 3] };
    const body = { room: 2n ** 60n, shared };
    expect(stringifyJson(body)).toBe('{"room":1152921504606846976,"shared":{"big":[1,2,3]}}');
    expect(body.room).toBe(2n ** 60n);
  });

  it('nesting depth: a scalar is 0, each object or array one more, found without recursion', () => {
    expect(nestsDeeperThan(1, 0)).toBe(false);
    expect(nestsDeeperThan({ a: [1] }, 2)).toBe(false);
    expect(nestsDeeperThan({ a: [1] }, 1)).toBe(true);
    expect(nestsDeeperThan({ a: 1, b: { c: [[]] } }, 4)).toBe(false);
    expect(nestsDeeperThan({ a: 1, b: { c: [[]] } }, 3)).toBe(true);
    expect(nestsDeeperThan(parseJson(`${'['.repeat(100_000)}${']'.repeat(100_000)}`), 99_999)).toBe(true);
  });
});
