import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('npm run bench (smoke run, small N)', () => {
  it('runs every case and prints the ratio table and the targets, without timing assertions', () => {
    const run = spawnSync(
      process.execPath,
      ['bench/run.mjs', '--items=3000', '--rounds=1', '--passes=1', '--streams=50', '--tokens=10', '--no-write'],
      { cwd: root, encoding: 'utf8' },
    );
    expect(run.status, run.stderr).toBe(0);
    const out = run.stdout;
    expect(out).toMatch(/^Node v\d+\.\d+\.\d+, \d+ CPUs/);
    for (const label of [
      'bare for-await over the source (baseline)',
      'plain pass-through async generator',
      'forwardDecode, prefill pending (racing)',
      'forwardDecode, prefill succeeded (forward-only)',
      'hand-written AsyncIterator class',
      'per-item Promise.race, prefill pending',
      'rxjs from/takeUntil, prefill pending',
      'through forwardDecode',
    ]) {
      expect(out).toContain(`| ${label}`);
    }
    expect(out).toContain('| target | value | wanted | met |');
    // Every figure is a number: no NaN or Infinity from a case that failed to run.
    expect(out).not.toMatch(/NaN|Infinity/);
  }, 60_000);
});
