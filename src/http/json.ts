import { isInteger, parse, stringify } from 'lossless-json';

/** A run of 16 digits or more: the only way a JSON integer can exceed 2^53 - 1. */
const LONG_DIGITS = /\d{16}/;

/**
 * Parses JSON without losing integers above 2^53 - 1 (`bootstrap_room`, 64-bit ids): those
 * become `bigint`s; every other number is a `number`, as `JSON.parse` makes it. Text without a
 * run of 16 digits cannot hold such an integer and goes through `JSON.parse` (the hot path of
 * streamed chunks); the rest through lossless-json.
 *
 * @throws {SyntaxError} for text that is not JSON.
 */
export function parseJson(text: string): unknown {
  if (!LONG_DIGITS.test(text)) return JSON.parse(text);
  return parse(text, null, exactNumber);
}

function exactNumber(value: string): number | bigint {
  const number = Number(value);
  return Number.isSafeInteger(number) || !isInteger(value) ? number : BigInt(value);
}

/**
 * Serialises to JSON with `bigint`s as exact JSON integers (`JSON.stringify` throws on them,
 * and Node 20 has no `JSON.rawJSON`). Values without a `bigint` go through `JSON.stringify`.
 */
export function stringifyJson(value: unknown): string {
  if (!containsBigInt(value, 0)) return JSON.stringify(value);
  return stringify(value) as string;
}

function containsBigInt(value: unknown, depth: number): boolean {
  if (typeof value === 'bigint') return true;
  if (typeof value !== 'object' || value === null || depth > 64) return false;
  if (Array.isArray(value)) return value.some((item) => containsBigInt(item, depth + 1));
  for (const key in value) {
    if (containsBigInt((value as Record<string, unknown>)[key], depth + 1)) return true;
  }
  return false;
}
