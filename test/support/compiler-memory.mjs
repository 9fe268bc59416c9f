// Preloaded into a process (NODE_OPTIONS=--import): at its exit, one line on stderr with the
// most memory V8 had allocated outside its heap (its compilers' zones among it), in bytes.
import { getHeapStatistics } from 'node:v8';

process.on('exit', () => {
  process.stderr.write(`peak_malloced_memory=${getHeapStatistics().peak_malloced_memory}\n`);
});
