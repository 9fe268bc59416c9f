// The one door by which a router's own plugins join the registries: each is checked as a
// built-in's declaration would be, and its name may not be one the registry has, so that a
// setting naming it means one plugin. Registered plugins are then named in the settings
// (`routing.scorers`, `routing.filters`, `routing.picker`, `routing.deciders`) as built-ins are.
import { describeValue } from '../util/describe-value.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { DECIDER_NAMES, DECIDERS, type DeciderPlugin } from './decider-plugins.js';
import { FILTER_NAMES, FILTERS, type FilterPlugin } from './filter-plugins.js';
import { PICKER_NAMES, PICKERS, type PickerPlugin } from './picker-plugins.js';
import type { NamedPlugin, PluginKind } from './plugin-params.js';
import { SCORER_NAMES, SCORERS, type ScorerPlugin } from './plugins.js';
import { ROUTING_DATA } from './services.js';

/**
 * A plugin registered under a name its registry already has: a built-in's, or one registered
 * before (`code` `DISAGG_PLUGIN_NAME_TAKEN`). Nothing is registered then.
 *
 * @example
 * try {
 *   registerScorer({ name: 'load', help: 'mine', params: [], consumes: {}, create: () => loadScorer() });
 * } catch (error) {
 *   const taken = PluginNameTakenError.is(error) ? [error.kind, error.pluginName, error.builtIn] : undefined; // ['scorer', 'load', true]
 * }
 */
export class PluginNameTakenError extends DisaggError {
  static override readonly is = branded<PluginNameTakenError>('PluginNameTakenError');
  declare readonly code: 'DISAGG_PLUGIN_NAME_TAKEN';
  /** The registry: `scorer`, `filter`, `picker` or `decider`. */
  readonly kind: PluginKind;
  /** The name asked for. */
  readonly pluginName: string;
  /** Whether a built-in plugin has it (else a plugin registered before). */
  readonly builtIn: boolean;

  constructor(kind: PluginKind, pluginName: string, builtIn: boolean) {
    super(
      'DISAGG_PLUGIN_NAME_TAKEN',
      `A ${kind} named ${JSON.stringify(pluginName)} is ${builtIn ? 'built in' : 'registered already'}: give yours another name`,
    );
    this.kind = kind;
    this.pluginName = pluginName;
    this.builtIn = builtIn;
  }
}

/** What a name may be: it is written in flags, comma-separated, and as `name:weight`. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Registers a scorer of your own: the `scored` policy's settings may then name it
 * (`routing.scorers`, `--scorers mine:2,load`), its parameters checked as a built-in's are.
 * Register before the proxy reads its settings (`createProxy`, `createHandler`).
 *
 * @example
 * registerScorer({
 *   name: 'even-port',
 *   help: 'workers on an even port',
 *   params: [],
 *   consumes: {},
 *   create: () => ({
 *     name: 'even-port',
 *     score: (candidates) => candidates.map((worker) => (Number(new URL(worker.url).port) % 2 === 0 ? 1 : 0)),
 *   }),
 * });
 *
 * @throws {PluginNameTakenError} for a name a scorer has (built in or registered);
 *   {TypeError} for a declaration that does not check (a name with `:` or `,`, a parameter
 *   whose default is not valid, a `consumes` kind no router feeds, no `create`).
 */
export function registerScorer(plugin: ScorerPlugin): void {
  register('scorer', SCORERS, SCORER_NAMES, plugin, ROUTING_DATA);
}

/**
 * Registers a filter of your own: the `scored` policy's settings may then name it
 * (`routing.filters`, `--filters mine,low-queue`). Register before the proxy reads its settings.
 *
 * @example
 * registerFilter({
 *   name: 'not-draining',
 *   help: 'keeps workers not marked draining',
 *   params: [],
 *   consumes: {},
 *   create: () => ({ name: 'not-draining', filter: (candidates) => candidates.filter((worker) => !worker.url.includes('drain')) }),
 * });
 *
 * @throws {PluginNameTakenError} for a name a filter has; {TypeError} for a declaration that does not check.
 */
export function registerFilter(plugin: FilterPlugin): void {
  register('filter', FILTERS, FILTER_NAMES, plugin, ROUTING_DATA);
}

/**
 * Registers a picker of your own: the `scored` policy's settings may then name it
 * (`routing.picker`, `--picker mine`). Register before the proxy reads its settings.
 *
 * @example
 * registerPicker({
 *   name: 'first-best',
 *   help: 'the first of the highest totals',
 *   params: [],
 *   consumes: {},
 *   create: () => ({
 *     name: 'first-best',
 *     pick: (candidates, scores) => candidates[scores.indexOf(Math.max(...scores))] ?? (candidates[0] as never),
 *   }),
 * });
 *
 * @throws {PluginNameTakenError} for a name a picker has; {TypeError} for a declaration that does not check.
 */
