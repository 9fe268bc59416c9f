// The kernel every settings module shares: what a row is, how its value is named when it is
// refused, how problems are gathered, and the error that tells them (ConfigError, which the
// server's modules and the package's entry import from ../config-error.ts). It knows no row, so every rows file can import it.
import { closest } from '../../util/closest.js';
import { branded, DisaggError } from '../../util/disagg-error.js';

/** One setting: its names everywhere, what it takes, its default. */
export interface Setting {
  /** The option of `createProxy` and the key of a config file (`deadlines.idleMs`: nested). */
  key: string;
  /** The command-line flag, without `--`. */
  flag: string;
  /** The environment variable: {@link envOf} its flag, unless the row says otherwise. */
  env: string;
  /** What the flag takes, for the help text. */
  arg: string;
  help: string;
  /** The default, applied when no source gives the setting (undefined: none, or required). */
  default?: unknown | undefined;
  /** The default as the help text shows it, when it is not the value itself. */
  shownDefault?: string | undefined;
  /** Only `disagg serve` has it (where and how the process runs); not an option of `createProxy`. */
  serveOnly?: boolean | undefined;
  /** Given more than once on the command line (worker lists). */
  multiple?: boolean | undefined;
  /** A switch: the flag alone says true (`arg` is empty); variables and files say true or false. */
  boolean?: boolean | undefined;
  /** The value from what a source gave (flags and the environment give strings). */
  parse(value: unknown): unknown;
  /** The concern it belongs to, the heading `--help` lists it under (set by its group). */
  group?: SettingGroup | undefined;
}

/**
 * A row as a rows file writes it: `env` follows from `flag` (so it cannot drift from it) and
 * `group` from the group it is listed in; a row may still name its variable, should one ever
 * have to differ.
 */
export type SettingRow = Omit<Setting, 'env' | 'group'> & { env?: string | undefined };

/** The concerns the settings are grouped by, in `--help`'s order. */
export type SettingGroup =
  | 'Workers'
  | 'Listening'
  | 'Routing'
  | 'Deadlines'
  | 'Health'
  | 'Retries'
  | 'Admission'
  | 'Shutdown and connections'
  | 'Keys'
  | 'KV events'
  | 'Discovery'
  | 'Sidecar'
  | 'Scaling'
  | "Agents' state"
  | 'Logs and traces';

/** The environment variable of a flag: `--kv-events-port` is `DISAGG_KV_EVENTS_PORT`. */
export function envOf(flag: string): string {
  return `DISAGG_${flag.toUpperCase().replaceAll('-', '_')}`;
}

/** A row made by a function (one per role, say), its key and `parse` kept as written. */
export function row<const R extends SettingRow>(setting: R): R {
  return setting;
}

/**
 * The rows of one group as {@link inGroup} returns them: each a whole {@link Setting}, its own
 * `parse` kept (not widened to Setting's), so that rows.ts can check what it returns.
 */
export type Grouped<R extends readonly SettingRow[]> = {
  readonly [I in keyof R]: R[I] & { env: string; group: SettingGroup };
};

/**
 * The rows of one concern, each stamped with it and given its variable (their keys and
 * `parse` kept as written, for the compile-time checks of `rows.ts`).
 */
export function inGroup<const R extends readonly SettingRow[]>(group: SettingGroup, rows: R): Grouped<R> {
  return rows.map((each) => ({ ...each, env: each.env ?? envOf(each.flag), group })) as unknown as Grouped<R>;
}

/**
 * A configuration that cannot be used; the message names the setting as it was given (the
 * option, the flag, the environment variable or the config file's key) and what was expected.
 * `code`: `DISAGG_CONFIG`.
 */
export class ConfigError extends DisaggError {
  static override readonly is = branded<ConfigError>('ConfigError');
  declare readonly code: 'DISAGG_CONFIG';
  /** Each problem found, in the order met: one line each (the message holds them all). */
  readonly problems: readonly string[];

  constructor(message: string, problems: readonly string[] = [message]) {
    super('DISAGG_CONFIG', message);
    this.problems = problems;
  }

  /** One error for every problem of a configuration, so that one restart fixes them all. */
  static of(problems: readonly string[]): ConfigError {
    if (problems.length === 1) return new ConfigError(problems[0] as string);
    return new ConfigError(`${problems.length} problems:\n${problems.map((p) => `  - ${p}`).join('\n')}`, problems);
  }
}

