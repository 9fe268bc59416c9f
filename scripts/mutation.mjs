#!/usr/bin/env node
// `npm run mutation [-- <folder>...]`: Stryker per folder of src/, each with the tests that can
// kill its mutants, then one table of scores against the targets. One run over all of src/
// with every test for every mutant takes most of a day on two CPUs; per folder, with
// incremental files in reports/mutation/, a rerun only tests what changed.
//
// The base settings are stryker.config.json's; this script sets, per part of a folder
// (scripts/mutation-parts.mjs works them out from the folder tree), what is mutated, where the
// reports go and which tests run (MUTATION_TESTS, read by vitest.mutation.config.ts).
// Any folder of src/ can be named; with none, those with a target run. Exit status: 0 when
// every run completed (scores below target are printed, not failed: `--check` fails them), 1
// when Stryker failed, 2 for an unknown folder or part.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { FOLDERS, foldersOf, groupProblems, partsOf } from './mutation-parts.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const src = `${root}/src`;

const args = process.argv.slice(2);
const check = args.includes('--check');
// `--dry-run`: each part's Stryker run stops after its dry run (the tests pass unmutated, the
// mutants are found), no score: a minute's check that a folder's run starts.
const dryRun = args.includes('--dry-run');
// `server` runs every part of a folder; `server:options` runs one part and scores the folder
// with the reports its other parts left in reports/mutation/ (the table says which are missing).
const asked = args.filter((arg) => !arg.startsWith('--')).map((arg) => arg.split(':'));
const folderNames = foldersOf(src);
for (const [folder, part] of asked) {
  const known = folderNames.includes(folder);
  if (!known || (part !== undefined && !partsOf(src, folder).some((each) => each.name === part))) {
    const expected = folderNames.flatMap((name) => [
      name,
      ...partsOf(src, name)
        .filter((each) => each.name)
        .map((each) => `${name}:${each.name}`),
    ]);
    console.error(
      `mutation: unknown folder or part ${JSON.stringify([folder, part].filter(Boolean).join(':'))}; expected any of ${expected.join(', ')}`,
    );
    process.exit(2);
  }
}
const runs = asked.length > 0 ? asked : Object.keys(FOLDERS).map((folder) => [folder]);
const folders = [...new Set(runs.map(([folder]) => folder))];
const base = JSON.parse(readFileSync(`${root}/stryker.config.json`, 'utf8'));
mkdirSync(`${root}/reports/mutation`, { recursive: true });

// The hand-kept groups of the folders run, checked against src/ as it is: a file they miss is
// still measured (in a part `others`), and test/scripts/mutation-parts.test.ts fails until the
// groups name it; another folder's list never stops this one's run.
for (const problem of groupProblems(src).filter((line) =>
  folders.some((folder) => line.startsWith(`src/${folder}/`)),
)) {
  console.warn(`mutation: ${problem}`);
}

const rows = [];
for (const folder of folders) {
  const started = Date.now();
  const reports = [];
  const missing = [];
  for (const part of partsOf(src, folder)) {
    const name = part.name ? `${folder}-${part.name}` : folder;
    const report = `${root}/reports/mutation/${name}.json`;
    const wanted = runs.some(([each, only]) => each === folder && (only === undefined || only === part.name));
    if (wanted) mutate(part, name);
    if (dryRun) continue;
    if (existsSync(report)) reports.push(JSON.parse(readFileSync(report, 'utf8')));
    else missing.push(name);
  }
  rows.push({ folder, missing, minutes: (Date.now() - started) / 60_000, ...score(reports) });
}
if (dryRun) {
  console.log(`\nmutation: the dry runs of ${folders.join(', ')} passed (no mutant run, no score)`);
  process.exit(0);
}

