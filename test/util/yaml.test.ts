import { describe, expect, it } from 'vitest';
import { parseYaml } from '../../src/util/yaml.js';

describe('parseYaml', () => {
  it('reads a YAML document, and JSON as YAML', () => {
    expect(parseYaml('tenants:\n  - { name: chat, priority: 10 }\n')).toEqual({
      tenants: [{ name: 'chat', priority: 10 }],
    });
    expect(parseYaml('{"port": 8000}')).toEqual({ port: 8000 });
  });

  it('a blank text is null, as YAML reads it; a comment alone too', () => {
    expect(parseYaml('')).toBeNull();
    expect(parseYaml(' \n\t\n')).toBeNull();
    expect(parseYaml('# nothing yet\n')).toBeNull();
  });

  it("text that is not YAML throws the parser's error, naming where", () => {
    expect(() => parseYaml('a: [1, 2')).toThrow(/line 1/);
  });
});