/** Why a value was refused; the caller adds the setting's name. */
export class Invalid extends Error {}

/**
 * Gathers the problems of a configuration instead of stopping at the first: an operator who
 * restarts a pod for each misspelt key learns of them one crash loop at a time.
 */
export class Problems {
  readonly #found: string[] = [];

  /** Runs `step`; a ConfigError it throws is noted (undefined returned), anything else rethrown. */
  check<T>(step: () => T): T | undefined {
    try {
      return step();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      this.#found.push(...error.problems);
      return undefined;
    }
  }

  /** Notes one problem. */
  add(problem: string): void {
    this.#found.push(problem);
  }

  /** How many problems were noted so far. */
  get count(): number {
    return this.#found.length;
  }

  /** @throws {ConfigError} with every problem noted, if any was. */
  throwIfAny(): void {
    if (this.#found.length > 0) throw ConfigError.of(this.#found);
  }
}

/** Where a value came from, for the name an error gives it. */
export type Source = { kind: 'option' } | { kind: 'flag' } | { kind: 'env' } | { kind: 'file'; path: string };

/** The name of a setting as the user gave it. */
function nameOf(setting: Setting, source: Source): string {
  switch (source.kind) {
    case 'option':
      return setting.key;
    case 'flag':
      return setting.key.includes('.') ? `--${setting.flag} (${setting.key})` : `--${setting.flag}`;
    case 'env':
      return setting.env;
    case 'file':
      return `${setting.key} in ${source.path}`;
  }
}

/**
 * Parses one setting's value.
 *
 * @throws {ConfigError} naming the setting as `source` gave it.
 */
export function parseSetting(setting: Setting, value: unknown, source: Source): unknown {
  try {
    return setting.parse(value);
  } catch (error) {
    if (!(error instanceof Invalid)) throw error;
    throw new ConfigError(`${nameOf(setting, source)} ${error.message}`);
  }
}

/** A value of the nested settings object at `key` (`deadlines.idleMs`). */
export function valueAt(values: Record<string, unknown>, key: string): unknown {
  let at: unknown = values;
  for (const part of key.split('.')) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

/** Sets `key` (`deadlines.idleMs`) of the nested settings object, making its group. */
export function setAt(values: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split('.');
  let at = values;
  for (const part of parts.slice(0, -1)) {
    at[part] ??= {};
    at = at[part] as Record<string, unknown>;
  }
  at[parts.at(-1) as string] = value;
}

/** `message` with the closest of `known` to `name` as a did-you-mean, when one is close. */
export function withHint(message: string, name: string, known: readonly string[]): string {
  const hint = closest(name, known);
  return hint === undefined ? message : `${message}; did you mean ${JSON.stringify(hint)}?`;
}

// A misspelt setting must fail loudly: ignored, its default would run in production unnoticed.
/**
 * Refuses a key no setting has, at the top or inside a group (`routing`, `retry`, `deadlines`,
 * ...), and a group that is not an object: a misspelt or misplaced setting would otherwise be
 * ignored without a word and its default used. `what` names a key where it was given
 * (`setting "x" in disagg.yaml`).
 */
export function rejectUnknown(
  values: Record<string, unknown>,
  known: readonly string[],
  what: (key: string) => string,
  problems: Problems,
): void {
  const tops = new Set(known.map((key) => key.split('.')[0] as string));
  const groups = new Set(known.filter((key) => key.includes('.')).map((key) => key.split('.')[0] as string));
  for (const [key, value] of Object.entries(values)) {
    if (!tops.has(key)) {
      // A group's own name is a candidate too: `routnig` is most likely `routing`.
      problems.add(withHint(`Unknown ${what(JSON.stringify(key))}`, key, [...known, ...groups]));
      continue;
    }
    if (!groups.has(key) || value === undefined) continue;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      const kind = key === 'deadlines' ? 'budgets' : 'settings';
      problems.add(`The ${what(JSON.stringify(key))}: ${key} must be an object of ${kind}`);
      continue;
    }
    for (const inner of Object.keys(value)) {
      const name = `${key}.${inner}`;
      if (!known.includes(name)) problems.add(withHint(`Unknown ${what(JSON.stringify(name))}`, name, known));
    }
  }
}
