// One table of settings: every row reaches each way of giving it. A row added to SETTINGS must
// arrive, under its key, whether it comes as a flag, a DISAGG_* variable, a config file's key
// or an option of createProxy; a serve-only row is refused by createProxy rather than dropped.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { loadServeConfig } from '../../src/server/config.js';
import { ConfigError, resolveProxyOptions, SETTINGS, type Setting } from '../../src/server/options.js';

/** The workers and connector every case needs, unless the row is one of them. */
const BASE: Record<string, string> = {
  connector: 'vllm',
  prefill: 'http://p.example:8100',
  decode: 'http://d.example:8200',
};
/** Rows that are only accepted beside another setting. */
const WITH: Record<string, Record<string, string>> = {
  'routing.aggregateCachedRatio': { decodePolicy: 'cache-aware' },
  'sidecar.prefillAllow': { 'sidecar.prefillFrom': 'header' },
  'sidecar.prefillMaxRetries': { 'sidecar.prefillFrom': 'header' },
  'scaling.saturationSource': { 'routing.engineLoadIntervalMs': '50' },
  // The default scored policy applies a filter: one reading the engines' load needs them read.
  'routing.filters': { 'routing.engineLoadIntervalMs': '50' },
};

/** A text value the row accepts that is not its default, so that arriving proves something. */
function sample(setting: Setting): string {
  const choices = setting.arg.includes('|') ? setting.arg.split('|') : [];
  for (const text of [
    ...choices,
    'http://name.example:8000',
    'redis://redis.example:6379/0',
    '7',
    '3',
    '0.5',
    '0.25',
    '2',
    'true',
    'debug',
    'x-tenant',
    'abc',
    'prefix:2',
    'low-queue',
    'short-prompt',
    '10.0.0.0/8',
    '[{"model":"small","decode":["http://s.example:8000"]}]',
    '[{"model":"chat","targets":[{"model":"chat-v2","weight":10}]}]',
  ]) {
    try {
      if (!isDeepStrictEqual(setting.parse(text), setting.default)) return text;
    } catch {
      // Not a value of this row: the next candidate.
    }
  }
  throw new Error(`no sample value for ${setting.key}: add a candidate`);
}

const byKey = (key: string) => SETTINGS.find((setting) => setting.key === key) as Setting;

function valueAt(values: unknown, key: string): unknown {
  let at = values;
  for (const part of key.split('.')) at = (at as Record<string, unknown> | undefined)?.[part];
  return at;
}

function nested(entries: Array<[string, unknown]>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of entries) {
    const parts = key.split('.');
    let at = out;
    for (const part of parts.slice(0, -1)) {
      at[part] ??= {};
      at = at[part] as Record<string, unknown>;
    }
    at[parts.at(-1) as string] = value;
  }
  return out;
}

/** The row's case: itself and what it needs, as key and text value. */
const caseOf = (setting: Setting): Array<[string, string]> => [
  ...Object.entries(BASE).filter(([key]) => key !== setting.key),
  ...Object.entries(WITH[setting.key] ?? {}),
  [setting.key, sample(setting)],
];

const flagArgs = (entries: Array<[string, string]>) =>
  entries.flatMap(([key, text]) => {
    const setting = byKey(key);
    return setting.boolean ? [`--${setting.flag}`] : [`--${setting.flag}`, text];
  });

const dir = mkdtempSync(join(tmpdir(), 'disagg-settings-'));

describe('every setting reaches disagg serve and createProxy alike', () => {
  it.each(SETTINGS.map((setting) => [setting.key, setting] as const))('%s', (key, setting) => {
    const entries = caseOf(setting);
    const expected = setting.parse(sample(setting));
    // A flag.
    const fromFlags = loadServeConfig(flagArgs(entries), {});
    expect(valueAt(fromFlags, key), `--${setting.flag}`).toEqual(expected);
    // A variable (the others as flags).
    const others = entries.filter(([other]) => other !== key);
    const fromEnv = loadServeConfig(flagArgs(others), { [setting.env]: sample(setting) });
    expect(valueAt(fromEnv, key), setting.env).toEqual(expected);
    // A config file's key, as YAML gives it (parsed values, nested keys).
    const path = join(dir, `${key}.yaml`);
    writeFileSync(path, stringify(nested(entries.map(([k, text]) => [k, byKey(k).parse(text)]))));
    const fromFile = loadServeConfig(['--config', path], {});
    expect(valueAt(fromFile, key), `${key} in a file`).toEqual(expected);
    // An option of createProxy, or refused there when only disagg serve has it.
    const options = nested(entries.map(([k, text]) => [k, byKey(k).parse(text)]));
    if (setting.serveOnly) {
      expect(() => resolveProxyOptions(options as never), key).toThrow(ConfigError);
    } else {
      expect(valueAt(resolveProxyOptions(options as never), key), `option ${key}`).toEqual(expected);
    }
  });
});