export function registerPicker(plugin: PickerPlugin): void {
  register('picker', PICKERS, PICKER_NAMES, plugin, ROUTING_DATA);
}

/**
 * Registers a P/D decider of your own: the settings may then name it (`routing.deciders`,
 * `--deciders mine,short-prompt`), and the proxy feeds it what it `consumes` (declare
 * `engine-load` and the engines' load is scraped for it; `decode-caches` and the settings
 * insist on a decode policy that knows the caches). It may answer later (a cache lookup).
 * Register before the proxy reads its settings.
 *
 * @example
 * registerDecider({
 *   name: 'decode-idle',
 *   help: 'a decode worker with an empty queue',
 *   params: [],
 *   consumes: { 'engine-load': 'required' },
 *   create: (_params, services) => () =>
 *     services.decodeWorkers?.().some((worker) => services.engineLoad?.(worker)?.waiting === 0) ? 'decode-idle' : undefined,
 * });
 *
 * @throws {PluginNameTakenError} for a name a decider has; {TypeError} for a declaration that does not check.
 */
export function registerDecider(plugin: DeciderPlugin): void {
  register('decider', DECIDERS, DECIDER_NAMES, plugin, [...ROUTING_DATA, 'decode-caches']);
}

/** `plugin` checked and added to `registry` (the one place a registry's list grows). */
function register<P extends NamedPlugin>(
  kind: PluginKind,
  registry: readonly P[],
  builtIns: readonly string[],
  plugin: P,
  kinds: readonly string[],
): void {
  checkDeclaration(kind, plugin, kinds);
  if (registry.some((each) => each.name === plugin.name)) {
    throw new PluginNameTakenError(kind, plugin.name, builtIns.includes(plugin.name));
  }
  // The registries are read-only to their readers; this is where they are written.
  (registry as P[]).push(Object.freeze({ ...plugin, params: Object.freeze([...plugin.params]) }));
}

/** Throws a TypeError naming what of a plugin's declaration does not check. */
function checkDeclaration(kind: PluginKind, plugin: unknown, kinds: readonly string[]): void {
  if (typeof plugin !== 'object' || plugin === null) {
    throw new TypeError(
      `A ${kind} plugin is an object { name, help, params, consumes, create }, got ${describeValue(plugin)}`,
    );
  }
  const { name, help, params, consumes, create } = plugin as Record<string, unknown>;
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(
      `A ${kind} plugin's name is letters, digits, '.', '_' and '-' (the settings write it in lists and as name:weight), got ${describeValue(name)}`,
    );
  }
  const at = `The ${kind} ${name}`;
  if (typeof help !== 'string' || help.trim() === '') throw new TypeError(`${at} needs a help text (for the docs)`);
  if (typeof create !== 'function')
    throw new TypeError(`${at} needs create(params, services), got ${describeValue(create)}`);
  if (!Array.isArray(params)) throw new TypeError(`${at}'s params is a list (none: []), got ${describeValue(params)}`);
  const seen = new Set<string>();
  for (const param of params as unknown[]) {
    const { name: key, default: value, valid, expected } = (param ?? {}) as Record<string, unknown>;
    if (typeof key !== 'string' || key === '' || seen.has(key)) {
      throw new TypeError(`${at} has a parameter without a name of its own: ${describeValue(key)}`);
    }
    seen.add(key);
    if (typeof valid !== 'function' || typeof expected !== 'string') {
      throw new TypeError(`${at}'s parameter ${key} needs valid(value) and expected (what a value must be)`);
    }
    if (typeof value !== 'number' || !valid(value)) {
      throw new TypeError(`${at}'s parameter ${key} has default ${describeValue(value)}, which is not ${expected}`);
    }
  }
  if (typeof consumes !== 'object' || consumes === null || Array.isArray(consumes)) {
    throw new TypeError(`${at}'s consumes is a mapping of what it reads (none: {}), got ${describeValue(consumes)}`);
  }
  for (const [data, need] of Object.entries(consumes)) {
    if (need === undefined) continue;
    if (!kinds.includes(data) || (need !== 'required' && need !== 'optional')) {
      throw new TypeError(
        `${at} consumes ${JSON.stringify(data)}: ${describeValue(need)}; a ${kind} reads ${kinds.join(', ')}, each 'required' or 'optional'`,
      );
    }
  }
}
