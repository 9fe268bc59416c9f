import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/server/config-error.js';
import { SETTINGS } from '../../../src/server/settings/rows.js';
import { envOf, Invalid, inGroup, Problems, parseSetting } from '../../../src/server/settings/setting.js';

describe('setting rows', () => {
  it('name the variable after the flag: DISAGG_ and the flag upper-snake-cased', () => {
    expect(envOf('kv-events-port')).toBe('DISAGG_KV_EVENTS_PORT');
    expect(envOf('connector')).toBe('DISAGG_CONNECTOR');
  });

  it('give every setting its variable from its flag (no row names its own today)', () => {
    for (const setting of SETTINGS) expect(setting.env, setting.key).toBe(envOf(setting.flag));
  });

  it('let a row name its own variable', () => {
    const [row] = inGroup('Keys', [
      { key: 'apiKey', flag: 'api-key', env: 'DISAGG_KEY', arg: 'KEY', help: '', parse: String },
    ]);
    expect(row.env).toBe('DISAGG_KEY');
    expect(row.group).toBe('Keys');
  });
});

describe('a bug in a parser is not an operator mistake', () => {
  const [row] = inGroup('Keys', [
    {
      key: 'apiKey',
      flag: 'api-key',
      arg: 'KEY',
      help: '',
      parse: (value: unknown) => {
        if (value === 'bug') throw new TypeError('the parser itself failed');
        throw new Invalid('must be a key');
      },
    },
  ]);

  it("parseSetting names the setting for a refusal, and lets a parser's own failure through as it is", () => {
    expect(() => parseSetting(row, 'x', { kind: 'option' })).toThrow(new ConfigError('apiKey must be a key'));
    expect(() => parseSetting(row, 'bug', { kind: 'option' })).toThrow(TypeError);
  });

  it('Problems gathers refusals and rethrows anything else', () => {
    const problems = new Problems();
    expect(problems.check(() => parseSetting(row, 'x', { kind: 'option' }))).toBeUndefined();
    expect(problems.count).toBe(1);
    expect(() => problems.check(() => parseSetting(row, 'bug', { kind: 'option' }))).toThrow(TypeError);
    expect(problems.count).toBe(1);
  });
});
