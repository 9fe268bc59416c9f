// `disagg serve --help`, written from the rows: docs/cli-reference.md is this text (npm run docs:cli).
import { ENGINE_NAMES } from '../../engines/registry.js';
import { SETTINGS } from './rows.js';

/** The help text of `disagg serve`, written from {@link SETTINGS}. */
export function serveUsage(): string {
  const indent = ' '.repeat(36);
  const lines = SETTINGS.map((setting, i) => {
    const left = `  --${setting.flag}${setting.arg === '' ? '' : ` ${setting.arg}`}`;
    const shown = setting.shownDefault ?? (setting.default === undefined ? undefined : String(setting.default));
    const help = `${setting.help}${shown === undefined ? '' : ` (default ${shown})`}`;
    const names = `${indent}${setting.env}; ${setting.key} in a file`;
    // A heading where a concern begins: the settings read as a dozen groups, not one list.
    const heading = setting.group !== SETTINGS[i - 1]?.group ? `${i === 0 ? '' : '\n'}${setting.group}:\n` : '';
    return `${heading}${left.length < indent.length ? left.padEnd(indent.length) : `${left}\n${indent}`}${help}\n${names}`;
  });
  return `Usage: disagg serve --connector ${ENGINE_NAMES.join('|')} --prefill URL[,URL...] --decode URL[,URL...] [options]

An OpenAI-compatible proxy in front of prefill and decode workers.

Every setting is also an environment variable (named after it) and a key of a config file
(--config FILE or DISAGG_CONFIG, JSON or YAML, keys in camelCase as in createProxy's
options, deadlines nested: deadlines: { idleMs: 10000 }). Flags win over the environment,
which wins over the file. Unknown keys and variables are refused.

${lines.join('\n')}

Other:
  --config FILE                     a JSON or YAML file of settings; DISAGG_CONFIG
  --help                            this text
`;
}
