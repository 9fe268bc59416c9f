import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../../../src/server/settings/rows.js';
import { envOf, inGroup } from '../../../src/server/settings/setting.js';

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
