// Parsers: each takes what a source gave (strings from flags and the environment) and
// returns the value, or throws an Invalid that says what was expected. Each is typed by what
// it returns, which rows.ts holds against the option types.
import { type DeciderSetting, readDeciders } from '../../routing/decider-plugins.js';
import { type FilterSetting, readFilters } from '../../routing/filter-plugins.js';
import { type PickerSetting, readPicker } from '../../routing/picker-plugins.js';
import { readScorers, type ScorerSetting } from '../../routing/plugins.js';
import { closest } from '../../util/closest.js';
import { describeValue } from '../../util/describe-value.js';
import { Invalid } from './setting.js';

/** One of `choices`, a typo answered with the choice it most likely meant. */
export function oneOf<const T extends string>(choices: readonly T[]): (value: unknown) => T {
  return (value) => {
    if (typeof value === 'string' && (choices as readonly string[]).includes(value)) return value as T;
    const expected =
      choices.length === 2 ? `'${choices[0]}' or '${choices[1]}'` : `one of ${choices.map((c) => `'${c}'`).join(', ')}`;
    // A typo of a choice gets the choice it most likely meant.
    const near = typeof value === 'string' ? closest(value, choices) : undefined;
    throw new Invalid(
      `must be ${expected}, got ${describeValue(value)}${near === undefined ? '' : ` (did you mean '${near}'?)`}`,
    );
  };
}

/** A number from 0 to 1. */
export function unitRatio(value: unknown): number {
  const ratio = number(value);
  if (!(ratio >= 0 && ratio <= 1)) throw new Invalid(`must be a number from 0 to 1, got ${describeValue(value)}`);
  return ratio;
}

/** A number of 1 or more (a ratio of loads). */
export function atLeastOne(value: unknown): number {
  const ratio = number(value);
  if (!(Number.isFinite(ratio) && ratio >= 1))
    throw new Invalid(`must be a number of 1 or more, got ${describeValue(value)}`);
  return ratio;
}

/** An HTTP header name, lower-cased as Node presents headers. */
export function headerName(value: unknown): string {
  if (typeof value !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value)) {
    throw new Invalid(`must be an HTTP header name, got ${describeValue(value)}`);
  }
  return value.toLowerCase();
}

function number(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && value.trim() !== '') return Number(value);
  return Number.NaN;
}

/** A number above 0. */
export function positiveNumber(value: unknown): number {
  const n = number(value);
  if (!(n > 0)) throw new Invalid(`takes a number above 0, got ${describeValue(value)}`);
  return n;
}

/** A positive number of milliseconds. */
export function positiveMs(value: unknown): number {
  const ms = number(value);
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new Invalid(`must be a positive number of milliseconds, got ${describeValue(value)}`);
  }
  return ms;
}

/** A number of milliseconds, 0 allowed (0 often turns a budget off). */
export function nonNegativeMs(value: unknown): number {
  const ms = number(value);
  if (!Number.isFinite(ms) || ms < 0) {
    throw new Invalid(`must be a non-negative number of milliseconds, got ${describeValue(value)}`);
  }
  return ms;
}

/** A positive whole number. */
export function positiveInteger(value: unknown): number {
  const n = number(value);
  if (!Number.isSafeInteger(n) || n <= 0)
    throw new Invalid(`must be a positive whole number, got ${describeValue(value)}`);
  return n;
}

/** A switch: true or false, as a boolean or as the strings a variable gives. */
export function switchValue(value: unknown): boolean {
  if (value === true || value === 'true' || value === '1') return true;
  if (value === false || value === 'false' || value === '0') return false;
  throw new Invalid(`must be true or false, got ${describeValue(value)}`);
}

/** A whole number of 0 or more. */
export function nonNegativeInteger(value: unknown): number {
  const n = number(value);
  if (!Number.isSafeInteger(n) || n < 0)
    throw new Invalid(`must be a whole number of 0 or more, got ${describeValue(value)}`);
  return n;
}

/** A port, 0-65535. */
export function port(value: unknown): number {
  const n = number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    throw new Invalid(`must be a non-negative number (a port, 0-65535), got ${describeValue(value)}`);
  }
  return n;
}

/** An http(s) URL whose host is a name to resolve (an address would never change). */
export function dnsUrl(value: unknown): string {
  const given = text(value);
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw new Invalid(
      `must be an http(s) URL such as http://prefill-headless.llm.svc:8000, got ${describeValue(value)}`,
    );
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new Invalid(
      `must be an http(s) URL such as http://prefill-headless.llm.svc:8000, got ${describeValue(value)}`,
    );
  }
  if (/^[\d.]+$/.test(url.hostname) || url.hostname.startsWith('[')) {
    throw new Invalid(
      `names an address (${url.hostname}), not a host name to resolve: list it with the worker URLs instead`,
    );
  }
  return given;
}

/** An http(s) URL, such as a collector's. */
export function httpUrl(value: unknown): string {
  const given = text(value);
  let url: URL | undefined;
  try {
    url = new URL(given);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new Invalid(`must be an http(s) URL such as http://otel-collector:4318, got ${describeValue(value)}`);
  }
  return given;
}

/** A redis:// or rediss:// URL. */
export function redisUrl(value: unknown): string {
  const url = text(value);
  if (!/^rediss?:\/\/[^/]/.test(url))
    throw new Invalid(`must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`);
  return url;
}

/** A comma-separated list of keys (or a list of them, from a file). */
export function keyList(value: unknown): string[] {
  const items = Array.isArray(value) ? value : String(value).split(',');
  const keys = items.map((item) => (typeof item === 'string' ? item.trim() : '')).filter((item) => item !== '');
  if (keys.length === 0) throw new Invalid('must name at least one key');
  return keys;
}

/** A non-empty string. */
export function text(value: unknown): string {
  if (typeof value !== 'string' || value === '')
    throw new Invalid(`must be a non-empty string, got ${describeValue(value)}`);
  return value;
}

/**
 * The scored policy's scorers: `name[:weight]` comma-separated (a flag), or a list of them or
 * of `{ name, weight, params }` (a file); each checked by its plugin.
 */
export function scorerList(value: unknown): readonly ScorerSetting[] {
  return pluginSetting(() => readScorers(value));
}

/** The scored policy's filters: names comma-separated (a flag), or a list of names or `{ name, params }` (a file). */
export function filterList(value: unknown): readonly FilterSetting[] {
  return pluginSetting(() => readFilters(value));
}

/** The P/D deciders: names comma-separated (a flag), or a list of names or `{ name, params }` (a file). */
export function deciderList(value: unknown): readonly DeciderSetting[] {
  return pluginSetting(() => readDeciders(value));
}

/** The scored policy's picker: its name, or `{ name, params }` (a file). */
export function pickerSetting(value: unknown): PickerSetting {
  return pluginSetting(() => readPicker(value));
}

function pluginSetting<T>(read: () => T): T {
  try {
    return read();
  } catch (error) {
    // The plugins say what is wrong in one line; the setting's name goes before it.
    if (error instanceof RangeError) throw new Invalid(error.message);
    throw error;
  }
}
