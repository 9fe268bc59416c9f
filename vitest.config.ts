import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

// The subprocess smoke runs of the benchmarks, the soak and the packed tarball: a minute of
// real processes that CI runs (`npm run test:smoke` in .ci/run) and `npm test` leaves out, so
// that the suite a developer runs stays under three minutes.
const SMOKE = ['test/bench.test.ts', 'test/soak.test.ts', 'test/tarball.e2e.test.ts'];
// The tests that measure the heap, and so call gc(): only they need --expose-gc.
const HEAP = ['test/**/memory.test.ts'];

// Forked workers so that an unhandled rejection kills the worker instead of being swallowed:
// the library promises never to create one.
const STRICT = '--unhandled-rejections=strict';

export default defineConfig({
  test: {
    pool: 'forks',
    // Most files wait on sockets, child processes and timers more than they compute: on two
    // CPUs vitest's default (one worker fewer than CPUs) runs them one at a time, with a CPU
    // idle; two at a time took the suite from 208 s to 130 s here. (Sharing a worker's modules
    // between files, `isolate: false`, took it to 80 s, but files then left state to the next
    // one, timers and sockets among it, and end-to-end tests failed in some orders.)
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // A timeout here only guards against a hang (no test asserts time): with two files at a
    // time, a test that loads Qwen3's tokenizer three times took over vitest's 5 s in CI.
    testTimeout: 15_000,
    dangerouslyIgnoreUnhandledErrors: false,
    restoreMocks: true,
    coverage: {
      provider: 'v8',
      include: ['src/**/*.ts'],
    },
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: [...SMOKE, ...HEAP], execArgv: [STRICT] },
      },
      { extends: true, test: { name: 'heap', include: HEAP, execArgv: ['--expose-gc', STRICT] } },
      { extends: true, test: { name: 'smoke', include: SMOKE, execArgv: [STRICT] } },
    ],
  },
});
