import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { index: 'src/index.ts', rxjs: 'src/rxjs/index.ts', testing: 'src/testing/index.ts' },
  // Both entries share one copy of the library's code (one ResponseStream class per format).
  splitting: true,
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  platform: 'node',
});
