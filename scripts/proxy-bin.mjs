// The disagg bin in a process of its own, for the soak runs: started from a config file,
// its URL read from its first log line, its warnings and errors kept for the report, stopped
// with SIGTERM.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

/**
 * Starts `disagg serve --config <config>` (the built dist/cli.js); resolves with its URL, a
 * stop, and `warnings()`: the proxy's log lines at warn and above so far (parsed), which a soak
 * prints when a rule was broken, so that a rare failure says why without a rerun.
 */
export async function serveBin(config) {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-soak-')), 'disagg.json');
  writeFileSync(file, JSON.stringify({ host: '127.0.0.1', port: 0, drainDelayMs: 0, gracePeriodMs: 0, ...config }));
  const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
  const child = spawn(process.execPath, [bin, 'serve', '--config', file, '--log-level', 'info'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const line = out.split('\n').find((entry) => entry.includes('disagg serve listening'));
      if (line !== undefined) resolve(JSON.parse(line).url);
    });
    child.on('exit', (code) => reject(new Error(`disagg serve exited (${code}): ${out}`)));
  });
  const warnings = [];
  let rest = '';
  child.stdout.on('data', (chunk) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      const entry = JSON.parse(line);
      if (entry.level >= 40) warnings.push(entry);
    }
  });
  // If this script dies, the proxy goes with it.
  process.once('exit', () => child.kill());
  return {
    url,
    warnings: () => warnings,
    stop: () =>
      new Promise((resolve) => {
        child.on('exit', resolve);
        child.kill('SIGTERM');
      }),
  };
}

/** One sample of a metric of the proxy's /metrics: the sum over its label sets that `match`. */
export async function metric(url, name, match = () => true) {
  const text = await (await request(`${url}/metrics`)).body.text();
  let sum = 0;
  for (const found of text.matchAll(new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`, 'gm'))) {
    if (match(found[1] ?? '')) sum += Number(found[2]);
  }
  return sum;
}

/** A deterministic stream of numbers in [0, 1) (mulberry32), so that a run can be repeated. */
export function seeded(seed) {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
