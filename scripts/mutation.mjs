#!/usr/bin/env node
// `npm run mutation [-- <folder>...]`: Stryker per folder of src/, each with the tests that can
// kill its mutants, then one table of scores against the targets. One run over all of src/
// with every test for every mutant takes most of a day on two CPUs; per folder, with
// incremental files in reports/mutation/, a rerun only tests what changed.
//
// The base settings are stryker.config.json's; this script sets, per folder, what is mutated,
// where the reports go and which tests run (DISAGG_MUTATION_TESTS, read by
// vitest.mutation.config.ts). Exit status: 0 when every run completed (scores below target
// are printed, not failed: `--check` fails them), 1 when Stryker failed.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The folders measured, their targets (percent) and the tests that run for their mutants. */
const FOLDERS = {
  handoff: { target: 95, tests: 'core' },
  runtime: { target: 95, tests: 'core' },
  flow: { target: 85, tests: 'core' },
  http: { target: 85, tests: 'http' },
  server: { target: 85, tests: 'server' },
};

const args = process.argv.slice(2);
const check = args.includes('--check');
const asked = args.filter((arg) => !arg.startsWith('--'));
for (const folder of asked) {
  if (!(folder in FOLDERS)) {
    console.error(
      `mutation: unknown folder ${JSON.stringify(folder)}; expected any of ${Object.keys(FOLDERS).join(', ')}`,
    );
    process.exit(2);
  }
}
const folders = asked.length > 0 ? asked : Object.keys(FOLDERS);
const base = JSON.parse(readFileSync(`${root}/stryker.config.json`, 'utf8'));
mkdirSync(`${root}/reports/mutation`, { recursive: true });

const rows = [];
for (const folder of folders) {
  const report = `reports/mutation/${folder}.json`;
  const config = {
    ...base,
    mutate: [`src/${folder}/**/*.ts`],
    reporters: ['clear-text', 'progress', 'json', 'html'],
    jsonReporter: { fileName: report },
    htmlReporter: { fileName: `reports/mutation/${folder}.html` },
    tempDirName: `.stryker-tmp-${folder}`,
    incremental: true,
    incrementalFile: `reports/mutation/${folder}-incremental.json`,
  };
  const configFile = `reports/mutation/${folder}.stryker.json`;
  writeFileSync(`${root}/${configFile}`, `${JSON.stringify(config, null, 2)}\n`);
  const started = Date.now();
  console.log(`\n== src/${folder}/ (tests: ${FOLDERS[folder].tests})`);
  const run = spawnSync('npx', ['stryker', 'run', configFile], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, DISAGG_MUTATION_TESTS: FOLDERS[folder].tests },
  });
  if (run.status !== 0) {
    console.error(`mutation: Stryker failed on src/${folder}/ (exit ${run.status ?? run.signal})`);
    process.exit(1);
  }
  rows.push({
    folder,
    minutes: (Date.now() - started) / 60_000,
    ...score(JSON.parse(readFileSync(`${root}/${report}`, 'utf8'))),
  });
}

/** Stryker's mutation score: detected (killed, timed out) over detected and undetected (survived, no coverage). */
function score(report) {
  const count = { Killed: 0, Timeout: 0, Survived: 0, NoCoverage: 0 };
  for (const file of Object.values(report.files)) {
    for (const mutant of file.mutants) if (mutant.status in count) count[mutant.status]++;
  }
  const detected = count.Killed + count.Timeout;
  const total = detected + count.Survived + count.NoCoverage;
  return { ...count, total, score: total === 0 ? 100 : (100 * detected) / total };
}

console.log('\nfolder   | score   | target | mutants | killed | timeout | survived | no cov | minutes');
let below = 0;
for (const row of rows) {
  const { target } = FOLDERS[row.folder];
  const met = row.score >= target;
  if (!met) below++;
  console.log(
    [
      row.folder.padEnd(8),
      `${row.score.toFixed(2).padStart(6)}%`,
      `${String(target).padStart(4)} %${met ? ' ' : '!'}`,
      String(row.total).padStart(7),
      String(row.Killed).padStart(6),
      String(row.Timeout).padStart(7),
      String(row.Survived).padStart(8),
      String(row.NoCoverage).padStart(6),
      row.minutes.toFixed(1).padStart(7),
    ].join(' | '),
  );
}
if (below > 0)
  console.log(`\n${below} folder(s) below target (marked !); survivors are listed in reports/mutation/<folder>.html`);
process.exit(check && below > 0 ? 1 : 0);
