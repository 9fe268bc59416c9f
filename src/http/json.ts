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
 * in pairs. A loop over the text finds the runs of 16 digits or more (the only way an integer can
 * be that large; cheaper than a regular expression, which tries every digit as a start); only if
 * there is one are strings located, from quote to quote, to leave out runs inside them. Text that
 * is not JSON is scanned as well as it goes; the parse that follows refuses it.
 */
export function unsafeIntegers(text: string): number[] {
  const runs: number[] = [];
  let run = 0;
  const length = text.length;
  for (let i = 0; i < length; i++) {
    const digit = text.charCodeAt(i) - 0x30;
    if (digit >= 0 && digit <= 9) run += 1;
    else {
      if (run >= 16) runs.push(i - run, i);
      run = 0;
    }
  }
  if (run >= 16) runs.push(length - run, length);
  if (runs.length === 0) return runs;
  const spans: number[] = [];
  // The next string at or after where the runs are: [opening quote, offset after its close).
  let open = text.indexOf('"');
  let close = open === -1 ? -1 : afterString(text, open);
  for (let k = 0; k < runs.length; k += 2) {
    const digits = runs[k] as number;
    const end = runs[k + 1] as number;
    while (open !== -1 && close <= digits) {
      open = text.indexOf('"', close);
      close = open === -1 ? -1 : afterString(text, open);
    }
    if (open !== -1 && open < digits) continue; // inside a string
    const start = text.charCodeAt(digits - 1) === 0x2d ? digits - 1 : digits;
    if (isWholeInteger(text, start, digits, end) && !Number.isSafeInteger(Number(text.slice(start, end)))) {
      spans.push(start, end);
    }
  }
  return spans;
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
 * and Node 20 has no `JSON.rawJSON`). Values without a `bigint` go through `JSON.stringify` as
 * they are; otherwise a copy with the `bigint`s marked (only the objects and arrays on the way
 * to one are copied) goes through it, and the marks are replaced by the digits.
 */
export function stringifyJson(value: unknown): string {
  const marked = markBigInts(value, 0);
  if (marked === value) return JSON.stringify(value);
  const text = JSON.stringify(marked);
  // Each mark, as written (quoted and escaped), back to the bare digits it stands for.
  const opening = `"${ESCAPED_MARK}`;
  let exact = '';
  let from = 0;
  for (let at = text.indexOf(opening); at !== -1; at = text.indexOf(opening, from)) {
    const digits = at + opening.length;
    const end = text.indexOf('"', digits);
    exact += text.slice(from, at) + text.slice(digits, end);
    from = end + 1;
  }
  return exact + text.slice(from);
}

/** `value` with every `bigint` as a marked string; the same reference where there is none. */
function markBigInts(value: unknown, depth: number): unknown {
  if (typeof value === 'bigint') return `${MARK}${value}`;
  // As deep as JSON.stringify goes before it gives up on the stack itself.
  if (typeof value !== 'object' || value === null || depth > 1000) return value;
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = value[i];
      const marked = typeof item === 'object' || typeof item === 'bigint' ? markBigInts(item, depth + 1) : item;
      if (marked !== item) {
        copy ??= value.slice();
        copy[i] = marked;
      }
    }
    return copy ?? value;
  }
  let copy: Record<string, unknown> | undefined;
  for (const key of Object.keys(value)) {
    const item = (value as Record<string, unknown>)[key];
    const marked = typeof item === 'object' || typeof item === 'bigint' ? markBigInts(item, depth + 1) : item;
    if (marked !== item) {
      copy ??= { ...(value as Record<string, unknown>) };
      copy[key] = marked;
    }
  }
  return copy ?? value;
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
