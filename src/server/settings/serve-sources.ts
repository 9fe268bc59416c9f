// `disagg serve`'s three sources of settings, in order of precedence: flags, `DISAGG_*`
// variables (Kubernetes' own service links let through), a config file.
import { discoveryOf, kvEventsOf, readSettings, tokenizerOf } from './read-settings.js';
import { SETTINGS } from './rows.js';
import { Problems, rejectUnknown, valueAt, withHint } from './setting.js';
import type { ServeConfig } from './types.js';
import { withWorkers } from './workers.js';

/** The sources `disagg serve` reads, in order of precedence. */
export interface ServeSources {
  flags: Record<string, unknown>;
  env: NodeJS.ProcessEnv;
  file: { path: string; values: Record<string, unknown> } | undefined;
}

/**
 * `disagg serve`'s configuration from its sources: flags win over `DISAGG_*` variables, which
 * win over the config file. Unknown variables and file keys are refused, with the closest
 * known name as a hint.
 *
 * @throws {ConfigError} naming the setting as it was given.
 */
export function resolveServeConfig({ flags, env, file }: ServeSources): ServeConfig {
  const problems = new Problems();
  checkEnvironment(env, problems);
  if (file !== undefined) {
    rejectUnknown(
      file.values,
      SETTINGS.map((setting) => setting.key),
      (key) => `setting ${key} in ${file.path}`,
      problems,
    );
  }
  const values = readSettings((setting) => {
    const flag = flags[setting.flag];
    if (flag !== undefined) return { value: flag, source: { kind: 'flag' } };
    const variable = env[setting.env];
    if (variable !== undefined && variable !== '' && !isServiceLink(setting.env, variable)) {
      return { value: variable, source: { kind: 'env' } };
    }
    const value = file === undefined ? undefined : valueAt(file.values, setting.key);
    return value === undefined ? undefined : { value, source: { kind: 'file', path: (file as { path: string }).path } };
  }, problems);
  // Every row's value as resolved, under its key: a row added to SETTINGS reaches the CLI as it
  // reaches createProxy (a field-by-field copy here once parsed a new flag and dropped it).
  const resolved = withWorkers(values);
  return {
    ...resolved,
    discovery: discoveryOf(resolved),
    kvEvents: kvEventsOf(resolved),
    tokenizer: tokenizerOf(resolved),
  } as unknown as ServeConfig;
}

/**
 * Kubernetes gives every pod variables for each Service of its namespace: a Service named
 * `disagg` yields `DISAGG_SERVICE_HOST`, `DISAGG_PORT=tcp://...`, `DISAGG_PORT_8000_TCP...`.
 * Those are not settings; the rest of `DISAGG_*` must be.
 */
function isServiceLink(name: string, value: string): boolean {
  return (
    name.startsWith('DISAGG_SERVICE_') ||
    /^DISAGG_PORT_\d+_(TCP|UDP|SCTP)/.test(name) ||
    (name === 'DISAGG_PORT' && /^(tcp|udp|sctp):\/\//.test(value))
  );
}

/** Notes every `DISAGG_*` variable that is no setting (a misspelt one would be ignored). */
function checkEnvironment(env: NodeJS.ProcessEnv, problems: Problems): void {
  const known = [...SETTINGS.map((setting) => setting.env), 'DISAGG_CONFIG'];
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('DISAGG_') || known.includes(name) || isServiceLink(name, value ?? '')) continue;
    problems.add(withHint(`Unknown environment variable ${name}`, name, known));
  }
}
