// The public registration of routing plugins: a registered plugin is named by the settings as a
// built-in is and checked as one, its name is its own, and what it consumes is fed.
import { describe, expect, it } from 'vitest';
import { type DeciderPlugin, readDeciders } from '../../src/routing/decider-plugins.js';
import { FILTERS, readFilters } from '../../src/routing/filter-plugins.js';
import { PICKERS, readPicker } from '../../src/routing/picker-plugins.js';
import {
  PluginNameTakenError,
  registerDecider,
  registerFilter,
  registerPicker,
  registerScorer,
} from '../../src/routing/plugin-registration.js';
import { readScorers, SCORERS, type ScorerPlugin } from '../../src/routing/plugins.js';
import { loadServeConfig } from '../../src/server/config.js';
import { ConfigError } from '../../src/server/config-error.js';
import { consumedBy } from '../../src/server/fleet/routing-policies.js';
import { resolveProxyOptions } from '../../src/server/settings/resolve.js';
import type { ServeConfig } from '../../src/server/settings/types.js';
import { DisaggError } from '../../src/util/disagg-error.js';

const scorer: ScorerPlugin = {
  name: 'test-even-port',
  help: 'workers on an even port',
  params: [
    {
      name: 'bonus',
      help: 'the score of an even port',
      default: 1,
      expected: 'a number above 0 and at most 1',
      valid: (value) => value > 0 && value <= 1,
    },
  ],
  consumes: {},
  create: (params) => ({
    name: 'test-even-port',
    score: (candidates: readonly { url: string }[]) =>
      candidates.map((worker) => (Number(new URL(worker.url).port) % 2 === 0 ? (params.bonus as number) : 0)),
  }),
};

const loadDecider: DeciderPlugin = {
  name: 'test-decode-idle',
  help: 'a decode worker with an empty queue',
  params: [],
  consumes: { 'engine-load': 'required' },
  create: (_params, services) => async () =>
    services.decodeWorkers?.().some((worker) => services.engineLoad?.(worker)?.waiting === 0)
      ? 'decode-idle'
      : undefined,
};

const caught = (run: () => unknown): unknown => {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
};

const WORKERS = {
  connector: 'vllm',
  prefill: [{ url: 'http://p:8100' }],
  decode: [{ url: 'http://d:8200' }],
} as const;

const serve = (...args: string[]) =>
  loadServeConfig(
    ['--connector', 'vllm', '--prefill', 'http://p:8100', '--decode', 'http://d:8200', ...args],
    {},
  ) as ServeConfig;

