// The parts `npm run mutation` measures, worked out from src/'s folder tree (scripts/mutation.mjs
// runs them; test/scripts/mutation-parts.test.ts keeps the one hand-kept list complete).
import { readdirSync } from 'node:fs';

// The tests that reach the settings table's mutants: the option, config, example and deploy ones.
const OPTION_TESTS = [
  'test/server/options.test.ts',
  'test/server/settings/**/*.test.ts',
  'test/server/settings-reach.test.ts',
  'test/server/scored-policy.test.ts',
  'test/server/config.test.ts',
  'test/config-example.test.ts',
  'test/deploy/manifests.test.ts',
];

/**
 * The folders of src/ with a target (percent) and the tests that run for their mutants: a set's
 * name (read by vitest.mutation.config.ts) or a list of test files. A folder not named here can
 * still be measured (`npm run mutation -- kv`), with its own tests and no target.
 *
 * A folder too big for one sitting on two CPUs is measured in parts of a few hundred mutants
 * (under half an hour each), each its own Stryker run with its own incremental file, so that a
 * part finished is kept however the next one ends; its score is over all parts. Such a folder
 * has `groups`: every folder inside it is a part of its own (its tests the folder's, unless
 * `inside` names others), and the files directly inside it are measured in the groups named
 * here, by hand (the only hand-kept list: a file none names is measured in a part `others`, and
 * the test fails until a group names it).
 */
export const FOLDERS = {
  handoff: { target: 95, tests: 'core' },
  runtime: { target: 95, tests: 'core' },
  flow: { target: 85, tests: 'core' },
  routing: { target: 85, tests: 'routing' },
  endpoints: { target: 85, tests: 'endpoints' },
  engines: { target: 85, tests: 'engines' },
  http: { target: 85, tests: 'http' },
  server: {
    target: 85,
    tests: 'server',
    // A thousand mutants, most in the settings table, that only the option tests reach faster
    // than through a server: the score is a lower bound, as for the flow.
    inside: { settings: { tests: OPTION_TESTS } },
    groups: {
      options: { files: ['options.ts', 'config.ts'], tests: OPTION_TESTS },
      // The hosts' own files (the pipeline, the fleet and observability are parts of their own).
      serving: {
        files: [
          'completion.ts',
          'passthrough.ts',
          'relay.ts',
          'sse-relay.ts',
          'whole-response.ts',
          'stream-endings.ts',
          'openai-format.ts',
          'endpoint-stages.ts',
          'answer-request.ts',
          'http-exchange.ts',
          'tracking-stage.ts',
          'bearer-auth.ts',
          'custom-parts.ts',
          'config-error.ts',
        ],
      },
      app: {
        files: [
          'routes.ts',
          'route-entry.ts',
          'admin-routes.ts',
          'readiness.ts',
          'proxy-core.ts',
          'proxy.ts',
          'web-handler.ts',
          'unused-settings.ts',
          'index.ts',
        ],
      },
    },
  },
};

/** The folders of src/ (each one a folder that `npm run mutation -- <folder>` measures). */
export function foldersOf(src) {
  return readdirSync(src, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort();
}

/** The TypeScript files under `dir`, relative to it, in a stable order. */
function sourcesUnder(dir) {
  return readdirSync(dir, { recursive: true })
    .map((file) => String(file).replaceAll('\\', '/'))
    .filter((file) => file.endsWith('.ts'))
    .sort();
}

/**
 * The parts of one folder of src/, each `{ name, files, tests }`: `name` undefined for a folder
 * measured whole, `files` the paths from the repository's root that it mutates. Every file of
 * the folder is in exactly one part, whatever the hand-kept groups say. `folders`: FOLDERS, or
 * another table of the same shape (the tests').
 */
export function partsOf(src, folder, folders = FOLDERS) {
  const known = folders[folder] ?? { tests: [`test/${folder}/**/*.test.ts`] };
  const dir = `${src}/${folder}`;
  const path = (file) => `src/${folder}/${file}`;
  if (known.groups === undefined) return [{ name: undefined, files: sourcesUnder(dir).map(path), tests: known.tests }];
  const entries = readdirSync(dir, { withFileTypes: true });
  const direct = new Set(entries.filter((entry) => entry.isFile() && entry.name.endsWith('.ts')).map((e) => e.name));
  const parts = [];
  const grouped = new Set();
  for (const [name, group] of Object.entries(known.groups)) {
    // A file named twice is measured in its first group (the test refuses it); one moved or
    // deleted is left out of the run (the test refuses that too).
    const files = group.files.filter((file) => direct.has(file) && !grouped.has(file));
    for (const file of files) grouped.add(file);
    if (files.length > 0) parts.push({ name, files: files.map(path), tests: group.tests ?? known.tests });
  }
  const others = [...direct].filter((file) => !grouped.has(file)).sort();
  if (others.length > 0) parts.push({ name: 'others', files: others.map(path), tests: known.tests });
  for (const sub of entries
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort()) {
    const files = sourcesUnder(`${dir}/${sub}`).map((file) => path(`${sub}/${file}`));
    if (files.length > 0) parts.push({ name: sub, files, tests: known.inside?.[sub]?.tests ?? known.tests });
  }
  return parts;
}

/**
 * What is wrong with the hand-kept groups of FOLDERS against src/ as it is: a file directly in
 * a grouped folder that no group names, one that two name, a name of no such file (moved or
 * deleted), a group that shares its name with a folder inside, and an entry (of FOLDERS or
 * `inside`) for no folder. One line each; none when the lists are whole. `folders` as for
 * {@link partsOf}.
 */
export function groupProblems(src, folders = FOLDERS) {
  const problems = [];
  const there = foldersOf(src);
  for (const [folder, known] of Object.entries(folders)) {
    if (!there.includes(folder)) {
      problems.push(`src/${folder}/: has a target in scripts/mutation-parts.mjs, but is not there`);
      continue;
    }
    if (known.groups === undefined) continue;
    const entries = readdirSync(`${src}/${folder}`, { withFileTypes: true });
    const direct = entries
      .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
      .map((entry) => entry.name)
      .sort();
    const inside = new Set(entries.filter((entry) => entry.isDirectory()).map((entry) => entry.name));
    const namedBy = new Map();
    for (const [name, group] of Object.entries(known.groups)) {
      if (inside.has(name))
        problems.push(`src/${folder}/: group ${name} has the name of the folder ${name}/ inside it`);
      for (const file of group.files) namedBy.set(file, [...(namedBy.get(file) ?? []), name]);
    }
    for (const file of direct) {
      const groups = namedBy.get(file) ?? [];
      if (groups.length === 0) problems.push(`src/${folder}/${file}: in no group of scripts/mutation-parts.mjs`);
      if (groups.length > 1) problems.push(`src/${folder}/${file}: in ${groups.length} groups (${groups.join(', ')})`);
    }
    for (const [file, groups] of namedBy) {
      if (!direct.includes(file)) problems.push(`src/${folder}/${file}: named by ${groups.join(', ')}, but not there`);
    }
    for (const sub of Object.keys(known.inside ?? {})) {
      if (!inside.has(sub)) problems.push(`src/${folder}/${sub}/: has tests named in inside, but is not there`);
    }
  }
  return problems;
}
