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

/**
 * A parse error's message in one line: the `yaml` package's message ends with the line it
 * failed on and a caret under it, which a log or a terminal shows as lines of their own;
 * "at line L, column C" before them says where already.
 *
 * @example
 * try { parseYaml('a: [') } catch (error) { yamlProblem(error) } // '... at line 1, column 5'
 */
export function yamlProblem(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return (message.split('\n')[0] ?? '').replace(/:\s*$/, '');
}
