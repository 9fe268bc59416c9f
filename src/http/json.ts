import { randomBytes } from 'node:crypto';

/**
 * Stands for an exact integer inside text given to, or taken from, `JSON.parse` and
 * `JSON.stringify`: a string no JSON text can hold unless it was written by this module (it
 * starts with a NUL, which JSON only holds escaped, and a random tag of this process).
 */
const MARK = `\u0000disagg-${randomBytes(8).toString('hex')}:`;
/** The mark as JSON writes it inside a string. */
const ESCAPED_MARK = JSON.stringify(MARK).slice(1, -1);

/**
 * Where the integers a `JSON.parse` would round (beyond 2^53 - 1) are, as start and end offsets
 * in pairs. Strings are skipped from quote to quote (a native search, so a long prompt costs
 * next to nothing); between them a loop finds the runs of 16 digits or more (the only way an
 * integer can be that large; cheaper than a regular expression, which tries every digit as a
 * start). Text that is not JSON is scanned as well as it goes; the parse that follows refuses it.
 */
export function unsafeIntegers(text: string): number[] {
  const spans: number[] = [];
  const length = text.length;
  let at = 0;
  while (at < length) {
    const quote = text.indexOf('"', at);
    const end = quote === -1 ? length : quote;
    let run = 0;
    for (let i = at; i <= end; i++) {
      const digit = i < end ? text.charCodeAt(i) - 0x30 : -1;
      if (digit >= 0 && digit <= 9) run += 1;
      else {
        if (run >= 16) addIfUnsafe(text, i - run, i, spans);
        run = 0;
      }
    }
    if (quote === -1) break;
    at = afterString(text, quote);
  }
  return spans;
}

/** Adds the digits `digits..end` to `spans` if they are a whole JSON integer beyond 2^53 - 1. */
function addIfUnsafe(text: string, digits: number, end: number, spans: number[]): void {
  const start = text.charCodeAt(digits - 1) === 0x2d ? digits - 1 : digits;
  if (isWholeInteger(text, start, digits, end) && !Number.isSafeInteger(Number(text.slice(start, end)))) {
    spans.push(start, end);
  }
}

/**
 * Whether the digits `digits..end` (with a sign from `start`) are a whole JSON integer: not the
 * fraction or exponent of a number, not followed by one, without a leading zero (which is not
 * JSON, and is left for the parse to refuse).
 */
function isWholeInteger(text: string, start: number, digits: number, end: number): boolean {
  const before = text.charCodeAt(start - 1);
  const after = text.charCodeAt(end);
  if (isNumberPart(before) || after === 0x2e || after === 0x65 || after === 0x45) return false;
  return text.charCodeAt(digits) !== 0x30;
}

/** The offset after the string that opens at `start` (the end of the text if it never closes). */
function afterString(text: string, start: number): number {
  let at = start + 1;
  for (;;) {
    const quote = text.indexOf('"', at);
    if (quote === -1) return text.length;
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === 0x5c) backslashes += 1;
    if (backslashes % 2 === 0) return quote + 1;
    at = quote + 1;
  }
}

function isNumberPart(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}

/**
 * Parses JSON without losing integers above 2^53 - 1 (`bootstrap_room`, 64-bit ids): those
 * become `bigint`s; every other number is a `number`, as `JSON.parse` makes it. Text without
 * such an integer goes to `JSON.parse` as it is (the hot path of streamed chunks); otherwise
 * the integers are given to `JSON.parse` as marked strings and one walk of the result turns
 * them into `bigint`s. Time in proportion to the size, near `JSON.parse`'s own (a benchmark row
 * of `npm run bench` shows it), never a parser written in JavaScript.
 *
 * @throws {SyntaxError} for text that is not JSON.
 */
export function parseJson(text: string): unknown {
  const spans = unsafeIntegers(text);
  if (spans.length === 0) return JSON.parse(text);
  let marked = '';
  let from = 0;
  for (let k = 0; k < spans.length; k += 2) {
    const start = spans[k] as number;
    const end = spans[k + 1] as number;
    marked += `${text.slice(from, start)}"${ESCAPED_MARK}${text.slice(start, end)}"`;
    from = end;
  }
  marked += text.slice(from);
  return unmark(JSON.parse(marked));
}

