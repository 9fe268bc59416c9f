// Pickers as registered plugins: the last step of a `scored` policy, choosing among the scored
// candidates (`routing.picker`, `--picker`). A new picker is its function and one entry below.
import { type PluginSetting, pluginNamed, type RoutingPlugin, readPluginEntry } from './plugin-params.js';
import { maxScorePicker, type Picker, weightedRandomPicker } from './scoring.js';
import type { RoutingServices } from './services.js';

/**
 * A picker as a plugin: its name (what `routing.picker` names), how it chooses (for the docs),
 * its parameters, the data it reads, and its factory, called once per pool.
 */
export interface PickerPlugin extends RoutingPlugin {
  create<W extends { url: string }>(params: Readonly<Record<string, number>>, services: RoutingServices<W>): Picker<W>;
}

/**
 * The picker of a `scored` policy as the settings give it.
 *
 * @example
 * const picker: PickerSetting = { name: 'weighted-random' };
 */
export type PickerSetting = PluginSetting;

/** Every built-in picker, once: the settings' choices, the help and the `scored` policy read this list. */
export const PICKERS: readonly PickerPlugin[] = [
  {
    name: 'max-score',
    help: 'the highest total, ties to the less loaded, then in turn',
    params: [],
    consumes: {},
    create: () => maxScorePicker(),
  },
  {
    name: 'weighted-random',
    help: 'at random, each worker with a chance in proportion to its total',
    params: [],
    consumes: {},
    create: (_params, services) => weightedRandomPicker(services.random),
  },
];

/** Every built-in picker's name, in the registry's order. */
export const PICKER_NAMES: readonly string[] = PICKERS.map((each) => each.name);

/** The picker when the settings name none. */
export const DEFAULT_PICKER: PickerSetting = { name: 'max-score' };

/**
 * The plugin named `name`.
 *
 * @example
 * pickerPlugin('weighted-random').name; // 'weighted-random'
 *
 * @throws {RangeError} for a name no picker has, with the closest one as a hint.
 */
export function pickerPlugin(name: string): PickerPlugin {
  return pluginNamed('picker', PICKERS, name);
}

/**
 * The picker of `routing.picker` checked: its name, or `{ name, params? }` (a file's form).
 *
 * @example
 * readPicker('weighted-random'); // { name: 'weighted-random' }
 *
 * @throws {RangeError} with one line naming the picker and what is wrong with it.
 */
export function readPicker(value: unknown): PickerSetting {
  return readPluginEntry(
    'picker',
    PICKERS,
    value,
    `a picker is one of ${PICKER_NAMES.join(', ')}, or { name, params? }`,
  );
}
