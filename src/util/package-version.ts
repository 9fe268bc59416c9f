import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let known: string | undefined;

/**
 * This package's version, from its package.json: the one `disagg --version` prints and
 * `disagg_build_info` labels. Found by walking up from this module, since it sits at a
 * different depth in the sources (src/util/), a bundle (dist/) and an install
 * (node_modules/disagg/dist/). Read once; `unknown` when no package.json of disagg is found
 * (the module bundled into another application).
 *
 * @example
 * const version: string = packageVersion(); // '0.1.0'
 */
export function packageVersion(): string {
  known ??= find();
  return known;
}

function find(): string {
  // tsup shims import.meta.url in the CommonJS build.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const path = join(dir, 'package.json');
    if (existsSync(path)) {
      const manifest = JSON.parse(readFileSync(path, 'utf8')) as { name?: string; version?: string };
      if (manifest.name === 'disagg' && typeof manifest.version === 'string') return manifest.version;
    }
    const parent = dirname(dir);
    if (parent === dir) return 'unknown';
    dir = parent;
  }
}
