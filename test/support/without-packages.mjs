// `node --import ./test/support/without-packages.mjs`: the packages named in HIDE_PACKAGES
// (comma-separated) cannot be found, as in an install with `--omit=optional`, whatever
// node_modules holds. For the tests of what the bin says when an optional dependency is missing.
import { register } from 'node:module';

register(new URL('./without-packages-hooks.mjs', import.meta.url), {
  data: (process.env.HIDE_PACKAGES ?? '').split(',').filter((name) => name !== ''),
});