/** One Stryker run over a part of a folder (only its dry run with `--dry-run`); exits when Stryker fails. */
function mutate(part, name) {
  const tests = Array.isArray(part.tests) ? part.tests.join(',') : part.tests;
  const config = {
    ...base,
    mutate: part.files,
    dryRunOnly: dryRun,
    reporters: ['clear-text', 'progress', 'json', 'html'],
    jsonReporter: { fileName: `reports/mutation/${name}.json` },
    htmlReporter: { fileName: `reports/mutation/${name}.html` },
    tempDirName: `.stryker-tmp-${name}`,
    // Another part's sandbox, left by a run that failed, is not copied into this one's.
    ignorePatterns: [...(base.ignorePatterns ?? []), '/.stryker-tmp-*'],
    // A dry run tests no mutant: it leaves the incremental file as the last full run wrote it.
    incremental: !dryRun,
    incrementalFile: `reports/mutation/${name}-incremental.json`,
  };
  const configFile = `reports/mutation/${name}.stryker.json`;
  writeFileSync(`${root}/${configFile}`, `${JSON.stringify(config, null, 2)}\n`);
  console.log(`\n== ${name}: ${config.mutate.length} files (tests: ${tests.replaceAll(',', ' ')})`);
  const run = spawnSync('npx', ['stryker', 'run', configFile], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, MUTATION_TESTS: tests },
  });
  if (run.status !== 0) {
    console.error(`mutation: Stryker failed on ${name} (exit ${run.status ?? run.signal})`);
    process.exit(1);
  }
}

/** Stryker's mutation score over reports: detected (killed, timed out) over detected and undetected (survived, no coverage). */
function score(reports) {
  const count = { Killed: 0, Timeout: 0, Survived: 0, NoCoverage: 0 };
  // Static mutants (code run once, when its module loads, such as a table's rows) cannot be
  // switched on in a module already loaded: Stryker reports most of them surviving though
  // every test fails with one applied by hand. The score without them is printed beside.
  const dynamic = { detected: 0, total: 0 };
  let staticSurvived = 0;
  for (const file of reports.flatMap((report) => Object.values(report.files))) {
    for (const mutant of file.mutants) {
      if (!(mutant.status in count)) continue;
      count[mutant.status]++;
      if (mutant.static === true) {
        if (mutant.status === 'Survived') staticSurvived++;
        continue;
      }
      dynamic.total++;
      if (mutant.status === 'Killed' || mutant.status === 'Timeout') dynamic.detected++;
    }
  }
  const detected = count.Killed + count.Timeout;
  const total = detected + count.Survived + count.NoCoverage;
  return {
    ...count,
    total,
    score: total === 0 ? 100 : (100 * detected) / total,
    staticSurvived,
    dynamicScore: dynamic.total === 0 ? 100 : (100 * dynamic.detected) / dynamic.total,
  };
}

console.log(
  '\nfolder   | score   | target | mutants | killed | timeout | survived | no cov | minutes | static survived | score without static',
);
let below = 0;
for (const row of rows) {
  // A folder without a target (one measured by name only) is never below it.
  const target = FOLDERS[row.folder]?.target;
  const met = target === undefined || row.score >= target;
  if (!met) below++;
  console.log(
    [
      row.folder.padEnd(8),
      `${row.score.toFixed(2).padStart(6)}%`,
      target === undefined ? '     - ' : `${String(target).padStart(4)} %${met ? ' ' : '!'}`,
      String(row.total).padStart(7),
      String(row.Killed).padStart(6),
      String(row.Timeout).padStart(7),
      String(row.Survived).padStart(8),
      String(row.NoCoverage).padStart(6),
      row.minutes.toFixed(1).padStart(7),
      String(row.staticSurvived).padStart(15),
      `${row.dynamicScore.toFixed(2).padStart(6)}%`,
    ].join(' | ') + (row.missing.length > 0 ? `  (without ${row.missing.join(', ')}: not run yet)` : ''),
  );
}
if (below > 0)
  console.log(
    `\n${below} folder(s) below target (marked !); survivors are listed in reports/mutation/<folder>[-<part>].html`,
  );
const incomplete = rows.some((row) => row.missing.length > 0);
process.exit(check && (below > 0 || incomplete) ? 1 : 0);
