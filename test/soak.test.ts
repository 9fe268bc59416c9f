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
