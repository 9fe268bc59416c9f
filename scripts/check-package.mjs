// `npm run check:package`: the package as npm would publish it, checked by publint (its
// manifest and files) and by attw (its types resolve for import and require under node16).
// It packs the dist/ the last build left, with scripts off: `attw --pack .` packs through
// npm, whose `prepare` runs the whole build a second time (35 s of `npm test` here).
// Run it after `npm run build`, as `npm test` does.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

if (!existsSync('dist/index.js')) {
  console.error('check:package: no dist/ to pack; run `npm run build` first.');
  process.exit(1);
}
const run = (command, args) => execFileSync(command, args, { stdio: 'inherit' });
const dir = mkdtempSync(join(tmpdir(), 'disagg-pack-'));
try {
  run('npx', ['publint', '--strict']);
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      encoding: 'utf8',
    }),
  );
  run('npx', ['attw', join(dir, packed.filename), '--profile', 'node16']);
} catch (error) {
  // The tool has printed what failed; its exit status is what matters here.
  process.exitCode = typeof error.status === 'number' && error.status !== 0 ? error.status : 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
