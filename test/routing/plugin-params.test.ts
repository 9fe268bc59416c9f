// What scorer, filter and picker plugins share: lookup by name with a suggestion, parameters
// checked per plugin, defaults filled for the factory.
import { describe, expect, it } from 'vitest';
import { pluginNamed, readParams, withDefaults } from '../../src/routing/plugin-params.js';

const plugin = {
  name: 'sample',
  params: [
    { name: 'limit', help: '', default: 8, expected: 'a whole number', valid: Number.isSafeInteger },
    { name: 'share', help: '', default: 0.5, expected: 'a share', valid: (v: number) => v >= 0 && v <= 1 },
  ],
};

describe('plugin parameters', () => {
  it('withDefaults gives the factory every parameter: those given, the rest at their defaults', () => {
    expect(withDefaults(plugin)).toStrictEqual({ limit: 8, share: 0.5 });
    expect(withDefaults(plugin, { share: 1 })).toStrictEqual({ limit: 8, share: 1 });
    expect(withDefaults({ name: 'none', params: [] }, {})).toStrictEqual({});
  });

  it('readParams checks each given parameter, by its kind and plugin in the message', () => {
    expect(readParams('filter', plugin, { limit: '3' })).toStrictEqual({ limit: 3 });
    expect(() => readParams('picker', plugin, { limt: 1 })).toThrow(
      'has picker sample with no parameter limt (did you mean limit?)',
    );
    expect(() => readParams('filter', plugin, { q: 1 })).toThrow(
      'has filter sample with no parameter q (it takes limit, share)',
    );
    expect(() => readParams('filter', plugin, { share: 2 })).toThrow(
      'has filter sample with share 2: it must be a share',
    );
  });

  it('pluginNamed finds a plugin, or says which there are (with the closest name when one is close)', () => {
    const plugins = [plugin, { name: 'other', params: [] }];
    expect(pluginNamed('scorer', plugins, 'other')).toBe(plugins[1]);
    expect(() => pluginNamed('scorer', plugins, 'sampel')).toThrow(
      'names no scorer "sampel" (did you mean sample?): the scorers are sample, other',
    );
    expect(() => pluginNamed('filter', plugins, 'zzzzzzzz')).toThrow(
      'names no filter "zzzzzzzz": the filters are sample, other',
    );
  });

  it('a text parameter takes text as given, never read as a number, and refuses a number', () => {
    const labelled = {
      name: 'labelled',
      params: [
        {
          kind: 'text' as const,
          name: 'key',
          help: '',
          default: 'k',
          expected: 'a key',
          valid: (v: string) => v !== '',
        },
      ],
    };
    expect(readParams('filter', labelled, { key: '8' })).toStrictEqual({ key: '8' });
    expect(withDefaults(labelled)).toStrictEqual({ key: 'k' });
    expect(() => readParams('filter', labelled, { key: 8 })).toThrow(
      'has filter labelled with key 8: it must be a key',
    );
    expect(() => readParams('filter', plugin, { limit: 'many' })).toThrow(
      /with limit "many": it must be a whole number/,
    );
  });
});
