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
      // The error's own message, once (it holds its cause's text); the cause nested, whole.
      err: {
        type: 'PrefillError',
        message: 'Prefill execution failed: worker 7 crashed',
        cause: { type: 'Error', message: 'worker 7 crashed' },
      },
    });
  });
});

describe('the default logger, in this process', () => {
  it('is one pino logger at level warn, named disagg, serializing errors with their causes, writing to stderr synchronously', async () => {
    const { pino } = await import('pino');
    const { defaultLogger } = await import('../../src/runtime/logger.js');
    const logger = defaultLogger() as import('pino').Logger;
    expect(defaultLogger()).toBe(logger);
    expect(logger.level).toBe('warn');
    expect(logger.bindings()).toMatchObject({ name: 'disagg' });
    const serializers = (logger as unknown as Record<symbol, Record<string, unknown>>)[pino.symbols.serializersSym];
    expect(serializers?.err).toBe(pino.stdSerializers.errWithCause);
    const stream = (logger as unknown as Record<symbol, { fd?: number; sync?: boolean }>)[pino.symbols.streamSym];
    expect(stream).toMatchObject({ fd: 2, sync: true });
  });
});
