import { readFileSync } from 'node:fs';
import { defineConfig } from 'tsup';

// Optional dependencies and peers stay outside the bundle, loaded from the user's node_modules
// when asked: bundled, @kubernetes/client-node's CommonJS (a dynamic require of punycode) broke
// in the ESM bin, and doubled dist/ by 29 MB.
// Read from package.json, so that an optional package added there cannot be bundled by mistake.
const manifest = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8')) as {
  optionalDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
};
const external = [...Object.keys(manifest.optionalDependencies), ...Object.keys(manifest.peerDependencies)];
// Bundled, though a dependency of the build only: the request and tenant schemas use zod's
// functional build (`zod/mini`), of which only what they call is bundled (40 KB). Loaded whole
// from node_modules it was 8 MB of an idle proxy's resident set.
const noExternal = ['zod'];

export default defineConfig([
  {
    // The library and its subpaths, for import and require.
    entry: {
      index: 'src/index.ts',
      rxjs: 'src/rxjs/index.ts',
      testing: 'src/testing/index.ts',
      server: 'src/server/index.ts',
      fastify: 'src/fastify/index.ts',
    },
    format: ['esm', 'cjs'],
    // All entries share one copy of the library's code (one ResponseStream class per format).
    splitting: true,
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'node20',
    platform: 'node',
    // Class names as written: logs name an error's class (pino's `err.type`), not `_UpstreamError`.
    keepNames: true,
    // import.meta.url in the CommonJS build (where the tokenizer thread's script is found).
    shims: true,
    external,
    noExternal,
  },
  {
    // The `disagg` command (the package's bin): ESM only, with its shebang.
    // The tokenizer's worker thread too: plain JavaScript, run by Node as a file of its own.
    entry: { cli: 'src/cli/disagg.ts', 'tokenizer-thread': 'src/tokenize/tokenizer-thread.mjs' },
    format: ['esm'],
    // Optional: loaded only when asked (--log-format pretty, a selector), from the user's node_modules.
    external,
    noExternal,
    dts: false,
    sourcemap: true,
    clean: false,
    target: 'node20',
    platform: 'node',
    // No keepNames here: its `__name(fn, "name")` runs for every closure made, per token too
    // (2.4 % of what the proxy allocates at 50 streams in flight, measured with V8's sampling
    // heap profiler), and in this ESM bundle a class or function keeps its written name anyway
    // unless esbuild renames it for a clash (one internal class, the fake workers' Worker).
    // test/package.test.ts checks the error classes by the names the bin logs.
  },
]);
