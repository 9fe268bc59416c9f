import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

describe('the default logger', () => {
  it('writes a failed prefill to stderr as one warn-level JSON line, and nothing to stdout', () => {
    const script = `
      import { PrefillTask } from './src/index.ts';
      const task = PrefillTask.spawn(Promise.reject(new Error('worker 7 crashed')));
      await task.wait().catch(() => {});
      await PrefillTask.spawn(Promise.resolve()).wait();
    `;
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(run.status).toBe(0);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    const record = JSON.parse(lines[0] ?? '');
    expect(record).toMatchObject({
      level: 40,
      name: 'disagg',
      msg: 'Prefill background task failed',
      // pino's error serializer appends the cause chain to the message.
      err: { type: 'PrefillError', message: expect.stringContaining('Prefill execution failed: worker 7 crashed') },
    });
  });
});
