import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('npm run soak (short run)', () => {
  it('both connectors under random faults, unhealthy workers and restarts: no broken or hung client, no leg or KV left', () => {
    const run = spawnSync(process.execPath, ['scripts/soak.mjs', '--seconds=4', '--concurrency=8'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    const reports = run.stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line));
    expect(reports.map((report) => report.protocol)).toEqual(['vllm', 'sglang']);
    for (const report of reports) {
      expect(report).toMatchObject({ broken: 0, hung: 0, openLegs: 0, inFlight: 0, kvHeld: 0, kvStaleReads: 0 });
      expect(report.complete).toBeGreaterThan(0);
    }
  }, 120_000);
});

describe('npm run soak:migration (short run)', () => {
  it('decode streams broken at random: with migration on no client sees a failure, and every stream equals the unbroken one', () => {
    const run = spawnSync(
      process.execPath,
      ['scripts/migration-soak.mjs', '--seconds=3', '--concurrency=8', '--break-share=0.1'],
      { cwd: root, encoding: 'utf8', timeout: 120_000 },
    );
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    const reports = run.stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line));
    expect(reports.map((report) => `${report.protocol} ${report.migration}`)).toEqual([
      'vllm off',
      'vllm on',
      'sglang off',
      'sglang on',
    ]);
    for (const report of reports.filter((each) => each.migration === 'on')) {
      expect(report).toMatchObject({ failed: 0, mismatched: 0 });
      expect(report.migrated).toBeGreaterThan(0);
    }
    // Off, the same breaks reach the clients.
    for (const report of reports.filter((each) => each.migration === 'off')) expect(report.failed).toBeGreaterThan(0);
  }, 120_000);
});