describe('registerScorer, registerFilter, registerPicker, registerDecider', () => {
  registerScorer(scorer);
  registerDecider(loadDecider);

  it("a built-in's name is refused with DISAGG_PLUGIN_NAME_TAKEN naming the registry and the name; nothing is registered", () => {
    const before = SCORERS.length;
    const error = caught(() => registerScorer({ ...scorer, name: 'load' }));
    expect(PluginNameTakenError.is(error)).toBe(true);
    expect(DisaggError.is(error)).toBe(true);
    expect(error).toMatchObject({
      code: 'DISAGG_PLUGIN_NAME_TAKEN',
      kind: 'scorer',
      pluginName: 'load',
      builtIn: true,
    });
    expect((error as Error).message).toBe('A scorer named "load" is built in: give yours another name');
    expect(SCORERS.length).toBe(before);
    for (const [register, name] of [
      [() => registerFilter({ ...FILTERS[0], name: 'low-queue' } as never), 'filter'],
      [() => registerPicker({ ...PICKERS[0], name: 'max-score' } as never), 'picker'],
      [() => registerDecider({ ...loadDecider, name: 'short-prompt' }), 'decider'],
    ] as const) {
      expect(caught(register)).toMatchObject({ code: 'DISAGG_PLUGIN_NAME_TAKEN', kind: name, builtIn: true });
    }
  });

  it('a name registered before is refused too, as not built in', () => {
    expect(caught(() => registerScorer(scorer))).toMatchObject({
      code: 'DISAGG_PLUGIN_NAME_TAKEN',
      pluginName: 'test-even-port',
      builtIn: false,
      message: 'A scorer named "test-even-port" is registered already: give yours another name',
    });
  });

  it('a declaration that does not check is refused with a TypeError saying what is wrong', () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ ...scorer, name: 'mine:2' }, /name is letters, digits/],
      [{ ...scorer, name: 'a,b' }, /name is letters, digits/],
      [{ ...scorer, name: 'x', help: '' }, /The scorer x needs a help text/],
      [{ ...scorer, name: 'x', create: undefined }, /needs create\(params, services\)/],
      [
        { ...scorer, name: 'x', params: [{ ...scorer.params[0], default: 2 }] },
        /parameter bonus has default 2, which is not a number above 0 and at most 1/,
      ],
      [{ ...scorer, name: 'x', consumes: { 'gpu-temperature': 'required' } }, /consumes "gpu-temperature"/],
      [{ ...scorer, name: 'x', consumes: { 'decode-caches': 'required' } }, /consumes "decode-caches"/],
    ];
    for (const [plugin, message] of cases) {
      const error = caught(() => registerScorer(plugin as ScorerPlugin));
      expect(error, String(message)).toBeInstanceOf(TypeError);
      expect((error as Error).message).toMatch(message);
    }
    expect(SCORERS.map((each) => each.name)).not.toContain('x');
  });

  it('a registered scorer is named in --scorers, its params checked as a built-in’s are', () => {
    expect(readScorers('test-even-port:2,load')).toEqual([
      { name: 'test-even-port', weight: 2 },
      { name: 'load', weight: 1 },
    ]);
    expect(() => readScorers([{ name: 'test-even-port', params: { bonus: 3 } }])).toThrow(
      'has scorer test-even-port with bonus 3: it must be a number above 0 and at most 1',
    );
    expect(serve('--decode-policy', 'scored', '--scorers', 'test-even-port:2,load').routing.scorers).toEqual([
      { name: 'test-even-port', weight: 2 },
      { name: 'load', weight: 1 },
    ]);
  });

  it('a registered decider is named in --deciders; what it consumes is fed, and required, checked', () => {
    expect(readDeciders('test-decode-idle,short-prompt')).toEqual([
      { name: 'test-decode-idle' },
      { name: 'short-prompt' },
    ]);
    expect(serve('--deciders', 'test-decode-idle').routing.deciders).toEqual([{ name: 'test-decode-idle' }]);
    // It reads the engines' load: without an interval to scrape it the proxy's settings refuse it.
    const deciders = [{ name: 'test-decode-idle' }];
    const refused = caught(() => resolveProxyOptions({ ...WORKERS, routing: { deciders } }));
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toBe(
      "decider 'test-decode-idle' scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100",
    );
    const resolved = resolveProxyOptions({ ...WORKERS, routing: { deciders, engineLoadIntervalMs: 100 } });
    expect(consumedBy(resolved)['engine-load']).toBe('required');
    // Without deciders (the default's prefill-busy reads the load where it is scraped), nothing reads it.
    expect(
      consumedBy(resolveProxyOptions({ ...WORKERS, selection: 'least-in-flight', routing: { deciders: [] } }))[
        'engine-load'
      ],
    ).toBeUndefined();
  });

  it('a name no decider has is refused with the closest one as a hint', () => {
    expect(() => serve('--deciders', 'short-promt')).toThrow('did you mean short-prompt?');
  });

  it('a registered filter and picker are named in --filters and --picker', () => {
    registerFilter({
      name: 'test-keep-all',
      help: 'keeps every worker',
      params: [],
      consumes: {},
      create: () => ({ name: 'test-keep-all', filter: (candidates) => candidates }),
    });
    registerPicker({
      name: 'test-first',
      help: 'the first candidate',
      params: [],
      consumes: {},
      create: () => ({ name: 'test-first', pick: (candidates) => candidates[0] as never }),
    });
    expect(readFilters('test-keep-all')).toEqual([{ name: 'test-keep-all' }]);
    expect(readPicker('test-first')).toEqual({ name: 'test-first' });
  });
});