/** Turns marked strings back into `bigint`s, without recursion (the value may nest deeply). */
function unmark(root: unknown): unknown {
  const exact = (value: unknown): unknown =>
    typeof value === 'string' && value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value;
  if (typeof root !== 'object' || root === null) return exact(root);
  const stack: object[] = [root];
  while (stack.length > 0) {
    const node = stack.pop() as Record<string, unknown> | unknown[];
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const value = node[i];
        if (typeof value === 'object' && value !== null) stack.push(value);
        else if (typeof value === 'string') node[i] = exact(value);
      }
      continue;
    }
    for (const key of Object.keys(node)) {
      const value = node[key];
      if (typeof value === 'object' && value !== null) stack.push(value);
      else if (typeof value === 'string') node[key] = exact(value);
    }
  }
  return root;
}

/**
 * Serialises to JSON with `bigint`s as exact JSON integers (`JSON.stringify` throws on them,
 * and Node 20 has no `JSON.rawJSON`). A value without a `bigint` goes through `JSON.stringify`
 * as it is; otherwise only the objects and arrays on the way to a `bigint` are written here,
 * and every part without one is written by `JSON.stringify` whole.
 */
export function stringifyJson(value: unknown): string {
  if (!writtenHere(value, 0)) return JSON.stringify(value);
  return exactJson(value, 0) as string;
}

/**
 * A string this long (a long prompt, an agent's context) is written once for the calls that
 * send it on: both legs of a request carry the client's prompt, and escaping 220 KB of text
 * was a tenth of the proxy's CPU per such request. The last few are kept with their JSON (a
 * chat may hold several), at most LONG_KEPT_CHARS of them, the oldest dropped first.
 */
const LONG_STRING = 16_384;
const LONG_KEPT = 8;
const LONG_KEPT_CHARS = 2 * 1024 * 1024;
const longJson = new Map<string, string>();
let longKeptChars = 0;

/** `JSON.stringify(text)` of a long string, written once while it is among the last ones seen. */
function longStringJson(text: string): string {
  const known = longJson.get(text);
  if (known !== undefined) return known;
  const json = JSON.stringify(text);
  longJson.set(text, json);
  longKeptChars += text.length;
  for (const [oldest] of longJson) {
    if (longJson.size <= LONG_KEPT && longKeptChars <= LONG_KEPT_CHARS) break;
    longJson.delete(oldest);
    longKeptChars -= oldest.length;
  }
  return json;
}

/** Like `JSON.stringify(value)` (undefined where it gives undefined), with exact bigints. */
function exactJson(value: unknown, depth: number): string | undefined {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string' && value.length >= LONG_STRING) return longStringJson(value);
  if (
    typeof value !== 'object' ||
    value === null ||
    typeof (value as { toJSON?: unknown }).toJSON === 'function' ||
    (depth > 0 && !writtenHere(value, depth))
  ) {
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map((item) => exactJson(item, depth + 1) ?? 'null').join(',')}]`;
  }
  const parts: string[] = [];
  for (const key of Object.keys(value)) {
    const text = exactJson((value as Record<string, unknown>)[key], depth + 1);
    if (text !== undefined) parts.push(`${JSON.stringify(key)}:${text}`);
  }
  return `{${parts.join(',')}}`;
}

/**
 * Whether a `bigint` or a long string is anywhere in `value` (as deep as JSON.stringify goes
 * before its stack gives out): what this module writes itself.
 */
function writtenHere(value: unknown, depth: number): boolean {
  if (typeof value === 'bigint') return true;
  if (typeof value === 'string') return value.length >= LONG_STRING;
  if (typeof value !== 'object' || value === null || depth > 1000) return false;
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
  if (Array.isArray(value)) {
    for (const item of value) {
      if (mayHoldOwn(item) && writtenHere(item, depth + 1)) return true;
    }
    return false;
  }
  for (const key of Object.keys(value)) {
    const item = (value as Record<string, unknown>)[key];
    if (mayHoldOwn(item) && writtenHere(item, depth + 1)) return true;
  }
  return false;
}

/** Whether a value may be or hold what this module writes itself, tested without a call per short string (a streamed chunk's fields). */
function mayHoldOwn(item: unknown): boolean {
  return (
    typeof item === 'object' || typeof item === 'bigint' || (typeof item === 'string' && item.length >= LONG_STRING)
  );
}

/**
 * Whether `value` nests objects and arrays deeper than `limit` (a scalar is depth 0), found
 * without recursion and without visiting more than it must: what `JSON.stringify` and every
 * recursive reader after it would overflow their stack on.
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop() as [unknown, number];
    if (typeof node !== 'object' || node === null) continue;
    if (depth + 1 > limit) return true;
    const children = Array.isArray(node) ? node : Object.values(node);
    for (const child of children) if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
  }
  return false;
}
