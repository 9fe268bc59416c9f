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
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * The folders measured, their targets (percent) and the tests that run for their mutants: a
 * set's name (read by vitest.mutation.config.ts) or a list of test files. A folder too big for
 * one sitting on two CPUs is measured in parts of a few hundred mutants (under half an hour
 * each), each its own Stryker run with its own incremental file, so that a part finished is
 * kept however the next one ends; its score is over all parts.
 */
const FOLDERS = {
  handoff: { target: 95, parts: [{ tests: 'core' }] },
  runtime: { target: 95, parts: [{ tests: 'core' }] },
  flow: { target: 85, parts: [{ tests: 'core' }] },
  routing: { target: 85, parts: [{ tests: 'routing' }] },
  endpoints: { target: 85, parts: [{ tests: 'endpoints' }] },
  engines: { target: 85, parts: [{ tests: 'engines' }] },
  http: { target: 85, parts: [{ tests: 'http' }] },
  server: {
    target: 85,
    parts: [
      // A thousand mutants, most in the settings table, that only the option tests reach
      // faster than through a server: the score is a lower bound, as for the flow.
      {
        name: 'options',
        files: ['options.ts', 'config.ts', 'settings/*.ts'],
        tests: [
          'test/server/options.test.ts',
          'test/server/settings/**/*.test.ts',
          'test/server/settings-reach.test.ts',
          'test/server/scored-policy.test.ts',
          'test/server/config.test.ts',
          'test/config-example.test.ts',
          'test/deploy/manifests.test.ts',
        ],
      },
      {
        name: 'requests',
        files: ['request-schemas.ts', 'request-body.ts', 'openai-format.ts', 'model-limits.ts'],
        tests: 'server',
      },
      {
        name: 'completion',
        files: [
          'completion.ts',
          'relay.ts',
          'sse-relay.ts',
          'whole-response.ts',
          'error-answers.ts',
          'failure-rules.ts',
          'request-context.ts',
          'request-stages.ts',
          'passthrough.ts',
          'answer-request.ts',
          'custom-parts.ts',
          'config-error.ts',
        ],
        tests: 'server',
      },
      {
        name: 'health',
        files: ['health.ts', 'watch-health.ts', 'admission.ts', 'in-flight.ts', 'bearer-auth.ts'],
        tests: 'server',
      },
      {
        name: 'membership',
        files: [
          'membership.ts',
          'worker-records.ts',
          'pool-set.ts',
          'admin-routes.ts',
          'routing-policies.ts',
          'kv-following.ts',
          'engine-load.ts',
        ],
        tests: 'server',
      },
      {
        name: 'observing',
        files: [
          'tracing.ts',
          'metrics.ts',
          'request-metrics.ts',
          'tenancy-metrics.ts',
          'fleet-metrics.ts',
          'counted-histogram.ts',
          'kv-metrics.ts',
          'request-events.ts',
          'request-log.ts',
        ],
        tests: 'server',
      },
      {
        name: 'app',
        files: [
          'routes.ts',
          'route-entry.ts',
          'proxy-core.ts',
          'proxy.ts',
          'proxy-state.ts',
          'web-handler.ts',
          'index.ts',
        ],
        tests: 'server',
      },
    ],
  },
};

const args = process.argv.slice(2);
const check = args.includes('--check');
// `server` runs every part of a folder; `server:options` runs one part and scores the folder
// with the reports its other parts left in reports/mutation/ (the table says which are missing).
const asked = args.filter((arg) => !arg.startsWith('--')).map((arg) => arg.split(':'));
for (const [folder, part] of asked) {
  const known = FOLDERS[folder];
  if (!known || (part !== undefined && !known.parts.some((each) => each.name === part))) {
    const expected = Object.entries(FOLDERS).flatMap(([name, { parts }]) => [
      name,
      ...parts.filter((each) => each.name).map((each) => `${name}:${each.name}`),
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

// A part that names its files must, with the others, name every file of its folder, so that
// a module added later is not left out of the score without anyone noticing.
for (const [folder, { parts }] of Object.entries(FOLDERS)) {
  if (!parts.some((part) => part.files)) continue;
  const named = new Set(parts.flatMap((part) => part.files));
  const missing = readdirSync(`${root}/src/${folder}`).filter((file) => file.endsWith('.ts') && !named.has(file));
  if (missing.length > 0) {
    console.error(`mutation: src/${folder}/ has files no part of scripts/mutation.mjs names: ${missing.join(', ')}`);
    process.exit(2);
  }
}

const rows = [];
for (const folder of folders) {
  const started = Date.now();
  const reports = [];
  const missing = [];
  for (const part of FOLDERS[folder].parts) {
    const name = part.name ? `${folder}-${part.name}` : folder;
    const report = `${root}/reports/mutation/${name}.json`;
    const wanted = runs.some(([each, only]) => each === folder && (only === undefined || only === part.name));
    if (wanted) mutate(folder, part, name);
    if (existsSync(report)) reports.push(JSON.parse(readFileSync(report, 'utf8')));
    else missing.push(name);
  }
  rows.push({ folder, missing, minutes: (Date.now() - started) / 60_000, ...score(reports) });
}

/** One Stryker run over a part of a folder; exits when Stryker fails. */
function mutate(folder, part, name) {
  const tests = Array.isArray(part.tests) ? part.tests.join(',') : part.tests;
  const config = {
    ...base,
    mutate: part.files ? part.files.map((file) => `src/${folder}/${file}`) : [`src/${folder}/**/*.ts`],
    reporters: ['clear-text', 'progress', 'json', 'html'],
    jsonReporter: { fileName: `reports/mutation/${name}.json` },
    htmlReporter: { fileName: `reports/mutation/${name}.html` },
    tempDirName: `.stryker-tmp-${name}`,
    incremental: true,
    incrementalFile: `reports/mutation/${name}-incremental.json`,
  };
  const configFile = `reports/mutation/${name}.stryker.json`;
  writeFileSync(`${root}/${configFile}`, `${JSON.stringify(config, null, 2)}\n`);
  console.log(`\n== ${config.mutate.join(' ')} (tests: ${tests.replaceAll(',', ' ')})`);
  const run = spawnSync('npx', ['stryker', 'run', configFile], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, DISAGG_MUTATION_TESTS: tests },
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
