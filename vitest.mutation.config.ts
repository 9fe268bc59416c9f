import { statSync } from 'node:fs';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// For `npm run mutation` (Stryker) only: the unit tests. The ones that run the built package
// or other processes (examples, bench, package, logger) would not see Stryker's in-memory
// mutants, and the heap tests are slow. The model-based and interleaving property tests stay
// in: they kill the most mutants. Stryker runs vitest in worker threads, which refuse the
// process-wide flags of vitest.config.ts, so this config stands alone.
//
// scripts/mutation.mjs runs Stryker per folder of src/ and names the tests that can kill that
// folder's mutants in MUTATION_TESTS: `core` (the layers below HTTP; for the flow a
// lower bound, as the server's end-to-end tests kill flow mutants too), `routing`, `engines`,
// `http`, `server`.
// Unset, every unit test runs.
const CORE = ['handoff', 'runtime', 'protocol', 'flow', 'util', 'rxjs'];
export const SETS: Record<string, string[]> = {
  core: CORE,
  http: ['http', 'server', 'testing', 'util'],
  // Only these import src/server/: the http and testing tests cannot reach a server mutant.
  server: ['server', 'fastify'],
  routing: ['routing', 'flow'],
  // The endpoints are read by the schemas' checks, the transport, routing and the flow.
  endpoints: ['endpoints', 'server', 'http', 'routing', 'flow'],
  // The connectors are exercised by the flow's tests, the fakes by the testing and http ones.
  engines: ['engines', 'flow', 'http', 'testing'],
};
// Not a DISAGG_* variable: `disagg serve`, which the CLI's tests start, refuses unknown ones.
const asked = process.env.MUTATION_TESTS ?? '';
// A comma-separated list of test files (scripts/mutation.mjs names them for a part of a folder
// whose mutants only some tests reach) instead of a set's name.
const include = asked.includes('/')
  ? asked.split(',')
  : (SETS[asked] ?? [...CORE, 'routing', 'engines', 'http', 'server', 'testing']).map(
      (folder) => `test/${folder}/**/*.test.ts`,
    );

/**
 * Unit tests first, then the end-to-end ones, each smallest file first. Stryker runs one file
 * at a time and stops at the first failure, and most mutants die in a unit test: vitest's own
 * order (the slowest file first) would run every end-to-end test before it for each mutant.
 */
class UnitTestsFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const weight = (file: TestSpecification) =>
      (file.moduleId.endsWith('.e2e.test.ts') ? 1e12 : 0) + statSync(file.moduleId).size;
    return [...files].sort((a, b) => weight(a) - weight(b));
  }
}

export default defineConfig({
  test: {
    include,
    exclude: [
      // The heap tests (vitest.config.ts's HEAP, every folder's): they need --expose-gc,
      // which Stryker's worker threads cannot take, and are slow.
      'test/**/memory.test.ts',
      'test/runtime/logger.test.ts',
      'test/server/load.e2e.test.ts',
      // Hundreds of streams with random faults: the slowest file by far (a quarter of a full
      // run) and a load test like the one above; the rules it checks have deterministic tests.
      'test/server/fault-soak.e2e.test.ts',
    ],
    sequence: { sequencer: UnitTestsFirst },
    restoreMocks: true,
  },
});
