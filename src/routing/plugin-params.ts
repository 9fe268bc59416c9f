// What every routing plugin kind (scorers, filters, pickers, deciders) shares: its parameters, checked
// per plugin, and the lookup of a plugin by name with a suggestion for a misspelt one.
import { closest } from '../util/closest.js';
import { describeValue } from '../util/describe-value.js';
import type { Consumption } from './services.js';

/** One parameter of a plugin: its name in the settings, its default and the values it takes. */
export interface PluginParam {
  readonly name: string;
  readonly help: string;
  readonly default: number;
  /** What a value must be, for the error that refuses one ("a whole number of 0 or more"). */
  readonly expected: string;
  valid(value: number): boolean;
}

/**
 * A parameter of a plugin that takes text (a label key, a mode), not a number: `kind: 'text'`
 * tells it from a {@link PluginParam}.
 */
export interface TextPluginParam {
  readonly kind: 'text';
  readonly name: string;
  readonly help: string;
  readonly default: string;
  /** What a value must be, for the error that refuses one ("any or fail"). */
  readonly expected: string;
  valid(value: string): boolean;
}

/** A value of a plugin's parameter: a number, or text for a {@link TextPluginParam}. */
export type ParamValue = number | string;

/** What the shared checks read of a plugin of any kind. */
export interface NamedPlugin<Param extends AnyParam = AnyParam> {
  readonly name: string;
  readonly params: readonly Param[];
}

/** A parameter of either kind. */
export type AnyParam = PluginParam | TextPluginParam;

/** The kinds of routing plugin, as the settings and their messages name them. */
export type PluginKind = 'scorer' | 'filter' | 'picker' | 'decider';

/**
 * What a plugin of every kind declares besides its factory: its name (what the settings name),
 * what it does (for `--help` and the docs), its parameters and the data it reads.
 */
export interface RoutingPlugin<Param extends AnyParam = PluginParam> extends NamedPlugin<Param> {
  readonly help: string;
  readonly consumes: Consumption;
}

/**
 * One filter, picker or decider as the settings give it: its plugin's name and the parameters given
 * (the rest at their defaults).
 *
 * @example
 * const setting: PluginSetting = { name: 'low-kv-usage', params: { maxKvUsage: 0.9 } };
 */
export interface PluginSetting {
  readonly name: string;
  readonly params?: Readonly<Record<string, ParamValue>> | undefined;
}

/**
 * One entry of the settings for a plugin of `plugins`: its name, or `{ name, params? }`, each
 * checked (`shape` says what an entry is, for the error that refuses something else).
 *
 * @example
 * readPluginEntry('filter', FILTERS, 'low-queue', 'a filter is a name or { name, params? }'); // { name: 'low-queue' }
 *
 * @throws {RangeError} with one line naming the plugin and what is wrong with the entry.
 */
export function readPluginEntry(
  kind: PluginKind,
  plugins: readonly NamedPlugin[],
  item: unknown,
  shape: string,
): PluginSetting {
  const given = typeof item === 'string' ? { name: item.trim() } : item;
  if (typeof given !== 'object' || given === null || typeof (given as { name?: unknown }).name !== 'string') {
    throw new RangeError(`has ${describeValue(item)}: ${shape}`);
  }
  const { name, params, ...extra } = given as { name: string; params?: unknown };
  const plugin = pluginNamed(kind, plugins, name);
  const stray = Object.keys(extra)[0];
  if (stray !== undefined) throw new RangeError(`has ${kind} ${name} with ${stray}: an entry takes name and params`);
  return params === undefined ? { name } : { name, params: readParams(kind, plugin, params) };
}

/**
 * The plugin named `name` in `plugins`.
 *
 * @example
 * pluginNamed('filter', FILTERS, 'low-queue').consumes; // { 'engine-load': 'required' }
 *
 * @throws {RangeError} for a name no plugin has, with the closest one as a hint.
 */
export function pluginNamed<P extends NamedPlugin>(kind: PluginKind, plugins: readonly P[], name: string): P {
  const found = plugins.find((each) => each.name === name);
  if (found !== undefined) return found;
  const names = plugins.map((each) => each.name);
  const near = closest(name, names);
  throw new RangeError(
    `names no ${kind} ${JSON.stringify(name)}${near === undefined ? '' : ` (did you mean ${near}?)`}: the ${kind}s are ${names.join(', ')}`,
  );
}

/**
 * `params` as the settings give them for `plugin`, each checked: a mapping of its parameters'
 * names to numbers (a number written as text, from a flag or a variable, is read as one), or
 * to text for a text parameter.
 *
 * @example
 * readParams('filter', pluginNamed('filter', FILTERS, 'low-queue'), { maxWaiting: '8' }); // { maxWaiting: 8 }
 *
 * @throws {RangeError} with one line naming the plugin and what is wrong (an unknown parameter,
 * with the closest known one; a value out of its range).
 */
export function readParams<Param extends AnyParam>(
  kind: PluginKind,
  plugin: NamedPlugin<Param>,
  params: unknown,
): Record<string, Param['default']> {
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    throw new RangeError(`has ${kind} ${plugin.name} with params ${describeValue(params)}: params is a mapping`);
  }
  const known = plugin.params.map((param) => param.name);
  const checked: Record<string, Param['default']> = {};
  for (const [key, raw] of Object.entries(params)) {
    const param = plugin.params.find((each) => each.name === key);
    if (param === undefined) {
      const near = closest(key, known);
      const takes = known.length === 0 ? 'it takes none' : `it takes ${known.join(', ')}`;
      throw new RangeError(
        `has ${kind} ${plugin.name} with no parameter ${key} (${near === undefined ? takes : `did you mean ${near}?`})`,
      );
    }
    const value = isText(param) ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
    const valid = isText(param)
      ? typeof value === 'string' && param.valid(value)
      : typeof value === 'number' && param.valid(value);
    if (!valid) {
      throw new RangeError(
        `has ${kind} ${plugin.name} with ${key} ${describeValue(raw)}: it must be ${param.expected}`,
      );
    }
    checked[key] = value as Param['default'];
  }
  return checked;
}

/**
 * Every parameter of `plugin`: those `given`, the rest at their defaults (what a factory gets).
 *
 * @example
 * withDefaults(pluginNamed('filter', FILTERS, 'low-queue'), {}); // { maxWaiting: 128 }
 */
export function withDefaults<Param extends AnyParam>(
  plugin: NamedPlugin<Param>,
  given?: Readonly<Record<string, ParamValue>>,
): Record<string, Param['default']> {
  return { ...Object.fromEntries(plugin.params.map((param) => [param.name, param.default])), ...given };
}

function isText(param: AnyParam): param is TextPluginParam {
  return 'kind' in param && param.kind === 'text';
}
