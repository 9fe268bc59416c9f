// YAML is read from a config file and a tenants file, each at most a few times a process.
// The parser is loaded on the first document that needs it: imported with the modules that
// might read one, it was 4 MB of every idle proxy's resident set, most of which read none.
import { createRequire } from 'node:module';

type Yaml = typeof import('yaml');
let yaml: Yaml | undefined;

/**
 * Parses one YAML document (JSON is YAML too), loading the `yaml` package on first use. An
 * empty or blank text is `null`, as YAML reads it, without loading anything.
 *
 * @throws the parser's error (a `YAMLParseError`) for text that is not YAML.
 * @example
 * parseYaml('tenants: []'); // { tenants: [] }
 */
export function parseYaml(text: string): unknown {
  if (text.trim() === '') return null;
  yaml ??= createRequire(import.meta.url)('yaml') as Yaml;
  return yaml.parse(text);
}
