import { defineConfig } from 'vitest/config';

// For `npm run mutation` (Stryker) only: the unit tests. The ones that run the built package
// or other processes (examples, bench, package, logger) would not see Stryker's in-memory
// mutants, and the heap tests are slow. The model-based and interleaving property tests stay
// in: they kill the most mutants. Stryker runs vitest in worker threads, which refuse the
// process-wide flags of vitest.config.ts, so this config stands alone.
export default defineConfig({
  test: {
    include: [
      'test/handoff/**/*.test.ts',
      'test/runtime/**/*.test.ts',
      'test/protocol/**/*.test.ts',
      'test/flow/**/*.test.ts',
      'test/rxjs/**/*.test.ts',
      'test/http/**/*.test.ts',
      'test/server/**/*.test.ts',
      'test/testing/**/*.test.ts',
      'test/util/**/*.test.ts',
    ],
    exclude: [
      'test/handoff/memory.test.ts',
      'test/flow/memory.test.ts',
      'test/runtime/logger.test.ts',
      'test/server/load.e2e.test.ts',
    ],
    restoreMocks: true,
  },
});
