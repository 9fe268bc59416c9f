import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../../../src/server/settings/rows.js';
import { POOL_GROUP_ROWS } from '../../../src/server/settings/worker-rows.js';

describe("a pool's own deadlines, migration and routing", () => {
  it('are read by every top-level row of those groups: the pools row hands each one in', () => {
    const groups = SETTINGS.filter((setting) => /^(deadlines|migration|routing)\./.test(setting.key));
    expect(groups.length).toBeGreaterThan(10);
    expect(POOL_GROUP_ROWS).toEqual(expect.arrayContaining(groups));
  });

  it('are checked by those rows, as the top level is', () => {
    const pools = SETTINGS.find((setting) => setting.key === 'pools');
    const pool = { model: 'm', decode: ['http://d:8000'] };
    expect(pools?.parse([{ ...pool, migration: { limit: 2 }, routing: { aggregateBelowChars: 5 } }])).toMatchObject([
      { migration: { limit: 2 }, routing: { aggregateBelowChars: 5 } },
    ]);
    expect(() => pools?.parse([{ ...pool, deadlines: { totalMs: -1 } }])).toThrow(/deadlines\.totalMs/);
  });
});
