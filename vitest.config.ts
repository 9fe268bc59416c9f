import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Forked workers so that heap tests can call gc(), and so that an unhandled rejection
    // kills the worker instead of being swallowed: the library promises never to create one.
    pool: 'forks',
    execArgv: ['--expose-gc', '--unhandled-rejections=strict'],
    dangerouslyIgnoreUnhandledErrors: false,
    restoreMocks: true,
    coverage: {
      provider: 'v8',
      include: ['src/**/*.ts'],
    },
  },
});
