import { readFileSync } from 'node:fs';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { closest } from '../util/closest.js';
import { parseYaml, yamlProblem } from '../util/yaml.js';
import { ConfigError } from './config-error.js';
import { SETTINGS } from './settings/rows.js';
import { resolveServeConfig } from './settings/serve-sources.js';
import type { ServeConfig } from './settings/types.js';
import { serveUsage } from './settings/usage.js';

export { ConfigError } from './config-error.js';
export type { ServeConfig } from './settings/types.js';

/** The help text of `disagg serve` (written from the settings table). */
export const SERVE_USAGE = serveUsage();

const FLAGS = {
  ...Object.fromEntries(
    SETTINGS.map((setting) => [
      setting.flag,
      { type: setting.boolean ? 'boolean' : 'string', ...(setting.multiple ? { multiple: true } : {}) },
    ]),
  ),
  config: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

type Raw = Record<string, unknown>;

/**
 * Reads the configuration of `disagg serve` from its arguments, the environment
 * (`DISAGG_*`) and a JSON or YAML file (`--config` / `DISAGG_CONFIG`), in that order of
 * precedence, and checks it against the one table of settings that `createProxy` uses too.
 *
 * @returns the configuration, or `'help'` when help was asked for.
 * @throws {ConfigError} naming the setting that is missing, wrong or unknown, as it was given.
 */
export function loadServeConfig(args: string[], env: NodeJS.ProcessEnv = process.env): ServeConfig | 'help' {
  let flags: Raw;
  try {
    flags = parseArgs({ args, options: FLAGS, allowPositionals: false, strict: true }).values as Raw;
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      throw new ConfigError((error as Error).message);
    }
    throw ConfigError.of(unknownFlags(args));
  }
  if (flags.help === true) return 'help';
  const path = (flags.config as string | undefined) ?? env.DISAGG_CONFIG;
  return resolveServeConfig({
    flags,
    env,
    file: path === undefined || path === '' ? undefined : { path, values: readConfigFile(path) },
  });
}

/**
 * Every flag of `args` that `disagg serve` does not have, each with the closest one it does
 * (`--prefil` finds `--prefill`): node's own message names the first and suggests `--`.
 */
function unknownFlags(args: string[]): string[] {
  const { tokens } = parseArgs({ args, options: FLAGS, allowPositionals: true, strict: false, tokens: true });
  const known = Object.keys(FLAGS);
  const problems: string[] = [];
  for (const token of tokens) {
    if (token.kind !== 'option' || Object.hasOwn(FLAGS, token.name)) continue;
    const hint = closest(token.name, known);
    problems.push(`Unknown flag ${token.rawName}${hint === undefined ? '' : `; did you mean --${hint}?`}`);
  }
  return problems;
}

function readConfigFile(path: string): Raw {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(`Cannot read the config file ${path}: ${(error as Error).message}`);
  }
  const yaml = /\.ya?ml$/i.test(path);
  let parsed: unknown;
  try {
    parsed = yaml ? parseYaml(text) : JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`The config file ${path} is not valid ${yaml ? 'YAML' : 'JSON'}: ${yamlProblem(error)}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(`The config file ${path} must hold an object of settings`);
  }
  return parsed as Raw;
}
