import { defineConfig } from 'vitest/config';

// For `npm run mutation` (Stryker) only: the unit tests. The ones that run the built package
// or other processes (examples, bench, package, logger) would not see Stryker's in-memory
// mutants, and the heap tests are slow. The model-based and interleaving property tests stay
// in: they kill the most mutants. Stryker runs vitest in worker threads, which refuse the
// process-wide flags of vitest.config.ts, so this config stands alone.
//
// scripts/mutation.mjs runs Stryker per folder of src/ and names the tests that can kill that
// folder's mutants in DISAGG_MUTATION_TESTS: `core` (the layers below HTTP; for the flow a
// lower bound, as the server's end-to-end tests kill flow mutants too), `http`, `server`.
// Unset, every unit test runs.
const CORE = ['handoff', 'runtime', 'protocol', 'flow', 'util', 'rxjs'];
const SETS: Record<string, string[]> = {
  core: CORE,
  http: ['http', 'server', 'testing', 'util'],
  server: ['server', 'testing', 'http'],
};
const folders = SETS[process.env.DISAGG_MUTATION_TESTS ?? ''] ?? [...CORE, 'http', 'server', 'testing'];

export default defineConfig({
  test: {
    include: folders.map((folder) => `test/${folder}/**/*.test.ts`),
    exclude: [
      'test/handoff/memory.test.ts',
      'test/flow/memory.test.ts',
      'test/runtime/logger.test.ts',
      'test/server/load.e2e.test.ts',
    ],
    restoreMocks: true,
  },
});
